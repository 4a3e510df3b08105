"""The page's CSS and JavaScript, kept as files in specviz/app/static/ so an editor and a linter read them as what
they are; each read once, with the Python constants it names filled in."""

from __future__ import annotations

from functools import cache
from pathlib import Path

STATIC = Path(__file__).with_name("static")


@cache
def page_file(name: str, **values: int | str) -> str:
    """static/<name>'s text, each NAME in `values` replaced by its value (the CSS's PHONE_CHART_PX)."""
    text = (STATIC / name).read_text()
    for key, value in values.items():
        text = text.replace(key, str(value))
    return text
