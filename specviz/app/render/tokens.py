"""One token as HTML: escaped, its whitespace made visible, styled by its kind (palette.TOKEN_STYLES).

All token text is HTML-escaped; whitespace is kept (`white-space: break-spaces`) and newlines are
drawn as ↵ so code keeps its shape; a token of only spaces or tabs is drawn as ␣ / ⇥, else it
would be an empty box.
"""

from __future__ import annotations

import html

from specviz.app.palette import TOKEN_STYLES

CONTEXT_TOKENS = 4  # ids decoded before a token to get its text in context (merged bytes, leading spaces)

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
# break-spaces and overflow-wrap:anywhere: a run of indentation or a long unbroken token wraps inside
# the box at any width (pre-wrap let trailing spaces hang past the border on a narrow page).
LANE_STYLE = (
    "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13.5px;line-height:1.9;"
    "white-space:break-spaces;overflow-wrap:anywhere;padding:10px 12px;border:1px solid #d0d0d0;border-radius:8px;"
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
    stop_help = "the draft was unsure of its last token, so the round stopped drafting before γ"
    items += (f'<span style="white-space:nowrap;color:#555" title="{stop_help}">'
              f'<b style="color:#888">{STOP_MARK}</b> drafting stopped: draft unsure</span>')
    rivals_help = "greedy: where the draft was unsure, its next guesses for the same position, verified in the same pass"
    items += (f'<span style="white-space:nowrap;color:#555;margin-left:14px" title="{rivals_help}">'
              f'<sup style="color:#888;text-decoration:line-through">abc</sup> rival guesses</span>')
    return f'<div class="legend" style="font-size:13px;line-height:2">{items}</div>'


def prob(value: float) -> str:
    """Probabilities to three decimals, small ones in scientific notation so they never read 0.000."""
    return f"{value:.3f}" if value == 0 or value >= 0.001 else f"{value:.1e}"


def r_text(token) -> str:
    """The draw r, marked "(unused)" for drafts after the rejection: nothing compared it."""
    return f"{token.r:.3f}" + ("" if token.decided else " (unused)")


def greedy_q_note(token) -> str:
    """Why q(x) reads 1 beside a low confidence: the confidence is the drafter's own softmax, while at
    temperature 0 q is one-hot on its top guess ("" where the two do not clash)."""
    if token.draft_confidence is None or token.draft_prob != 1.0 or token.draft_confidence >= 0.995:
        return ""
    return (f"{token.draft_confidence:.0%} is the draft's own softmax; q(x) reads 1 because at temperature 0 "
            "the draft takes its top guess outright")


def drafted_title(index: int, gamma: int, token, verdict: str) -> str:
    note = greedy_q_note(token)
    sure = "" if token.draft_confidence is None else f" · the draft was {token.draft_confidence:.0%} sure"
    sure += f" ({note})" if note else ""
    return (
        f"draft {index + 1}/{gamma} · q(x) = {prob(token.draft_prob)} · p(x) = {prob(token.target_prob)} · "
        f"min(1, p/q) = {prob(token.accept_prob)} · r = {r_text(token)} → {verdict}{sure}"
    )


def stopped_unsure_text(event) -> str:
    """Why a round drafted fewer than γ tokens, where the confidence stop ended it ("" otherwise)."""
    if not event.stopped_unsure:
        return ""
    last = event.drafted[-1]
    note = greedy_q_note(last)
    return (f"drafting stopped after {event.gamma} token{'s' if event.gamma != 1 else ''}: the draft was only "
            f"{last.draft_confidence:.0%} sure of the last one, below the confidence threshold, so guessing on "
            f"would likely be wasted verify work{f' ({note})' if note else ''}")


def rivals_text(event, chosen_text: str, rival_texts: list[str], sentence: bool = False) -> str:
    """Why a round's first position shows more than one guess, and which the target took
    (`sentence`: starting with a capital, to follow another sentence)."""
    guesses = [(chosen_text, event.drafted[0]), *zip(rival_texts, event.rivals)]
    guesses.sort(key=lambda guess: -(guess[1].draft_confidence or 0.0))
    listed = ", ".join(f"'{text}' ({token.draft_confidence:.0%})" for text, token in guesses)
    top_text = guesses[0][0]
    if not event.drafted[0].accepted:
        outcome = "none of them was the target's own choice, so the target wrote its token itself"
    elif not event.took_rival:
        outcome = f"the target agreed with the draft's first pick '{top_text}'; the others were dropped"
    else:
        outcome = (f"the target's own choice was '{chosen_text}', not the draft's first pick '{top_text}', "
                   f"so the round took it: a token the chain alone would have lost")
    return (f"{'R' if sentence else 'r'}ival guesses: the draft was unsure of its first guess here, so it offered {len(guesses)} at once, "
            f"{listed}; the target judged them all in its one verify (each at this position, seeing the text "
            f"and itself, never the others): {outcome}")


def rivals_marker(event, chosen_text: str, rival_texts: list[str]) -> str:
    """The rivals of a round's first draft, small and struck through after it, explained on hover."""
    if not event.rivals:
        return ""
    struck = " ".join(visible_text(text, keep_breaks=False) for text in rival_texts)
    return (f'<span class="rivals" title="{escape_text(rivals_text(event, chosen_text, rival_texts))}" '
            f'style="font-size:11px;color:#888;text-decoration:line-through;vertical-align:super">{struck}</span>')


STOP_MARK = "‖"  # after the drafts of a round the confidence stop ended; in every font, unlike an emoji


def stop_marker(event) -> str:
    """A hand after the drafts of a round the confidence stop ended, explained on hover."""
    if not event.stopped_unsure:
        return ""
    return (f'<span class="unsure-stop" title="{escape_text(stopped_unsure_text(event))}" '
            f'style="color:#888;font-weight:bold">{STOP_MARK}</span>')



VERDICT_TEXT = {
    "accepted": "accepted (r < min(1, p/q))",
    "rejected": "rejected (r ≥ min(1, p/q))",
    "unexamined": "not examined (after the rejection)",
}
# One wording for a round that an accepted end-of-text token cut short, in the lane, the inspector, its
# round list and the explainer (RoundEvent.num_kept_drafts decides which drafts it leaves in the text).
END_OF_TEXT = "the text ended at the end-of-text token"
DROPPED_TEXT = "accepted, then dropped: it comes after the end-of-text token"


def ended_at_end_of_text(event) -> bool:
    """An accepted end-of-text ended the text inside this round: no target token of its own was kept."""
    return event.gamma > 0 and len(event.emitted_ids) == event.num_kept_drafts


def draft_verdict_text(event, index: int) -> str:
    """How drafted token `index` is described: its verdict, or dropped after an accepted end-of-text."""
    verdict = event.verdict(index)
    if verdict == "unexamined" and event.drafted[index].accepted:
        return DROPPED_TEXT
    return VERDICT_TEXT[verdict]



def inline_token(text: str, kind: str) -> str:
    return token_span(text, kind, kind, keep_breaks=False)
