"""Counts in plain English: "1 token", "2 tokens", "the 1 draft", "all 3 drafts".

Shared by render.py and plots.py (plots cannot import render: render imports plots).
"""

from __future__ import annotations


def count(number: int, noun: str, plural: str | None = None) -> str:
    """`number` followed by `noun`, plural unless the number is exactly one."""
    return f"{number} {noun if number == 1 else (plural or noun + 's')}"


def every(number: int, noun: str, plural: str | None = None) -> str:
    """"the 1 draft" or "all 3 drafts": "all 1 drafts" reads as a mistake."""
    return f"the {count(number, noun, plural)}" if number == 1 else f"all {count(number, noun, plural)}"
