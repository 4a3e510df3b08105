"""Traces → HTML: the two coloured lanes, the stats table, the step inspector, the explainer.

No gradio and no models in here: a `LaneView` is fed engine events plus a `decode` function
(ids → text) and keeps the text of every token it has shown, so everything after the run
(inspector, explainer) works from plain data. All token text is HTML-escaped; whitespace is
kept (`white-space: pre-wrap`) and newlines are drawn as ↵ so code keeps its shape; a token of
only spaces or tabs is drawn as ␣ / ⇥, else it would be an empty box.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Callable, Sequence

from specviz.events import Event, PrefillEvent, RoundEvent
from specviz.palette import COLORS
from specviz.plots import running_speedup
from specviz.trace import Trace, compare
from specviz.wording import count, every

Decode = Callable[[list[int]], str]
CONTEXT_TOKENS = 4  # ids decoded before a token to get its text in context (merged bytes, leading spaces)

# How each kind of token looks: Okabe-Ito colours as a tinted background and a solid underline,
# plus strike-through for drafts the target did not keep, so colour is never the only cue.
TOKEN_STYLES = {
    "target": "background:#ececec;border-bottom:2px solid #9a9a9a;",
    "accepted": f"background:#d4efe6;border-bottom:2px solid {COLORS['accepted']};",
    "rejected": f"background:#f8dccb;border-bottom:2px solid {COLORS['rejected']};color:#8a3300;"
    "text-decoration:line-through;text-decoration-thickness:2px;text-decoration-color:rgba(138,51,0,0.55);",
    "unexamined": "background:#f2f2f2;color:#9a9a9a;border-bottom:2px dotted #b0b0b0;text-decoration:line-through;"
    "text-decoration-color:rgba(120,120,120,0.6);",
    "resample": f"background:#fbe8c2;border-bottom:2px solid {COLORS['resample']};font-weight:600;",
    "bonus": f"background:#cfe2f3;border-bottom:2px solid {COLORS['bonus']};font-weight:600;",
}
STRUCK = ("rejected", "unexamined")
# A strike-through hides a lone "-", "," or "." entirely: such tokens get bolder glyphs and room.
SYMBOL_EMPHASIS = "font-weight:700;padding:0 3px;"
# Whitespace-only tokens would be empty boxes: spell them out. A space gets "␣" (like the charts'
# labels) rather than "·", which sits exactly where a strike-through runs.
WHITESPACE_MARKS = {"\t": "⇥"}
SPACE_MARK = "␣"
LEGEND_ITEMS = (
    ("accepted", "accepted draft", "the target agreed (r < min(1, p/q))"),
    ("rejected", "rejected draft", "struck through: r ≥ min(1, p/q), thrown away"),
    ("unexamined", "not examined", "drafted after a rejection, never checked"),
    ("resample", "resampled", "the target's correction, drawn from norm(max(0, p − q))"),
    ("bonus", "bonus", "all γ drafts accepted: one more token from p for free"),
    ("target", "target token", "the target's own sample (baseline lane, first token)"),
)
LANE_STYLE = (
    "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13.5px;line-height:1.9;"
    "white-space:pre-wrap;word-break:break-word;padding:10px 12px;border:1px solid #d0d0d0;border-radius:8px;"
    "min-height:120px;background:#fff;color:#1a1a1a;"
)


def escape_text(text: str) -> str:
    """HTML-escape, and neutralise template syntax ($, `, {, }) the page's templating might read."""
    escaped = html.escape(text, quote=True)
    return escaped.replace("$", "&#36;").replace("`", "&#96;").replace("{", "&#123;").replace("}", "&#125;")


def visible_text(text: str, keep_breaks: bool = True) -> str:
    """Escaped token text with newlines drawn as ↵ (and kept as line breaks only if keep_breaks)."""
    if text == "":
        return '<span style="color:#999">∅</span>'
    if is_blank(text):
        return mark_whitespace(text)
    parts = []
    for i, line in enumerate(text.split("\n")):
        if i:
            parts.append('<span class="nl" style="color:#999">↵</span>' + ("\n" if keep_breaks else ""))
        parts.append(escape_text(line if keep_breaks else line.replace("\t", "⇥")))
    return "".join(parts)


def is_blank(text: str) -> bool:
    """Whitespace only and no newline: it would draw as nothing (a newline already draws as ↵)."""
    return text != "" and text.strip() == "" and "\n" not in text


def mark_whitespace(text: str) -> str:
    """Draw each blank character as a faint visible mark (the token's text itself is unchanged)."""
    marks = "".join(WHITESPACE_MARKS.get(char, SPACE_MARK) for char in text)
    return f'<span class="ws" style="opacity:0.7">{marks}</span>'


def is_symbolic(text: str) -> bool:
    """No letter or digit: punctuation and whitespace, which a strike-through can wipe out."""
    return text != "" and not any(char.isalnum() for char in text)


def token_span(text: str, kind: str, title: str, keep_breaks: bool = True) -> str:
    emphasis = SYMBOL_EMPHASIS if kind in STRUCK and is_symbolic(text) else ""
    return (
        f'<span class="tok tok-{kind}" style="{TOKEN_STYLES[kind]}border-radius:3px;padding:0 1px;margin:0 1px 0 0;{emphasis}" '
        f'title="{escape_text(title)}">{visible_text(text, keep_breaks)}</span>'
    )


def legend_html() -> str:
    items = "".join(
        f'<span style="margin-right:14px;white-space:nowrap" title="{escape_text(help_text)}">'
        f'{token_span(name, kind, help_text, keep_breaks=False)}</span>'
        for kind, name, help_text in LEGEND_ITEMS
    )
    return f'<div class="legend" style="font-size:13px;line-height:2">{items}</div>'


def prob(value: float) -> str:
    """Probabilities to three decimals, small ones in scientific notation so they never read 0.000."""
    return f"{value:.3f}" if value == 0 or value >= 0.001 else f"{value:.1e}"


def r_text(token) -> str:
    """The draw r, marked "(unused)" for drafts after the rejection: nothing compared it."""
    return f"{token.r:.3f}" + ("" if token.decided else " (unused)")


def drafted_title(index: int, gamma: int, token, verdict: str) -> str:
    return (
        f"draft {index + 1}/{gamma} · q(x) = {prob(token.draft_prob)} · p(x) = {prob(token.target_prob)} · "
        f"min(1, p/q) = {prob(token.accept_prob)} · r = {r_text(token)} → {verdict}"
    )


VERDICT_TEXT = {
    "accepted": "accepted (r < min(1, p/q))",
    "rejected": "rejected (r ≥ min(1, p/q))",
    "unexamined": "not examined (after the rejection)",
}


@dataclass
class RoundTexts:
    """The text of one round's tokens, as shown."""

    drafted: list[str]
    next_text: str


@dataclass
class LaneView:
    """One lane as the page shows it: its trace, its HTML fragments and the text of every token."""

    lane: str
    prompt_ids: list[int]
    prompt_text: str
    chat: bool = False  # the prompt went through the chat template: show it as a user turn
    trace: Trace = field(default_factory=Trace)
    fragments: list[str] = field(default_factory=list)
    committed_ids: list[int] = field(default_factory=list)  # prompt + generated
    first_text: str = ""
    round_texts: dict[int, RoundTexts] = field(default_factory=dict)
    labels: dict[int, str] = field(default_factory=dict)  # token id → text alone (inspector charts)

    def __post_init__(self):
        self.trace.lane = self.lane
        self.committed_ids = list(self.prompt_ids)

    def piece(self, decode: Decode, context_ids: Sequence[int], token_id: int) -> str:
        """The text a token adds after its context (decoding alone loses leading spaces, split bytes)."""
        context = list(context_ids[-CONTEXT_TOKENS:])
        before = decode(context)
        after = decode(context + [token_id])
        return after[len(before) :] if after.startswith(before) else decode([token_id])

    def add(self, event: Event, decode: Decode) -> None:
        self.trace.add(event)
        if isinstance(event, PrefillEvent):
            self.first_text = self.piece(decode, self.committed_ids, event.next_id)
            self.committed_ids.append(event.next_id)
            self.fragments.append(token_span(self.first_text, "target", "the target's first token (from the prompt's prefill)"))
        elif isinstance(event, RoundEvent):
            self.fragments.append(self.round_html(event, decode))
            self.committed_ids.extend(event.emitted_ids)

    def round_html(self, event: RoundEvent, decode: Decode) -> str:
        if self.lane == "baseline":
            text = self.piece(decode, self.committed_ids, event.next_id)
            self.round_texts[event.round_index] = RoundTexts([], text)
            return token_span(text, "target", f"token {event.position + 1}: one target forward")
        context = list(self.committed_ids)
        num_emitted = len(event.emitted_ids)
        drafted_texts, spans = [], []
        for i, token in enumerate(event.drafted):
            text = self.piece(decode, context, token.token_id)
            context.append(token.token_id)
            drafted_texts.append(text)
            verdict = event.verdict(i)
            title = drafted_title(i, event.gamma, token, VERDICT_TEXT[verdict])
            spans.append(token_span(text, verdict, title, keep_breaks=verdict == "accepted"))
        next_text = ""
        if num_emitted > event.num_accepted:  # the target's own token was kept (not cut by an EOS)
            next_text = self.piece(decode, self.committed_ids + list(event.emitted_ids[:-1]), event.next_id)
            if event.next_kind == "resample":
                title = "resampled by the target from norm(max(0, p − q)) at the rejected position"
            elif event.gamma == 0:
                title = "no room left to draft: one plain target step"
            else:
                title = f"bonus: {every(event.gamma, 'draft')} accepted, so the target's verify pass gives one more token from p"
            kind = "resample" if event.next_kind == "resample" else ("bonus" if event.gamma > 0 else "target")
            spans.append(token_span(next_text, kind, title))
        self.round_texts[event.round_index] = RoundTexts(drafted_texts, next_text)
        self.remember_labels(event, decode)
        separator = '<span class="round-sep" style="border-left:1px dashed #bbb;margin:0 2px 0 1px"></span>'
        return f'<span class="round" data-round="{event.round_index + 1}">{"".join(spans)}</span>{separator}'

    def remember_labels(self, event: RoundEvent, decode: Decode) -> None:
        """Texts of the tokens the inspector's chart shows (the deciding position's top tokens)."""
        if not event.details or event.num_accepted >= len(event.details):
            return
        detail = event.details[event.num_accepted]
        for token_id, _ in (*detail.draft_top, *detail.target_top, *detail.residual_top):
            if token_id not in self.labels:
                self.labels[token_id] = decode([token_id])
        for token in event.drafted:
            self.labels.setdefault(token.token_id, decode([token.token_id]))
        self.labels.setdefault(event.next_id, decode([event.next_id]))

    @property
    def text(self) -> str:
        """The generated text (no prompt), joined from the shown pieces."""
        pieces = [self.first_text] if self.trace.prefill else []
        for event in self.trace.rounds:
            texts = self.round_texts.get(event.round_index)
            if texts is None:
                continue
            num_emitted = len(event.emitted_ids)
            pieces.extend(texts.drafted[: min(event.num_accepted, num_emitted)])
            if num_emitted > event.num_accepted:
                pieces.append(texts.next_text)
        return "".join(pieces)

    def html(self, title: str, status: str = "", run_id: int = 0) -> str:
        trace = self.trace
        done = "true" if trace.done else "false"
        figures = ""
        if trace.prefill:
            figures = f"{count(trace.num_tokens, 'token')} · {trace.wall_s:.2f} s · {trace.tokens_per_s:.1f} tokens/s"
        if status:
            figures = f"{figures} · {status}" if figures else status
        prompt = f'<span class="prompt" style="color:#8a8a8a">{visible_text(self.prompt_text)}</span>'
        if self.chat:  # the template's markup stays hidden: the user's words, then the answer
            prompt = (
                f'<div class="prompt prompt-chat" style="color:#8a8a8a;margin-bottom:4px">'
                f'<span class="chat-role" style="font-weight:600">you:</span> {visible_text(self.prompt_text)}</div>'
                f'<span class="chat-role" style="color:#8a8a8a;font-weight:600">answer:</span> '
            )
        return (
            f'<div class="lane lane-{self.lane}" data-lane="{self.lane}" data-done="{done}" '
            f'data-tokens="{trace.num_tokens}" data-run="{run_id}">'
            f'<div style="display:flex;justify-content:space-between;font-weight:600;margin:0 0 6px 2px;font-size:14px">'
            f'<span>{escape_text(title)}</span><span class="lane-figures" style="font-weight:400;color:#555">'
            f"{escape_text(figures)}</span></div>"
            f'<div class="lane-text" style="{LANE_STYLE}">{prompt}{"".join(self.fragments)}</div></div>'
        )


@dataclass
class RunView:
    """Everything the page shows about one run: kept in the session for the inspector."""

    prompt_text: str
    prompt_ids: list[int]
    gamma: int
    settings: dict
    run_id: int = 0  # numbers the runs of a server, so a page (or a test) can tell them apart
    chat: bool = False  # the prompt went through the pair's chat template
    baseline: LaneView = None
    speculative: LaneView = None

    def __post_init__(self):
        self.baseline = self.baseline or LaneView("baseline", self.prompt_ids, self.prompt_text, self.chat)
        self.speculative = self.speculative or LaneView("speculative", self.prompt_ids, self.prompt_text, self.chat)

    def lane(self, name: str) -> LaneView:
        return self.baseline if name == "baseline" else self.speculative

    def add(self, event: Event, decode: Decode) -> None:
        self.lane(event.lane).add(event, decode)

    @property
    def done(self) -> bool:
        return self.baseline.trace.done and self.speculative.trace.done


def stop_text(trace: Trace, max_new_tokens: int | None = None) -> str | None:
    """Why a finished lane stopped, in words; None while it runs."""
    if trace.finish is None:
        return None
    reason = trace.finish.stop_reason
    if reason == "eos":
        # Say it ended early: the end-of-text token itself often draws as nothing (∅).
        limit = f" before the {max_new_tokens}-token limit" if max_new_tokens and trace.finish.num_new_tokens < max_new_tokens else ""
        return f"stopped at end of text{limit}"
    return {"context_length": "context full", "max_new_tokens": "done (token limit)", "stopped": "stopped"}.get(reason, "done")


def lane_status(trace: Trace, running: bool, max_new_tokens: int | None = None) -> str:
    if trace.finish:
        return stop_text(trace, max_new_tokens)
    return "generating…" if running else "waiting"


def lanes_html(run: RunView | None, active: str | None = None) -> tuple[str, str]:
    """The two lanes' HTML; `active` names the lane now generating."""
    if run is None:
        empty = '<div class="lane" data-done="false" style="{}color:#999">press Run</div>'.format(LANE_STYLE)
        return empty, empty
    limit = run.settings.get("max_new_tokens")
    return (
        run.baseline.html("Target only (baseline)", lane_status(run.baseline.trace, active == "baseline", limit), run.run_id),
        run.speculative.html("Speculative decoding", lane_status(run.speculative.trace, active == "speculative", limit), run.run_id),
    )


# --- stats ----------------------------------------------------------------------------------


def stats_dict(run: RunView) -> dict:
    """The run's figures as plain numbers (the API returns these; the table shows them)."""
    baseline, speculative = run.baseline.trace, run.speculative.trace
    stats = {
        "settings": dict(run.settings),
        "baseline": baseline.summary(),
        "speculative": speculative.summary(),
    }
    if baseline.rounds and speculative.rounds:
        comparison = compare(baseline, speculative, run.gamma)
        stats.update(
            speedup=comparison.speedup,
            predicted_speedup=comparison.predicted_speedup,
            acceptance_rate=comparison.acceptance_rate,
            cost_ratio=comparison.cost_ratio,
            best_gamma=comparison.best_gamma,
            speculation_pays=comparison.pays,
        )
    return stats


def stats_html(run: RunView | None) -> str:
    if run is None or not run.baseline.trace.prefill:
        return '<div class="stats" style="color:#999">Statistics appear once a run starts.</div>'
    baseline, speculative = run.baseline.trace, run.speculative.trace
    both = bool(baseline.rounds and speculative.rounds)
    comparison = compare(baseline, speculative, run.gamma) if both else None
    limit = run.settings.get("max_new_tokens")
    dash = "—"

    def fmt(value, spec):
        return dash if value is None else format(value, spec)

    rows = [
        ("tokens generated", baseline.num_tokens, speculative.num_tokens if speculative.prefill else None, "d"),
        ("wall time of model work (s)", baseline.wall_s, speculative.wall_s if speculative.prefill else None, ".3f"),
        ("tokens / s", baseline.tokens_per_s, speculative.tokens_per_s if speculative.prefill else None, ".1f"),
        ("target forward passes", baseline.num_target_forwards, speculative.num_target_forwards if speculative.prefill else None, "d"),
        ("draft forward passes", baseline.num_draft_forwards, speculative.num_draft_forwards if speculative.prefill else None, "d"),
        ("tokens per target call (rounds)", baseline.mean_tokens_per_round, speculative.mean_tokens_per_round if speculative.rounds else None, ".2f"),
        ("why it stopped", stop_text(baseline, limit), stop_text(speculative, limit), "s"),
    ]
    cell = 'style="padding:3px 12px;border-bottom:1px solid #eee;text-align:right"'
    head = 'style="padding:3px 12px;border-bottom:1px solid #ccc;text-align:right"'
    body = "".join(
        f'<tr><td style="padding:3px 12px;border-bottom:1px solid #eee">{name}</td>'
        f"<td {cell}>{fmt(a, spec)}</td><td {cell}>{fmt(b, spec)}</td></tr>"
        for name, a, b, spec in rows
    )
    table = (
        '<table class="stats-table" style="border-collapse:collapse;font-size:13.5px">'
        f'<tr><th style="padding:3px 12px;border-bottom:1px solid #ccc;text-align:left"></th><th {head}>target only</th>'
        f"<th {head}>speculative</th></tr>{body}</table>"
    )
    if comparison is None:
        headline = "<p>Speedup appears once the speculative lane has run a round.</p>"
        theory = ""
    else:
        state = "" if run.done else " (so far)"
        headline = (
            f'<p style="font-size:16px;margin:4px 0 8px">Speedup: speculative decoding ran '
            f'<b class="speedup" data-speedup="{comparison.speedup:.4f}" style="font-size:20px;color:{COLORS["bonus"]}">'
            f"{comparison.speedup:.2f}×</b> as fast as the target alone{state} — Leviathan's formula predicts "
            f'<b class="predicted-speedup">{comparison.predicted_speedup:.2f}×</b>.</p>'
        )
        pays = "α̂ > c, so speculation pays" if comparison.pays else "α̂ ≤ c, so no γ can beat the target alone"
        theory = (
            '<table class="theory-table" style="border-collapse:collapse;font-size:13.5px">'
            f'<tr><td style="padding:3px 12px">acceptance rate α̂ (accepted / examined drafts)</td><td {cell}>{comparison.acceptance_rate:.3f}</td></tr>'
            f'<tr><td style="padding:3px 12px">cost ratio c (draft step / target step)</td><td {cell}>{comparison.cost_ratio:.3f}</td></tr>'
            f'<tr><td style="padding:3px 12px">measured speedup (tokens/s ratio)</td><td {cell}>{comparison.speedup:.2f}×</td></tr>'
            f'<tr><td style="padding:3px 12px">predicted speedup (1 − α̂^(γ+1)) / ((1 − α̂)(γc + 1)), γ = {run.gamma}</td><td {cell}>{comparison.predicted_speedup:.2f}×</td></tr>'
            f'<tr><td style="padding:3px 12px">recommended γ for this α̂ and c</td><td {cell}>{comparison.best_gamma}</td></tr>'
            f'<tr><td colspan="2" style="padding:3px 12px;color:#555">{pays}</td></tr></table>'
        )
    return (
        f'<div class="stats">{headline}<div style="display:flex;gap:28px;flex-wrap:wrap;align-items:flex-start">'
        f"{table}{theory}</div></div>"
    )


# --- step inspector -----------------------------------------------------------------------------


def round_label(event: RoundEvent, texts: RoundTexts | None) -> str:
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
    texts = run.speculative.round_texts.get(event.round_index, RoundTexts([], ""))
    num_emitted = len(event.emitted_ids)
    cell = 'style="padding:3px 10px;border-bottom:1px solid #eee;text-align:right"'
    left = 'style="padding:3px 10px;border-bottom:1px solid #eee"'
    rows = []
    for i, token in enumerate(event.drafted):
        verdict = event.verdict(i)
        text = texts.drafted[i] if i < len(texts.drafted) else ""
        rows.append(
            f'<tr class="inspect-row inspect-{verdict}"><td {left}>{i + 1}</td>'
            f"<td {left}>{token_span(text, verdict, VERDICT_TEXT[verdict], keep_breaks=False)}</td>"
            f"<td {cell}>{prob(token.draft_prob)}</td><td {cell}>{prob(token.target_prob)}</td>"
            f"<td {cell}>{prob(token.accept_prob)}</td>"
            f"<td {cell}>{r_text(token)}</td>"
            f"<td {left}>{VERDICT_TEXT[verdict]}</td></tr>"
        )
    if num_emitted > event.num_accepted:
        kind = "resample" if event.next_kind == "resample" else "bonus"
        how = (
            "resampled from norm(max(0, p − q)) at the rejected position"
            if kind == "resample"
            else "bonus: sampled from p after the last draft"
        )
        rows.append(
            f'<tr class="inspect-row inspect-{kind}"><td {left}>+</td>'
            f"<td {left}>{token_span(texts.next_text, kind, how, keep_breaks=False)}</td>"
            f'<td {cell}>—</td><td {cell}>—</td><td {cell}>—</td><td {cell}>—</td><td {left}>{how}</td></tr>'
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
        f"and kept {event.num_accepted}. {timing}.</p>"
        f'<table class="inspector-table" style="border-collapse:collapse;font-size:13.5px"><tr>{header}</tr>{"".join(rows)}</table></div>'
    )


# --- how it works ---------------------------------------------------------------------------------


INTRO = (
    "<p><b>Speculative decoding</b> (Leviathan et al. 2023; Chen et al. 2023) lets a small <i>draft</i> model "
    "guess γ tokens one by one, then runs the big <i>target</i> model <b>once</b> over all of them. Each guess x "
    "is kept with probability min(1, p(x)/q(x)), where q is the draft's probability and p the target's: the "
    "page draws r ~ U(0,1) and keeps x if r &lt; min(1, p/q). At the first rejection the target replaces the "
    "token with one drawn from the residual norm(max(0, p − q)); if every guess survives, the same target pass "
    "yields one bonus token. This rule makes the output distributed <i>exactly</i> as if the target had "
    "generated alone, only with fewer slow target passes.</p>"
)


def explain_html(run: RunView | None) -> str:
    """The explainer, pointing at this run's own tokens."""
    if run is None or not run.speculative.trace.rounds:
        return INTRO + "<p><i>Run the demo to see this explained with its own tokens.</i></p>"
    lane = run.speculative
    rounds = [event for event in lane.trace.rounds if event.gamma > 0]
    rejected = next((e for e in rounds if e.next_kind == "resample"), None)
    bonus = next((e for e in rounds if e.next_kind == "bonus"), None)
    # One example of each ending, cited in the order the rounds ran (a reader scans forward).
    examples = sorted((e for e in (rejected, bonus) if e is not None), key=lambda e: e.round_index)
    points = [explain_rejection(lane, e) if e is rejected else explain_bonus(lane, e) for e in examples]
    baseline, speculative = run.baseline.trace, lane.trace
    if baseline.rounds and speculative.rounds:
        comparison = compare(baseline, speculative, run.gamma)
        speedup = running_speedup(baseline, speculative) or 0.0
        points.append(
            f"Over the run the target accepted α̂ = {comparison.acceptance_rate:.2f} of the drafts it examined and "
            f"made {count(speculative.num_target_forwards, 'pass', 'passes')} instead of {baseline.num_target_forwards}; each draft "
            f"step cost c = {comparison.cost_ratio:.2f} of a target step. With γ = {run.gamma} the formula "
            f"(1 − α^(γ+1)) / ((1 − α)(γc + 1)) predicts {comparison.predicted_speedup:.2f}×; the clock measured "
            f"{speedup:.2f}×. The formula's best γ here is {comparison.best_gamma}."
        )
        if run.settings.get("temperature", 0) == 0:
            points.append(
                "With temperature 0 (greedy) both models pick their most likely token, so a draft is kept exactly "
                "when the target would have picked it too, and both lanes print identical text."
            )
    items = "".join(f"<li style='margin-bottom:6px'>{point}</li>" for point in points)
    return INTRO + f"<p><b>In this run:</b></p><ul>{items}</ul>"


def explain_rejection(lane: LaneView, event: RoundEvent) -> str:
    """One sentence on a round that ended in a rejection: p, q, min(1, p/q), r, then the resample."""
    texts = lane.round_texts[event.round_index]
    proposed = " ".join(inline_token(text, event.verdict(i)) for i, text in enumerate(texts.drafted))
    bad = event.drafted[event.num_accepted]
    return (
        f"In round {event.round_index + 1} the draft proposed {proposed}. The target accepted "
        f"{event.num_accepted}; at {inline_token(texts.drafted[event.num_accepted], 'rejected')} it gave "
        f"p = {prob(bad.target_prob)} against the draft's q = {prob(bad.draft_prob)}, so the chance to keep it was "
        f"min(1, p/q) = {prob(bad.accept_prob)} and the draw r = {bad.r:.3f} rejected it. The target then resampled "
        f"{inline_token(texts.next_text, 'resample')} from the residual distribution: "
        f"{count(event.num_accepted + 1, 'token')} for one target pass."
    )


def explain_bonus(lane: LaneView, event: RoundEvent) -> str:
    """One sentence on a round whose drafts were all accepted, so the verify pass gave a bonus token."""
    texts = lane.round_texts[event.round_index]
    proposed = " ".join(inline_token(text, "accepted") for text in texts.drafted)
    return (
        f"In round {event.round_index + 1} {every(event.gamma, 'draft')} {'was' if event.gamma == 1 else 'were'} "
        f"accepted ({proposed}), so the verify pass also gave the bonus token {inline_token(texts.next_text, 'bonus')}: "
        f"{count(len(event.emitted_ids), 'token')} for one target pass."
    )


def inline_token(text: str, kind: str) -> str:
    return token_span(text, kind, kind, keep_breaks=False)
