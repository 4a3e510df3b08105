"""The lanes before any run (the page's first view): each lane's title and what will appear in it, with
the speculative lane's colours explained on sample tokens drawn as a run draws them, so the first view
says what to watch.
"""

from __future__ import annotations

from specviz.catalogue import lane_info
from specviz.app.render.tokens import LANE_STYLE, escape_text, token_span


def empty_lane_html(name: str) -> str:
    """A lane before any run: its title and what will appear in it, so the first view says what to watch."""
    if name == "speculative":  # the lane whose colours need saying before they appear
        samples = "".join(
            f"<li>{token_span(sample, kind, words, keep_breaks=False)} {escape_text(words)}</li>"
            for kind, sample, words in EMPTY_SPECULATIVE_KEY)
        words = (f"{escape_text(EMPTY_LANE_WORDS[name])}<ul style='margin:4px 0 0 1.1em;padding:0'>{samples}</ul>"
                 f"{escape_text(CLICK_WORDS)}")
    else:
        words = escape_text(EMPTY_LANE_WORDS.get(name, f"{lane_info(name).title} will write here."))
    return (f'<div class="lane lane-{name} lane-empty" data-lane="{name}" data-done="false">'
            f'<div class="lane-head" style="font-weight:600;margin:0 0 6px 2px;font-size:14px">'
            f'{escape_text(lane_info(name).title)}</div>'
            f'<div class="lane-text" style="{LANE_STYLE}color:#666;font-family:inherit">{words}</div></div>')


# What each lane will show, said before the first run (the page's first view).
EMPTY_LANE_WORDS = {
    "baseline": "The target alone will write here, one token per forward pass: the plain way, to compare against.",
    "speculative": "Speculative decoding will write here, a few tokens per target pass. Each guess of the drafter "
                   "is coloured by what happened to it:",
    "reference": "transformers' own generate() will write here, on the same models, when you switch it on.",
}
EMPTY_SPECULATIVE_KEY = (
    ("accepted", "kept", "green: the target agreed with the drafter's guess"),
    ("rejected", "thrown", "struck through: the target disagreed, so the guess was thrown away"),
    ("resample", "own", "orange: the target's own token, written in its place"),
    ("bonus", "bonus", "blue: a free extra token when every guess was kept"),
)
CLICK_WORDS = "After a run, click a coloured token to see why it was kept or thrown away."
