"""The step inspector's words: one round up close. First, in plain words, why the deciding draft was kept or
thrown away and where the target's own token came from; then a row per draft (at temperature 0 how
sure the drafter was and the target's own pick; above it q, p, min(1, p/q) and r)."""

from __future__ import annotations

from specviz.analysis.payoff import listing
from specviz.decoding.events import RoundEvent
from specviz.app.render.lanes import RoundTexts, RunView, target_pick_text
from specviz.app.render.rule import (
    COIN, END_OF_TEXT, GREEDY_OWN_VERDICT_TEXT, GREEDY_RULE, KEEP_CHANCE, OWN_PICK, REPLACEMENT, RIVAL_VERDICT_TEXT,
    TARGET_PICK, all_kept_sentence, ended_sentence, rival_kept_sentence, rivals_missed_sentence,
)
from specviz.app.render.tokens import (
    draft_reason, draft_verdict_text, ended_at_end_of_text, escape_text, first_pick_title, own_reason,
    prob, quoted, r_text, rejected_index, rivals_text, stopped_unsure_text, sure_text, target_sure_text, timing_text,
    token_span,
)
from specviz.app.render.tree_round import drafted_nodes, tree_inspector_html
from specviz.app.wording import as_sentence, count, every


def round_label(event: RoundEvent, texts: RoundTexts | None, greedy: bool = False) -> str:
    if ended_at_end_of_text(event):
        return f"round {event.round_index + 1}: {event.num_kept_drafts}/{event.gamma} kept, {END_OF_TEXT}"
    # the legend's name for the token the target wrote (how it chose it is the inspector's to say)
    ending = "bonus" if event.next_kind == "bonus" else REPLACEMENT
    shown = f" {short(texts.next_text)}" if texts else ""
    if event.is_tree:  # a tree round: how many guesses the one pass checked, not the judged chain's length
        return f"round {event.round_index + 1}: {event.num_accepted} kept of a tree of {len(drafted_nodes(event))}, {ending}{shown}"
    return f"round {event.round_index + 1}: {event.num_accepted}/{event.gamma} accepted, {ending}{shown}"


def short(text: str, limit: int = 16) -> str:
    shown = text.replace("\n", "↵").replace("\t", "⇥")
    return repr(shown if len(shown) <= limit else shown[: limit - 1] + "…")


def round_choices(run: RunView) -> list[tuple[str, int]]:
    lane = run.speculative
    return [
        (round_label(event, lane.round_texts.get(event.round_index), lane.greedy), event.round_index)
        for event in lane.trace.rounds
        if event.gamma > 0
    ]


def default_round(run: RunView) -> int | None:
    """The first round with a rejection (the interesting case), else the first round."""
    rounds = [event for event in run.speculative.trace.rounds if event.gamma > 0]
    chosen = next((event for event in rounds if event.next_kind == "resample"), rounds[0] if rounds else None)
    return None if chosen is None else chosen.round_index


def find_round(run: RunView, round_index) -> RoundEvent | None:
    return next((event for event in run.speculative.trace.rounds if event.round_index == round_index), None)


CELL = 'style="padding:3px 10px;border-bottom:1px solid #eee;text-align:right"'
LEFT = 'style="padding:3px 10px;border-bottom:1px solid #eee"'
# The table's columns: at temperature 0 only how sure the drafter was and the target's own pick decide
# anything (q and p are one-hot, r is drawn but compared with 0 or 1); above it, the rule's own numbers.
GREEDY_COLUMNS = (("#", "left"), ("token", "left"), ("the drafter was … sure", "right"),
                  (f"{OWN_PICK} here", "left"), ("verdict", "left"))
SAMPLED_COLUMNS = (("#", "left"), ("token", "left"), ("q(x) draft", "right"), ("p(x) target", "right"),
                   (KEEP_CHANCE, "right"), (COIN, "right"), ("verdict", "left"))


def confidence_cell(token) -> str:
    return "—" if token.draft_confidence is None else f"{token.draft_confidence:.0%}"


