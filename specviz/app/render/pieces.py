"""The text one token adds after its context, with byte-level tokens joined into whole characters.

Byte-level BPE (GPT-2, SmolLM2, Llama 3, Qwen) splits a character it has no token for into tokens of
its UTF-8 bytes: an emoji, an Arabic or CJK letter may take two to four tokens, none of which is text
alone (decoded alone each is "\ufffd", U+FFFD REPLACEMENT CHARACTER). So a token's text is the whole
characters it completes: a token holding only the first bytes of a character adds none (`pending`
and empty, drawn as `PART_MARK`), and the token that completes it adds the character (`joined`).
Every view asks this one function (lanes, inspector, step mode, explainer), through `decode` alone, so a
saved run replays the same pieces without the tokenizer.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

Decode = Callable[[list[int]], str]

CONTEXT_TOKENS = 4  # ids decoded before a token to get its text in context (a character is at most 4 bytes)
REPLACEMENT = "\ufffd"  # what a decoder writes for bytes that are not (yet) a whole character
NO_CHARACTER = "▯"  # bytes that cannot begin or finish a character where they stand (a model may write such bytes)
PART_LABEL = "(part of a character)"  # a chart's or a sentence's name for a token that adds no whole character
PART_TITLE = ("part of a character: this token holds some of its UTF-8 bytes (byte-level tokens split characters "
              "the vocabulary lacks); the token after it completes the character, drawn there")
JOINED_TITLE = ("{text}: one character joined from this token's bytes and those of the token(s) before it, "
                "each drawn ⋯ (its pieces)")
PENDING_TITLE = "this token also holds the first bytes of a character that the token after it completes"
NO_CHARACTER_TITLE = (f"{NO_CHARACTER}: bytes that make no character where they stand (the model wrote a byte sequence "
                      "that is not valid UTF-8; a rejected guess may)")


class Piece(NamedTuple):
    """What a token adds to the text in its place."""

    text: str  # whole characters only
    pending: bool  # it leaves a character unfinished: its last bytes wait for the next token
    joined: bool  # it finishes a character begun by the token(s) before it


def whole(text: str) -> str:
    """The text without its unfinished character at the end."""
    return text.rstrip(REPLACEMENT)


def token_piece(decode: Decode, context_ids: Sequence[int], token_id: int) -> Piece:
    """The whole characters a token adds after its context (decoding alone loses leading spaces and splits
    characters into U+FFFD), whether it leaves one unfinished, and whether it finishes one begun before."""
    context = list(context_ids[-CONTEXT_TOKENS:])
    before_raw = decode(context)
    # A window that starts inside a character decodes its first bytes as U+FFFD, which a later byte never
    # mends: reach back (a character is at most 4 tokens) until the window starts on a character.
    for start in range(CONTEXT_TOKENS + 1, min(len(context_ids), 2 * CONTEXT_TOKENS) + 1):
        if not before_raw.startswith(REPLACEMENT):
            break
        context = list(context_ids[-start:])
        before_raw = decode(context)
    after_raw = decode(context + [token_id])
    before, after = whole(before_raw), whole(after_raw)
    text = after[len(before):] if after.startswith(before) else whole(decode([token_id]))
    # Left inside the text, U+FFFD is bytes no later token can mend: name them, never draw the decoder's glyph
    return Piece(text.replace(REPLACEMENT, NO_CHARACTER), pending=after_raw != after, joined=before_raw != before and text != "")


def byte_note(piece: Piece) -> str:
    """The hover line that says how a token's bytes join its neighbours' ("" for a token of whole characters)."""
    if piece.pending and not piece.text:
        return PART_TITLE
    notes = [JOINED_TITLE.format(text=repr(piece.text)) if piece.joined else "", PENDING_TITLE if piece.pending else "",
             NO_CHARACTER_TITLE if NO_CHARACTER in piece.text else ""]
    return "; ".join(note for note in notes if note)


def label_text(decode: Decode, context_ids: Sequence[int], token_id: int) -> str:
    """A token's name on a chart: its text alone, or where that is bytes of a character, the character it makes
    in this context (or PART_LABEL where it makes none yet)."""
    alone = decode([token_id])
    if REPLACEMENT not in alone:
        return alone
    return token_piece(decode, context_ids, token_id).text or PART_LABEL
