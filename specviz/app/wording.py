"""Numbers in plain English: "1 token", "2 tokens", "the 1 draft", "all 3 drafts", "p-value = 5e-06".

Shared by render, the teaching sections and plots.
"""

from __future__ import annotations


def count(number: int, noun: str, plural: str | None = None) -> str:
    """`number` followed by `noun`, plural unless the number is exactly one."""
    return f"{number} {noun if number == 1 else (plural or noun + 's')}"


def every(number: int, noun: str, plural: str | None = None) -> str:
    """"the 1 draft" or "all 3 drafts": "all 1 drafts" reads as a mistake."""
    return f"the {count(number, noun, plural)}" if number == 1 else f"all {count(number, noun, plural)}"


def p_equals(p_value: float | None) -> str:
    """A p-value as people read it: two decimals, small ones in scientific notation, never "= 0". Named
    "p-value", never a bare "p": on this page p is the target's probability."""
    if p_value is None:
        return "p-value = —"
    if p_value >= 0.01:
        return f"p-value = {p_value:.2f}"
    return f"p-value = {p_value:.0e}" if p_value >= 1e-300 else "p-value < 1e-300"


def duration_text(seconds: float) -> str:
    """"40 s", "4 min": how long something will take, as rough as an estimate is."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def as_sentence(words: str) -> str:
    """Words as a sentence: a capital first letter and a full stop."""
    return f"{words[:1].upper()}{words[1:]}."
