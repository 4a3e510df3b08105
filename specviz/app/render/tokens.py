"""One token as HTML: escaped, its whitespace made visible (↵ for a newline, so code keeps its shape; ␣ / ⇥ for a
token of only spaces or tabs, else an empty box), styled by its kind (palette.TOKEN_STYLES); and the words of its
hover: why a draft was kept or thrown away, where the target's own token came from.
"""

from __future__ import annotations

import html
import re

from specviz.app.palette import TOKEN_STYLES
from specviz.app.render.pieces import PART_LABEL
from specviz.app.render.rule import (
    DROPPED_TEXT, GREEDY_RULE, GREEDY_VERDICT_TEXT, KEEP_CHANCE, LEGEND_HELP, NOT_EXAMINED, REPLACEMENT, VERDICT_TEXT,
    bonus_reason, coin_reason, kept_reason, rejected_reason, replacement_reason, rival_rejected_reason,
    rival_taken_reason, rivals_reason,
)
from specviz.app.wording import count, every


STRUCK = ("rejected", "unexamined")
# A strike-through hides a lone "-", "," or "." entirely: such tokens get bolder glyphs and room.
SYMBOL_EMPHASIS = "font-weight:700;padding:0 3px;"
# Whitespace-only tokens would be empty boxes: spell them out. A space gets "␣" (like the charts'
# labels) rather than "·", which sits exactly where a strike-through runs.
WHITESPACE_MARKS = {"\t": "⇥"}
SPACE_MARK = "␣"
# A token holding only the first bytes of a character (an emoji, an Arabic or CJK letter): the character itself
# is drawn on the token that completes it, right after this mark.
PART_MARK = '<span class="part" style="color:#888;font-size:11px">⋯</span>'
STOP_MARK = "‖"  # after the drafts of a round the confidence stop ended; in every font, unlike an emoji
# What the drafter tried beyond the text (rival guesses, the ‖ of an unsure stop, a tree's branch count): drawn
# inline they read as words ("Edinburgh London Dublin‖"), so the page's lanes hide them until the visitor asks
# (page.css: the switch MARKS_SWITCH above the lanes); a copy of a lane leaves them out either way.
ON_DEMAND = "on-demand"
LEGEND_ITEMS = (
    ("accepted", "accepted draft", LEGEND_HELP["accepted"]),
    ("rejected", "rejected draft", LEGEND_HELP["rejected"]),
    ("unexamined", "not examined", LEGEND_HELP["unexamined"]),
    ("resample", REPLACEMENT, LEGEND_HELP["resample"]),
    ("bonus", "bonus", LEGEND_HELP["bonus"]),
    ("target", "target token", "the target's own sample (baseline lane, first token)"),
)
# The switch above the page's lanes that shows the ON_DEMAND marks (LEGEND_MARKS explains each).
MARKS_SWITCH = "Show rival guesses, stop marks (‖) and branch counts in the lane"
ON_DEMAND_NOTE = f"; in the lanes while \"{MARKS_SWITCH}\" is ticked"
# The legend's marks that are not token kinds: (the item's attributes, the mark, its name, its hover).
LEGEND_MARKS = (
    ("", f'<b style="color:#888">{STOP_MARK}</b>', "drafting stopped: draft unsure",
     "the drafter was unsure of its last token, so the round stopped drafting before γ" + ON_DEMAND_NOTE),
    ("", '<sup style="color:#888;text-decoration:line-through">abc</sup>', "rival guesses",
     "greedy: where the drafter was unsure, its next guesses for the same position, verified in the same pass"
     + ON_DEMAND_NOTE),
    (' class="legend-part"', PART_MARK, "part of a character",
     "a token holding some of a character's bytes (an emoji, Arabic or CJK letter can take 2 to 4 tokens); "
     "the token after it completes the character and draws it"),
    ("", '<sup style="color:#777;font-weight:600">3</sup>', "branches of a draft tree",
     "a draft tree: the round guessed several branches and the target checked them all in one pass; "
     "the number counts the branches, the text shows the path it kept" + ON_DEMAND_NOTE),
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


def status_html(message: str, kind: str = "info", **data: object) -> str:
    """A status line in the page's status style (info / done / error); `data` become data- attributes saying where a
    run is (the page's run id, step mode's round), for people's tools and tests."""
    attributes = "".join(f' data-{name}="{value}"' for name, value in data.items())
    return f'<div class="status-{kind}" data-kind="{kind}"{attributes}>{escape_text(message)}</div>'


def visible_text(text: str, keep_breaks: bool = True) -> str:
    """Escaped token text with newlines drawn as ↵ (and kept as line breaks only if keep_breaks)."""
    if text == "":  # a token with no whole character of its own: bytes the next token completes (pieces.py)
        return PART_MARK
    if is_blank(text):  # each blank drawn as a faint mark (the token's text itself is unchanged)
        marks = "".join(WHITESPACE_MARKS.get(char, SPACE_MARK) for char in text)
        return f'<span class="ws" style="opacity:0.7">{marks}</span>'
    parts = []
    for i, line in enumerate(text.split("\n")):
        if i:
            parts.append('<span class="nl" style="color:#999">↵</span>' + ("\n" if keep_breaks else ""))
        parts.append(escape_text(line if keep_breaks else line.replace("\t", "⇥")))
    return "".join(parts)


# The end-of-text tokens of common tokenizers, matched by their text (a saved run replays without its tokenizer):
# drawn as a short mark a learner can read, the tokenizer's own name kept in the hover.
END_TOKEN = re.compile(r"<\|(?:im_end|endoftext|end|eot_id|end_of_text)\|>|</s>|<eos>")
END_MARK = '<span class="end-token" style="font-variant:small-caps">‹end›</span>'  # a glyph every font has
END_TITLE = "{name}: the end-of-text token, the model's way of saying its text is finished"
# The chat template's other markers (<|im_start|>, a sampled draft may propose one): a short small-caps word too
# (‹start›), never raw.
SPECIAL_TOKEN = re.compile(r"<\|(?:im_)?([a-z_]+)\|>")
SPECIAL_TITLE = "{name}: a marker of the chat template, not text"


def is_blank(text: str) -> bool:
    """Whitespace only and no newline: it would draw as nothing (a newline already draws as ↵)."""
    return text != "" and text.strip() == "" and "\n" not in text


def is_symbolic(text: str) -> bool:
    """No letter or digit: punctuation and whitespace, which a strike-through can wipe out."""
    return text != "" and not any(char.isalnum() for char in text)


def split_leading_spaces(text: str) -> tuple[str, str]:
    """(leading spaces, the rest) of a token with more than spaces in it; ("", text) otherwise."""
    rest = text.lstrip(" ")
    return (text[: len(text) - len(rest)], rest) if rest and not is_blank(rest) else ("", text)


def token_span(text: str, kind: str, title: str, keep_breaks: bool = True, extra_class: str = "",
               index: int | None = None) -> str:
    """One token drawn as its kind; `extra_class` marks a role the kind does not say (a rival taken); `index`:
    a kept token's place in the generated text (0: the first new token), so a parting can be marked.

    A word's leading spaces (" Edinburgh") are drawn just before its coloured box, not in it: the line may wrap
    after them, and inside the box that left an empty coloured chip at the end of the line."""
    end = END_TOKEN.fullmatch(text.strip()) is not None
    special = None if end else SPECIAL_TOKEN.fullmatch(text.strip())
    if end or special:
        title = f"{(END_TITLE if end else SPECIAL_TITLE).format(name=text.strip())}\n{title}"
    if special:
        special = f'<span class="special-token" style="font-variant:small-caps">‹{special[1]}›</span>'
    lead, text = split_leading_spaces(text)
    emphasis = SYMBOL_EMPHASIS if kind in STRUCK and is_symbolic(text) else ""
    classes = f"tok tok-{kind}" + (f" {extra_class}" if extra_class else "")
    place = f' data-i="{index}"' if index is not None else ""
    if lead and kind in STRUCK:  # not part of the text: a copy of the lane leaves it out, as it leaves the draft
        lead = f'<span class="struck-lead">{lead}</span>'
    return (
        f'{lead}<span class="{classes}"{place} style="{TOKEN_STYLES[kind]}border-radius:3px;padding:0 1px;margin:0 1px 0 0;'
        f'{emphasis}" title="{escape_text(title)}">{END_MARK if end else special or visible_text(text, keep_breaks)}</span>'
    )


def legend_html() -> str:
    items = "".join(
        f'<span style="margin-right:14px;white-space:nowrap" title="{escape_text(help_text)}">'
        f'{token_span(name, kind, help_text, keep_breaks=False)}</span>'
        for kind, name, help_text in LEGEND_ITEMS
    )
    items += "".join(
        f'<span{attributes} style="margin-right:14px;white-space:nowrap;color:#555" title="{escape_text(help_text)}">'
        f'{mark} {name}</span>'
        for attributes, mark, name, help_text in LEGEND_MARKS
    )
    return f'<div class="legend" style="font-size:13px;line-height:2">{items}</div>'


def prob(value: float) -> str:
    """Probabilities to three decimals, small ones in scientific notation so they never read 0.000."""
    return f"{value:.3f}" if value == 0 or value >= 0.001 else f"{value:.1e}"


def r_text(token) -> str:
    """The draw r, marked "(unused)" for drafts after the rejection: nothing compared it."""
    return f"{token.r:.3f}" + ("" if token.decided else " (unused)")


def quoted(text: str) -> str:
    """A token's text inside a sentence or a hover: quoted, its newlines and tabs drawn as marks; a token of
    bytes that make no whole character yet is named so."""
    if text == "":
        return PART_LABEL
    return "'" + text.replace("\n", "↵").replace("\t", "⇥") + "'"


def sure_text(token) -> str:
    """How sure the drafter was of its guess: its own probability for it (its softmax at temperature 1,
    which at temperature 0 is the top guess's), never the one-hot q greedy decoding turns it into; ""
    for a drafter with no probabilities (prompt lookup copies)."""
    return "" if token.draft_confidence is None else f" (the drafter was {token.draft_confidence:.0%} sure)"


def target_sure_text(token) -> str:
    """How sure the target was of its own top pick at a draft's position (its softmax at temperature 1), named
    so: beside "the target's own top pick" an unnamed figure reads as the target's."""
    return "" if token.target_confidence is None else f" (the target was {token.target_confidence:.0%} sure)"


def both_sure_text(token) -> str:
    """A kept draft is both models' pick: how sure each was, each named."""
    if token.target_confidence is None or token.draft_confidence is None:
        return target_sure_text(token) or sure_text(token)
    return f" (the target was {token.target_confidence:.0%} sure, the drafter {token.draft_confidence:.0%})"


def two_numbers(a: float, b: float) -> tuple[str, str]:
    """Two probabilities to two decimals, or three where two would print them equal."""
    shown = f"{a:.2f}", f"{b:.2f}"
    return shown if shown[0] != shown[1] or a == b else (f"{a:.3f}", f"{b:.3f}")


def draft_reason(event, index: int, greedy: bool, draft_text: str, target_pick_text: str | None) -> str:
    """Why this draft was kept or thrown away, in one plain line (the rule's words, render.rule's): above
    temperature 0 the chance to keep it and where the coin fell; at 0 whether it was the target's own top pick
    (`target_pick_text`, where known)."""
    token = event.drafted[index]
    verdict = event.verdict(index)
    if verdict == "unexamined":
        return DROPPED_TEXT if token.accepted else NOT_EXAMINED
    if not greedy:
        return coin_reason(*two_numbers(token.accept_prob, token.r), token.accepted)
    if verdict == "accepted":
        return kept_reason(quoted(draft_text), both_sure_text(token))
    if target_pick_text is None:
        return rejected_reason(None, quoted(draft_text), draft_sure=sure_text(token))
    return rejected_reason(quoted(target_pick_text), quoted(draft_text), target_sure_text(token), sure_text(token))


def drafted_title(index: int, gamma: int, token, verdict: str, reason: str = "", greedy: bool = False) -> str:
    """A draft's hover: the plain reason first (`reason`), then the figures that decided it: at temperature
    0 only the rule (q and p are one-hot there, and r decides nothing); above it q, p, min(1, p/q) and r."""
    first = f"{reason}\n" if reason else ""
    if greedy:
        return f"{first}draft {index + 1}/{gamma} · {GREEDY_RULE}"
    sure = "" if token.draft_confidence is None else f" · the draft was {token.draft_confidence:.0%} sure of its top guess"
    return (
        f"{first}draft {index + 1}/{gamma} · q(x) = {prob(token.draft_prob)} · p(x) = {prob(token.target_prob)} · "
        f"{KEEP_CHANCE} = {prob(token.accept_prob)} · r = {r_text(token)} → {verdict}{sure}"
    )


def stopped_unsure_text(event) -> str:
    """Why a round drafted fewer than γ tokens, where the confidence stop ended it ("" otherwise)."""
    if not event.stopped_unsure:
        return ""
    last = event.guesses[0] if event.guesses else event.drafted[-1]  # a rival round's: the drafter's first pick
    # its top probability there, not q of the token it drew: a sampled draft may be an unlikely one
    return (f"drafting stopped after {count(event.gamma, 'token')}: at the last one the "
            f"drafter's likeliest guess had only {last.draft_confidence:.0%}, below the confidence threshold, so "
            f"guessing on would likely be wasted verify work")


def own_reason(event, greedy: bool, rejected_text: str | None = None) -> str:
    """Where the target's own token of a drafting round came from: the replacement of a rejected draft, or the bonus."""
    if event.next_kind != "resample":
        return bonus_reason(every(event.gamma, "draft"), greedy)
    return replacement_reason(greedy, quoted(rejected_text) if rejected_text is not None else None)


# --- rival guesses: greedy rounds whose unsure first draft had company at its position ------------------


def first_pick_title(event, guess_texts: list[str]) -> str:
    """The hover of the drafter's own first pick where the target took one of its rivals instead."""
    taken = event.taken_guess
    why = rival_rejected_reason(quoted(guess_texts[taken]), target_sure_text(event.guesses[taken]), taken + 1,
                                quoted(guess_texts[0]), sure_text(event.guesses[0]))
    return f"{why}\ndraft 1/{event.gamma}, the drafter's first pick · {GREEDY_RULE}"


def taken_rival_title(event, guess_texts: list[str]) -> str:
    """The hover of the rival the target took: its place among the guesses, its own probability, and
    what rival guesses are."""
    taken = event.taken_guess
    why = rival_taken_reason(taken + 1, quoted(guess_texts[taken]), f"{event.guesses[taken].draft_confidence:.0%}",
                             quoted(guess_texts[0]))
    return f"{why}\n{rivals_text(event, guess_texts, sentence=True)}"


def rivals_text(event, guess_texts: list[str], sentence: bool = False) -> str:
    """Why a round's first position shows more than one guess, and which the target took
    (`sentence`: starting with a capital, to follow another sentence)."""
    listed = ", ".join(f"{quoted(text)} ({token.draft_confidence:.0%})" for text, token in zip(guess_texts, event.guesses))
    taken = event.taken_guess
    why = rivals_reason(listed, len(guess_texts), quoted(guess_texts[0]), taken,
                        quoted(guess_texts[taken]) if taken is not None else "")
    return f"{why[:1].upper()}{why[1:]}" if sentence else why


def rival_text(text: str) -> str:
    """A rival's text in the small struck marker; punctuation bolder and larger, else a "." is a nearly
    invisible dot under the strike."""
    shown = visible_text(text, keep_breaks=False)
    return f'<b class="rival-symbol" style="font-size:14px;padding:0 2px">{shown}</b>' if is_symbolic(text) else shown


def rivals_marker(event, guess_texts: list[str]) -> str:
    """The guesses the lane does not draw as drafts, small (yet readable: 12.5 px in #666) and struck through after
    the first draft, explained on hover (the drafter's first pick, where a rival won, is drawn as a draft before it)."""
    drawn = {0, event.shown_guess}
    others = [text for i, text in enumerate(guess_texts) if i not in drawn]
    if not others:
        return ""
    struck = " ".join(rival_text(text) for text in others)
    return (f'<span class="rivals {ON_DEMAND}" title="{escape_text(rivals_text(event, guess_texts))}" '
            f'style="font-size:12.5px;color:#666;text-decoration:line-through;vertical-align:super">{struck}</span>')


def stop_marker(event) -> str:
    """A hand after the drafts of a round the confidence stop ended, explained on hover."""
    if not event.stopped_unsure:
        return ""
    return (f'<span class="unsure-stop {ON_DEMAND}" title="{escape_text(stopped_unsure_text(event))}" '
            f'style="color:#888;font-weight:bold">{STOP_MARK}</span>')


def ended_at_end_of_text(event) -> bool:
    """An accepted end-of-text ended the text inside this round: no target token of its own was kept."""
    return event.gamma > 0 and len(event.emitted_ids) == event.num_kept_drafts


def draft_verdict_text(event, index: int, greedy: bool = False) -> str:
    """How drafted token `index` is described: its verdict (at temperature 0 by the target's own pick, not r), or
    dropped after an accepted end-of-text."""
    verdict = event.verdict(index)
    if verdict == "unexamined" and event.drafted[index].accepted:
        return DROPPED_TEXT
    return (GREEDY_VERDICT_TEXT if greedy else VERDICT_TEXT)[verdict]


def timing_text(event) -> str:
    """Where a round's time went: its draft passes, then its one verify."""
    drafts = f"{event.draft_s * 1000:.1f} ms ({count(event.num_draft_forwards, 'draft pass', 'draft passes')})"
    return f"drafting {drafts}, verifying {event.verify_s * 1000:.1f} ms (1 target pass)"


def rejected_index(event) -> int | None:
    """The drafted token the target rejected, where a rejection ended the round."""
    return event.num_accepted if event.next_kind == "resample" and event.num_accepted < event.gamma else None


def inline_token(text: str, kind: str) -> str:
    return token_span(text, kind, kind, keep_breaks=False)


def mark_parting(html: str, index: int) -> str:
    """A lane's HTML with its token at `index` (token_span's) marked as where the greedy lanes parted."""
    mark = ('<span class="parting-mark" title="the lanes parted here: from this token on they wrote different '
            'texts" style="color:#c0392b;font-weight:700;margin-right:1px">▾</span>')
    place = f' data-i="{index}"'
    at = html.find(place + " ")
    if at < 0:
        return html
    start, end = html.rfind("<span", 0, at), at + len(place)
    return f'{html[:start]}{mark}{html[start:end]} data-parting="true"{html[end:]}'