def draft_rows(event: RoundEvent, texts: RoundTexts, greedy: bool) -> list[str]:
    """One row per drafted token (the drafter's own first pick first, where the target took a rival)."""
    rows = []
    if event.took_rival:  # greedy: the drafter's first pick, rejected, then the rival the target took
        pick_text, taken_text = texts.guesses[0], texts.drafted[0]
        rows.append(
            f'<tr class="inspect-row inspect-rejected"><td {LEFT}>1</td>'
            f"<td {LEFT}>{token_span(pick_text, 'rejected', first_pick_title(event, texts.guesses), keep_breaks=False)}</td>"
            f"<td {CELL}>{confidence_cell(event.guesses[0])}</td>"
            f"<td {LEFT}>{token_span(taken_text, 'accepted', TARGET_PICK, keep_breaks=False)}</td>"
            f"<td {LEFT}>{RIVAL_VERDICT_TEXT['rejected']}</td></tr>"
        )
    for i, token in enumerate(event.drafted):
        verdict = event.verdict(i)
        text = texts.drafted[i] if i < len(texts.drafted) else ""
        if i == 0 and event.took_rival:
            number, verdict_text = f"rival {event.taken_guess + 1}", RIVAL_VERDICT_TEXT["taken"]
        else:
            number, verdict_text = str(i + 1), draft_verdict_text(event, i, greedy)
        if greedy:
            cells = f"<td {CELL}>{confidence_cell(token)}</td><td {LEFT}>{pick_cell(event, i, texts)}</td>"
        else:
            cells = (f"<td {CELL}>{prob(token.draft_prob)}</td><td {CELL}>{prob(token.target_prob)}</td>"
                     f"<td {CELL}>{prob(token.accept_prob)}</td><td {CELL}>{r_text(token)}</td>")
        rows.append(
            f'<tr class="inspect-row inspect-{verdict}"><td {LEFT}>{number}</td>'
            f"<td {LEFT}>{token_span(text, verdict, verdict_text, keep_breaks=False)}</td>{cells}"
            f"<td {LEFT}>{verdict_text}</td></tr>"
        )
    return rows


def pick_cell(event: RoundEvent, index: int, texts: RoundTexts) -> str:
    pick = target_pick_text(event, index, texts)
    kind = "accepted" if event.verdict(index) == "accepted" else "resample"
    return "—" if pick is None else token_span(pick, kind, TARGET_PICK, keep_breaks=False)


def own_row(event: RoundEvent, texts: RoundTexts, greedy: bool, rejected_text: str | None) -> str:
    """The target's own token of the round: where it came from, with its q and p where recorded."""
    kind = event.own_kind
    how = own_reason(event, greedy, rejected_text)
    if greedy:
        cells = f"<td {CELL}>—</td><td {LEFT}>{token_span(texts.next_text, kind, how, keep_breaks=False)}</td>"
    else:
        draft_prob, target_prob, residual_prob = own_token_probs(event)
        if kind == "resample" and residual_prob is not None:
            how += f" (residual probability {prob(residual_prob)})"
        cells = "".join(f"<td {CELL}>{'—' if value is None else prob(value)}</td>"
                        for value in (draft_prob, target_prob, None, None))  # min(1, p/q) and r: nothing drafted here
    verdict = GREEDY_OWN_VERDICT_TEXT.get(kind, how) if greedy else how  # greedy: the answer above says it whole
    return (f'<tr class="inspect-row inspect-{kind}"><td {LEFT}>+</td>'
            f"<td {LEFT}>{token_span(texts.next_text, kind, how, keep_breaks=False)}</td>{cells}"
            f"<td {LEFT}>{escape_text(verdict)}</td></tr>")


