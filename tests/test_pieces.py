"""Text in any language: byte-level tokens joined into the characters they make.

The default pair's tokenizer (SmolLM2, byte-level BPE) and the tiny-code pair's (GPT-2 layout) split an
emoji, an Arabic, CJK or accented letter they have no token for into tokens of its UTF-8 bytes; decoded
alone each is "\ufffd". The lanes drew "�∅��∅��∅�" there. Every view takes a token's text from
`pieces.token_piece`, so the lanes, the inspector and step mode show whole characters, and the pieces'
hovers say how they join.
"""

from __future__ import annotations

import html as html_text
import re

import pytest
from transformers import AutoTokenizer

from specviz.app import render
from specviz.app.inspector import words as inspector_words
from specviz.app.render import pieces
from specviz.decoding.events import FinishEvent, PrefillEvent, RoundEvent
from specviz.models.convert import converted_dir
from specviz.models.presets import PRESETS
from tests.rounds import chain, draft

PROMPTS = {
    "arabic": "مرحبا بالعالم، كيف حالك اليوم؟",
    "cjk": "你好，世界。東京は日本の首都です。한국어도 있어요.",
    "emoji": "I ❤️ 🦀 and 👩‍🔬 science! 🎉🎉",
    "accented": "Crème brûlée, façade, naïve, Ærøskøbing, Łódź, Ñandú.",
}


def tokenizers():
    found = []
    if converted_dir().is_dir():
        found.append(("smollm2", AutoTokenizer.from_pretrained(str(converted_dir()))))
    tiny = PRESETS["tiny-code"]
    found.append(("tiny-code", AutoTokenizer.from_pretrained(tiny.target_id)))
    return found


@pytest.fixture(scope="module", params=[name for name, _ in tokenizers()])
def tokenizer(request):
    return dict(tokenizers())[request.param]


def decoder(tokenizer):
    return lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False)


@pytest.mark.parametrize("language", PROMPTS)
def test_joined_pieces_rebuild_the_text_with_no_replacement_character(tokenizer, language):
    text = PROMPTS[language]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    decode = decoder(tokenizer)
    split = [token_id for token_id in ids if pieces.REPLACEMENT in decode([token_id])]
    shown = [pieces.token_piece(decode, ids[:i], token_id) for i, token_id in enumerate(ids)]
    assert "".join(piece.text for piece in shown) == text  # whole characters, in order, nothing lost
    assert not any(pieces.REPLACEMENT in piece.text for piece in shown)
    if split:  # where the tokenizer split a character, some token is a part and a later one joins it
        assert any(piece.pending for piece in shown) and any(piece.joined for piece in shown)


def test_the_lanes_draw_whole_characters_with_their_pieces_on_hover(tokenizer):
    """A lane of emoji and Arabic text: no "\ufffd" and no "∅" anywhere; each part token is drawn ⋯ with a hover
    that says so, the token that completes a character carries it whole, and the legend explains ⋯."""
    text = PROMPTS["emoji"] + " " + PROMPTS["arabic"]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert any(pieces.REPLACEMENT in tokenizer.decode([i]) for i in ids)  # the test is about split characters
    decode = decoder(tokenizer)
    run = render.RunView("x", [ids[0]], gamma=0, settings={"temperature": 0.0}, lanes=("baseline",))
    run.add(PrefillEvent("baseline", len(ids), ids[1], 0.01, 1, 0), decode)
    for position, token_id in enumerate(ids[2:], start=1):
        run.add(RoundEvent("baseline", position - 1, position, 0, (), 0, token_id, "target", (token_id,), 0.0, 0.01,
                           1, 0), decode)
    run.add(FinishEvent("baseline", "max_new_tokens", len(ids) - 1), decode)
    lane = render.lanes_html(run, names=("baseline",))[0]
    shown = html_text.unescape(re.sub(r"<[^>]+>", "", lane.split('class="lane-text"', 1)[1]))
    assert pieces.REPLACEMENT not in shown and "∅" not in shown
    assert run.baseline.text == decode(ids[1:])  # the lane's text is the text
    assert pieces.PART_TITLE in html_text.unescape(lane) and "one character joined" in html_text.unescape(lane)
    assert "part of a character" in render.legend_html()


