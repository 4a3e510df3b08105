"""The step inspector: one round up close (q, p, min(1, p/q), r and the verdict per draft)."""

from __future__ import annotations

from specviz.decoding.events import RoundEvent
from specviz.app.render.lanes import RoundTexts, RunView
from specviz.app.render.tokens import (
    END_OF_TEXT, draft_verdict_text, ended_at_end_of_text, escape_text, prob, r_text, rivals_text, stopped_unsure_text,
    token_span,
)
from specviz.app.wording import count


def round_label(event: RoundEvent, texts: RoundTexts | None) -> str:
    if ended_at_end_of_text(event):
        return f"round {event.round_index + 1}: {event.num_kept_drafts}/{event.gamma} kept, {END_OF_TEXT}"
    ending = "bonus" if event.next_kind == "bonus" else "resampled"
    shown = f" {short(texts.next_text)}" if texts else ""
    return f"round {event.round_index + 1}: {event.num_accepted}/{event.gamma} accepted, {ending}{shown}"


def short(text: str, limit: int = 16) -> str:
    shown = text.replace("\n", "↵").replace("\t", "⇥")
    return repr(shown if len(shown) <= limit else shown[: limit - 1] + "…")


def round_choices(run: RunView) -> list[tuple[str, int]]:
    lane = run.speculative
    return [
        (round_label(event, lane.round_texts.get(event.round_index)), event.round_index)
        for event in lane.trace.rounds
        if event.gamma > 0
    ]


def default_round(run: RunView) -> int | None:
    """The first round with a rejection (the interesting case), else the first round."""
    rounds = [event for event in run.speculative.trace.rounds if event.gamma > 0]
    for event in rounds:
        if event.next_kind == "resample":
            return event.round_index
    return rounds[0].round_index if rounds else None


def find_round(run: RunView, round_index) -> RoundEvent | None:
    for event in run.speculative.trace.rounds:
        if event.round_index == round_index:
            return event
    return None


def inspector_html(run: RunView | None, round_index) -> str:
    event = find_round(run, round_index) if run else None
    if event is None:
        return '<div class="inspector" style="color:#999">Pick a round after a run.</div>'
    texts = run.speculative.round_texts.get(event.round_index, RoundTexts([]))
    num_emitted = len(event.emitted_ids)
    cell = 'style="padding:3px 10px;border-bottom:1px solid #eee;text-align:right"'
    left = 'style="padding:3px 10px;border-bottom:1px solid #eee"'
    rows = []
    for i, token in enumerate(event.drafted):
        verdict = event.verdict(i)
        text = texts.drafted[i] if i < len(texts.drafted) else ""
        rows.append(
            f'<tr class="inspect-row inspect-{verdict}"><td {left}>{i + 1}</td>'
            f"<td {left}>{token_span(text, verdict, draft_verdict_text(event, i), keep_breaks=False)}</td>"
            f"<td {cell}>{prob(token.draft_prob)}</td><td {cell}>{prob(token.target_prob)}</td>"
            f"<td {cell}>{prob(token.accept_prob)}</td>"
            f"<td {cell}>{r_text(token)}</td>"
            f"<td {left}>{draft_verdict_text(event, i)}</td></tr>"
        )
    if num_emitted > event.num_accepted:
        kind = "resample" if event.next_kind == "resample" else "bonus"
        draft_prob, target_prob, residual_prob = own_token_probs(event)
        how = (
            "resampled from norm(max(0, p − q)) at the rejected position"
            + (f" (residual probability {prob(residual_prob)})" if residual_prob is not None else "")
            if kind == "resample"
            else "bonus: sampled from p after the last draft"
        )
        q_cell = prob(draft_prob) if draft_prob is not None else "—"
        p_cell = prob(target_prob) if target_prob is not None else "—"
        rows.append(
            f'<tr class="inspect-row inspect-{kind}"><td {left}>+</td>'
            f"<td {left}>{token_span(texts.next_text, kind, how, keep_breaks=False)}</td>"
            f'<td {cell}>{q_cell}</td><td {cell}>{p_cell}</td><td {cell}>—</td><td {cell}>—</td><td {left}>{how}</td></tr>'
        )
    header = "".join(
        f'<th style="padding:3px 10px;border-bottom:1px solid #ccc;text-align:{align}">{name}</th>'
        for name, align in (
            ("#", "left"), ("token", "left"), ("q(x) draft", "right"), ("p(x) target", "right"),
            ("min(1, p/q)", "right"), ("r ~ U(0,1)", "right"), ("verdict", "left"),
        )
    )
    timing = (
        f"drafting {event.draft_s * 1000:.1f} ms ({count(event.num_draft_forwards, 'draft pass', 'draft passes')}), "
        f"verifying {event.verify_s * 1000:.1f} ms (1 target pass)"
    )
    return (
        f'<div class="inspector"><p style="margin:2px 0 6px">Round {event.round_index + 1}: the draft proposed '
        f"{count(event.gamma, 'token')}; the target checked {'it' if event.gamma == 1 else 'them'} in one forward pass "
        f"and kept {event.num_accepted}. {timing}.{' ' + stopped_unsure_text(event).capitalize() + '.' if event.stopped_unsure else ''}"
        f"{' ' + escape_text(rivals_text(event, texts.drafted[0], texts.rivals, sentence=True)) + '.' if event.rivals and texts.rivals else ''}</p>"
        f'<table class="inspector-table" style="border-collapse:collapse;font-size:13.5px"><tr>{header}</tr>{"".join(rows)}</table></div>'
    )


def own_token_probs(event: RoundEvent) -> tuple[float | None, float | None, float | None]:
    """q, p and the residual's probability of the target's own token at the deciding position,
    from the recorded details (None where a run recorded none)."""
    position = event.num_accepted
    if not event.details or position >= len(event.details):
        return None, None, None
    detail = event.details[position]
    found = [dict(pairs).get(event.next_id) for pairs in (detail.draft_top, detail.target_top, detail.residual_top)]
    if not detail.draft_top:  # a bonus position: nothing was drafted there
        found[0] = None
    return found[0], found[1], found[2]