def answer_line(event: RoundEvent, texts: RoundTexts, greedy: bool) -> str:
    """The round's deciding position in plain words, before any table: why its draft was kept or thrown away, and
    where the target's own token came from."""
    rejected = rejected_index(event)
    if event.took_rival:
        pick, pick_text, taken_text = event.guesses[0], texts.guesses[0], texts.drafted[0]
        why = rival_kept_sentence(quoted(taken_text), target_sure_text(event.drafted[0]), event.taken_guess + 1,
                                  quoted(pick_text), sure_text(pick))
        return f"Why was {quoted(pick_text)} thrown away? {why}"
    if rejected is None:
        if ended_at_end_of_text(event):
            return ended_sentence(f"{event.num_kept_drafts} of the drafts")
        return all_kept_sentence(every(event.gamma, "draft").capitalize(), event.gamma == 1, quoted(texts.next_text),
                                 greedy)
    text = texts.drafted[rejected] if rejected < len(texts.drafted) else ""
    why = draft_reason(event, rejected, greedy, text, texts.own[0] if texts.own else None)
    where = own_reason(event, greedy, text)
    rivals = [quoted(rival) for rival in texts.guesses[1:]] if rejected == 0 and event.guesses else []
    missed = f" {rivals_missed_sentence(listing(rivals), len(rivals))}" if rivals else ""
    return (f"Why was {quoted(text)} rejected? {as_sentence(why)}{missed} "
            f"Where did {quoted(texts.next_text)} come from? It is {where}.")


# Where a round's tokens are pieces of characters, "(part of a character)" needs its reason.
PARTS_NOTE = ("Some tokens here are (part of a character): the tokenizer has no token for that character, so it spells "
              "it in UTF-8 bytes over 2–4 tokens; the lane draws the character on the token that completes it, and a "
              "piece can be kept or rejected like any token.")


def inspector_html(run: RunView | None, round_index) -> str:
    event = find_round(run, round_index) if run else None
    if event is None:
        return '<div class="inspector" style="color:#999">Pick a round after a run.</div>'
    texts = run.speculative.round_texts.get(event.round_index, RoundTexts([]))
    greedy = run.speculative.greedy
    if event.is_tree and texts.nodes:
        return tree_inspector_html(event, texts.nodes, greedy)
    rejected = rejected_index(event)
    rows = draft_rows(event, texts, greedy)
    if len(event.emitted_ids) > event.num_accepted:
        rows.append(own_row(event, texts, greedy, texts.drafted[rejected] if rejected is not None else None))
    header = "".join(
        f'<th style="padding:3px 10px;border-bottom:1px solid #ccc;text-align:{align}">{name}</th>'
        for name, align in (GREEDY_COLUMNS if greedy else SAMPLED_COLUMNS)
    )
    rule = f" {as_sentence(GREEDY_RULE)}" if greedy else ""
    rivals = len(event.guesses) - 1 if event.guesses else 0
    checked = (f"{count(event.gamma, 'token')} and {count(rivals, 'rival guess', 'rival guesses')} for its first "
               f"position; the target checked all {event.gamma + rivals}" if rivals
               else f"{count(event.gamma, 'token')}; the target checked {'it' if event.gamma == 1 else 'them'}")
    return (
        f'<div class="inspector"><p class="inspect-answer" style="margin:2px 0 6px;font-weight:600">'
        f"{escape_text(answer_line(event, texts, greedy))}</p>"
        # the answer above is the round's one answer; its whole account is one click away (the page's words budget)
        f'<details class="round-account"><summary style="cursor:pointer;color:#444">Round {event.round_index + 1}: '
        f'in full (drafts, timings, the rule)</summary>'
        f'<p style="margin:2px 0 6px">In round {event.round_index + 1} the drafter proposed {checked} in one forward '
        f"pass and kept {event.num_accepted}. {timing_text(event)}.{rule}"
        f"{' ' + as_sentence(stopped_unsure_text(event)) if event.stopped_unsure else ''}"
        f"{' ' + escape_text(rivals_text(event, texts.guesses, sentence=True)) + '.' if event.guesses and texts.guesses else ''}"
        f"{' ' + escape_text(PARTS_NOTE) if '' in (*texts.drafted, *texts.own) else ''}</p></details>"
        f'<table class="inspector-table" style="border-collapse:collapse;font-size:13.5px"><tr>{header}</tr>{"".join(rows)}</table></div>'
    )


def own_token_probs(event: RoundEvent) -> tuple[float | None, float | None, float | None]:
    """q, p and the residual's probability of the target's own token at the deciding position,
    from the recorded details (None where a run recorded none)."""
    position = event.num_accepted
    if not event.details or position >= len(event.details):
        return None, None, None
    detail = event.details[position]  # a bonus position has no draft_top: nothing was drafted there
    return tuple(dict(pairs).get(event.next_id) for pairs in (detail.draft_top, detail.target_top, detail.residual_top))