def test_a_speculative_round_joins_a_drafted_character_and_the_inspector_names_it(tokenizer):
    """Drafts that split one character: its first bytes accepted, a wrong last byte rejected, the target's own
    last byte written. The accepted bytes are parts; the correction draws the whole character; nothing is U+FFFD."""
    ids = tokenizer("🦀", add_special_tokens=False)["input_ids"]
    decode = decoder(tokenizer)
    if len(ids) < 2:
        pytest.skip("this tokenizer has the whole character")  # never for both: the crab is rare
    other = tokenizer("🦊", add_special_tokens=False)["input_ids"]
    prompt = tokenizer("Animals:", add_special_tokens=False)["input_ids"]
    # The prefill writes the crab's first byte where it has more than two, else a space; then one round drafts
    # the bytes up to the last (accepted) and a wrong last byte (rejected); the target writes the right one.
    first_id = ids[0] if len(ids) > 2 else tokenizer(" ", add_special_tokens=False)["input_ids"][0]
    kept_ids = ids[1:-1] if len(ids) > 2 else ids[:-1]
    drafts = (*(draft(i, 1.0, 1.0, 0.1, "accepted") for i in kept_ids), draft(other[-1], 1.0, 0.0, 0.9, "rejected"))
    run = render.RunView("Animals:", prompt, gamma=len(drafts), settings={"temperature": 0.0})
    run.add(PrefillEvent("speculative", len(prompt), first_id, 0.01, 1, 1), decode)
    run.add(RoundEvent("speculative", 0, 1, len(drafts), chain(*drafts, then=(ids[-1], "resample")), len(kept_ids),
                       ids[-1], "resample", (*kept_ids, ids[-1]), 0.001, 0.01, len(drafts), 1), decode)
    texts = run.speculative.round_texts[0]
    assert texts.drafted[0] == "" and pieces.REPLACEMENT not in "".join(texts.drafted + texts.own)
    assert texts.own[0].endswith("🦀") and run.speculative.text.endswith("🦀")  # the correction makes the crab
    assert texts.drafted[-1].endswith("🦊") or pieces.REPLACEMENT not in texts.drafted[-1]  # the rejected guess
    inspector = html_text.unescape(inspector_words.inspector_html(run, 0))
    assert pieces.REPLACEMENT not in re.sub(r"<[^>]+>", "", inspector) and "🦀" in inspector
    assert "spells it in UTF-8 bytes over 2–4 tokens" in inspector  # "(part of a character)" explained once


def test_bytes_that_make_no_character_are_named_not_drawn_as_the_decoders_glyph(tokenizer):
    """A model (a drafter's rejected guess, most often) may write the first bytes of a character and then a
    token that cannot finish it: those bytes are drawn as NO_CHARACTER with a hover that says why, never U+FFFD."""
    decode = decoder(tokenizer)
    first_bytes = tokenizer("🎉", add_special_tokens=False)["input_ids"][:1]  # a lead byte, its character unfinished
    assert pieces.REPLACEMENT in decode(first_bytes)
    word = tokenizer(" hello", add_special_tokens=False)["input_ids"][0]  # ASCII: no continuation byte
    context = tokenizer("Say:", add_special_tokens=False)["input_ids"] + first_bytes
    piece = pieces.token_piece(decode, context, word)
    assert pieces.REPLACEMENT not in piece.text and pieces.NO_CHARACTER in piece.text
    assert piece.text.endswith(decode([word]))  # the word itself is drawn as ever, after the named bytes
    assert pieces.NO_CHARACTER_TITLE in pieces.byte_note(piece)
