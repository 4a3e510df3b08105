"""One token as HTML: escaped, its whitespace made visible, styled by its kind (palette.TOKEN_STYLES).

All token text is HTML-escaped; whitespace is kept (`white-space: break-spaces`) and newlines are
drawn as ↵ so code keeps its shape; a token of only spaces or tabs is drawn as ␣ / ⇥, else it
would be an empty box.
"""

from __future__ import annotations

import html
import re

from specviz.app.palette import TOKEN_STYLES
from specviz.app.render.pieces import PART_LABEL
from specviz.app.wording import every


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
LEGEND_ITEMS = (
    ("accepted", "accepted draft", "the target agreed (r < min(1, p/q))"),
    ("rejected", "rejected draft", "struck through: r ≥ min(1, p/q), thrown away"),
    ("unexamined", "not examined", "drafted after a rejection, never checked"),
    ("resample", "resampled", "the target's own token where a draft failed: its top pick at temperature 0, "
                              "else drawn from norm(max(0, p − q))"),
    ("bonus", "bonus", "every draft of the round accepted: the same target pass gives one more token"),
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


def status_html(message: str, kind: str = "info", **data: object) -> str:
    """A status line in the page's status style (info / done / error); `data` become data- attributes saying where a
    run is (the page's run id, step mode's round), for people's tools and tests."""
    attributes = "".join(f' data-{name}="{value}"' for name, value in data.items())
    return f'<div class="status-{kind}" data-kind="{kind}"{attributes}>{escape_text(message)}</div>'


def visible_text(text: str, keep_breaks: bool = True) -> str:
    """Escaped token text with newlines drawn as ↵ (and kept as line breaks only if keep_breaks)."""
    if text == "":  # a token with no whole character of its own: bytes the next token completes (pieces.py)
        return PART_MARK
    if is_blank(text):
        return mark_whitespace(text)
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


# The chat template's other markers (<|im_start|>, a sampled draft may propose one): a short mark too, never raw.
SPECIAL_TOKEN = re.compile(r"<\|(?:im_)?([a-z_]+)\|>")
SPECIAL_TITLE = "{name}: a marker of the chat template, not text"


def is_end_token(text: str) -> bool:
    return END_TOKEN.fullmatch(text.strip()) is not None


def special_mark(text: str) -> str | None:
    """A chat template's marker drawn as a short small-caps word (‹start› for <|im_start|>); None for text."""
    special = SPECIAL_TOKEN.fullmatch(text.strip())
    return None if special is None else f'<span class="special-token" style="font-variant:small-caps">‹{special[1]}›</span>'


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
    end = is_end_token(text)
    special = None if end else special_mark(text)
    if end or special:
        title = f"{(END_TITLE if end else SPECIAL_TITLE).format(name=text.strip())}\n{title}"
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
    stop_help = "the draft was unsure of its last token, so the round stopped drafting before γ"
    items += (f'<span style="white-space:nowrap;color:#555" title="{stop_help}">'
              f'<b style="color:#888">{STOP_MARK}</b> drafting stopped: draft unsure</span>')
    rivals_help = "greedy: where the draft was unsure, its next guesses for the same position, verified in the same pass"
    items += (f'<span style="white-space:nowrap;color:#555;margin-left:14px" title="{rivals_help}">'
              f'<sup style="color:#888;text-decoration:line-through">abc</sup> rival guesses</span>')
    part_help = ("a token holding some of a character's bytes (an emoji, Arabic or CJK letter can take 2 to 4 tokens); "
                 "the token after it completes the character and draws it")
    items += (f'<span class="legend-part" style="white-space:nowrap;color:#555;margin-left:14px" title="{part_help}">'
              f'{PART_MARK} part of a character</span>')
    tree_help = ("a draft tree: the round guessed several branches and the target checked them all in one pass; "
                 "the number counts the branches, the text shows the path it kept")
    items += (f'<span style="white-space:nowrap;color:#555;margin-left:14px" title="{tree_help}">'
              f'<sup style="color:#777;font-weight:600">3</sup> branches of a draft tree</span>')
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
    """How sure the target was of its own top pick at a draft's position (its softmax at temperature 1). Each
    figure names its model: a kept draft's hover said "(it was 38% sure)" after "the target's own top pick",
    where that figure was the drafter's and the target was far surer."""
    return "" if getattr(token, "target_confidence", None) is None else f" (the target was {token.target_confidence:.0%} sure)"


def both_sure_text(token) -> str:
    """A kept draft is both models' pick: how sure each was, each named."""
    target = getattr(token, "target_confidence", None)
    if target is None or token.draft_confidence is None:
        return target_sure_text(token) or sure_text(token)
    return f" (the target was {target:.0%} sure, the drafter {token.draft_confidence:.0%})"


def two_numbers(a: float, b: float) -> tuple[str, str]:
    """Two probabilities to two decimals, or three where two would print them equal."""
    shown = f"{a:.2f}", f"{b:.2f}"
    return shown if shown[0] != shown[1] or a == b else (f"{a:.3f}", f"{b:.3f}")


def coin_text(token, verdict: str) -> str:
    """Q1 at temperature > 0, in one line: the chance to keep the draft, and where the coin fell."""
    chance, coin = two_numbers(token.accept_prob, token.r)
    side = "below" if token.accepted else "above"
    return f"accepted with probability min(1, p/q) = {chance}; the coin r = {coin} was {side} it, so {verdict}"


def draft_reason(event, index: int, greedy: bool, draft_text: str, target_pick_text: str | None) -> str:
    """Q1, "why was this draft kept or thrown away", in one plain line. At temperature 0 no coin decides:
    a draft is kept exactly when it is the target's own top pick (`target_pick_text`, where known)."""
    token = event.drafted[index]
    verdict = event.verdict(index)
    if verdict == "unexamined":
        return DROPPED_TEXT if token.accepted else "not examined: a draft before it was rejected, so the target never checked it"
    if not greedy:
        return coin_text(token, verdict)
    if verdict == "accepted":
        return f"kept: {quoted(draft_text)} was the target's own top pick here too{both_sure_text(token)}"
    pick = quoted(target_pick_text) if target_pick_text is not None else "another token"
    pick += target_sure_text(token) if target_pick_text is not None else ""
    return f"rejected: the target's own top pick here was {pick}; the drafter guessed {quoted(draft_text)}{sure_text(token)}"


GREEDY_RULE = "at temperature 0 a draft is kept exactly when it is the target's own top pick; no coin is drawn"


def drafted_title(index: int, gamma: int, token, verdict: str, reason: str = "", greedy: bool = False) -> str:
    """A draft's hover: the plain reason first (`reason`), then the figures that decided it: at temperature
    0 only the rule (q and p are one-hot there, and r decides nothing); above it q, p, min(1, p/q) and r."""
    first = f"{reason}\n" if reason else ""
    if greedy:
        return f"{first}draft {index + 1}/{gamma} · {GREEDY_RULE}"
    sure = "" if token.draft_confidence is None else f" · the draft was {token.draft_confidence:.0%} sure of its top guess"
    return (
        f"{first}draft {index + 1}/{gamma} · q(x) = {prob(token.draft_prob)} · p(x) = {prob(token.target_prob)} · "
        f"min(1, p/q) = {prob(token.accept_prob)} · r = {r_text(token)} → {verdict}{sure}"
    )


def stopped_unsure_text(event) -> str:
    """Why a round drafted fewer than γ tokens, where the confidence stop ended it ("" otherwise)."""
    if not event.stopped_unsure:
        return ""
    last = event.guesses[0] if event.guesses else event.drafted[-1]  # a rival round's: the drafter's first pick
    # its top probability there, not q of the token it drew: a sampled draft may be an unlikely one
    return (f"drafting stopped after {event.gamma} token{'s' if event.gamma != 1 else ''}: at the last one the "
            f"draft's likeliest guess had only {last.draft_confidence:.0%}, below the confidence threshold, so "
            f"guessing on would likely be wasted verify work")


def own_reason(event, greedy: bool, rejected_text: str | None = None) -> str:
    """Q2, "where did the replacement come from", for the target's own token of a drafting round."""
    if event.next_kind != "resample":
        source = "its own top pick after the last draft" if greedy else "sampled from p after the last draft"
        return f"bonus: {every(event.gamma, 'draft')} accepted, so the target's verify pass gives one more token for free: {source}"
    instead = f", in place of the rejected {quoted(rejected_text)}" if rejected_text is not None else ""
    if greedy:
        return f"the target's own pick{instead}: at temperature 0 the target writes its top token where a draft fails"
    return (f"resampled from the leftover max(0, p − q){instead}: what the target wanted here beyond what the draft "
            "offered, renormalised, so the text stays exactly the target's")


# --- rival guesses: greedy rounds whose unsure first draft had company at its position ------------------


def first_pick_title(event, guess_texts: list[str]) -> str:
    """The hover of the drafter's own first pick where the target took one of its rivals instead."""
    taken = event.taken_guess
    return (f"rejected: the target's own top pick here was {quoted(guess_texts[taken])}"
            f"{target_sure_text(event.guesses[taken])}, the drafter's rival guess {taken + 1}; "
            f"the drafter guessed {quoted(guess_texts[0])} first{sure_text(event.guesses[0])}\n"
            f"draft 1/{event.gamma}, the drafter's first pick · {GREEDY_RULE}")


def taken_rival_title(event, guess_texts: list[str]) -> str:
    """The hover of the rival the target took: its place among the guesses, its own probability, and
    what rival guesses are."""
    taken = event.taken_guess
    return (f"rival guess {taken + 1} — the target's own pick, taken: the drafter gave "
            f"{quoted(guess_texts[taken])} {event.guesses[taken].draft_confidence:.0%}, less than its first pick "
            f"{quoted(guess_texts[0])}, and offered it beside that pick because it was unsure\n"
            f"{rivals_text(event, guess_texts, sentence=True)}")


def rivals_text(event, guess_texts: list[str], sentence: bool = False) -> str:
    """Why a round's first position shows more than one guess, and which the target took
    (`sentence`: starting with a capital, to follow another sentence)."""
    listed = ", ".join(f"{quoted(text)} ({token.draft_confidence:.0%})" for text, token in zip(guess_texts, event.guesses))
    taken = event.taken_guess
    if taken is None:
        outcome = "none of them was the target's own choice, so the target wrote its token itself"
    elif taken == 0:
        outcome = f"the target agreed with the draft's first pick {quoted(guess_texts[0])}; the others were dropped"
    else:
        outcome = (f"the target's own choice was {quoted(guess_texts[taken])}, not the draft's first pick "
                   f"{quoted(guess_texts[0])}, so the round took it: a token the chain alone would have lost")
    return (f"{'R' if sentence else 'r'}ival guesses: the draft was unsure of its first guess here, so it offered "
            f"{len(guess_texts)} at once, {listed}; the target judged them all in its one verify (each at this position, "
            f"seeing the text and itself, never the others): {outcome}")


def rival_text(text: str) -> str:
    """A rival's text in the small struck marker; punctuation bolder and larger, else a rival "." was a
    nearly invisible dot under the strike."""
    shown = visible_text(text, keep_breaks=False)
    return f'<b class="rival-symbol" style="font-size:14px;padding:0 2px">{shown}</b>' if is_symbolic(text) else shown


def rivals_marker(event, guess_texts: list[str]) -> str:
    """The guesses the lane does not draw as drafts, small and struck through after the first draft (12.5 px in
    #666: at 11 px in #888 a learner could not read them, 3.5:1 against white), explained on hover (the
    drafter's first pick, where a rival won, is drawn as a draft before it)."""
    drawn = {0, event.shown_guess}
    others = [text for i, text in enumerate(guess_texts) if i not in drawn]
    if not others:
        return ""
    struck = " ".join(rival_text(text) for text in others)
    return (f'<span class="rivals" title="{escape_text(rivals_text(event, guess_texts))}" '
            f'style="font-size:12.5px;color:#666;text-decoration:line-through;vertical-align:super">{struck}</span>')


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
