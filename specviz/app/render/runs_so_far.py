"""The page's runs so far (specviz.app.history) as a small table, with the sentence that answers "how much
does one run's speedup vary here": this page's repeats of the last run's setup, and what the bench measured
for one run on this machine. HTML without gradio."""

from __future__ import annotations

from typing import Sequence

from specviz.analysis.payoff import MIN_REPEATS, Spread
from specviz.app.render.tokens import escape_text
from specviz.catalogue import drafter_info
from specviz.app.wording import count

CELL = 'style="padding:2px 10px;border-bottom:1px solid #eee;text-align:right"'
HEAD = 'style="padding:2px 10px;border-bottom:1px solid #ccc;text-align:right"'
EMPTY_TEXT = ("Each run you make on this page is listed here with its speedup, so you can see how far one run "
              "moves: run the same prompt twice and the same tokens measure a different speed.")


def drafter_label(name: str) -> str:
    try:
        return drafter_info(name).label
    except (KeyError, ValueError):
        return name or "—"


def prompt_label(text: str, max_chars: int = 32) -> str:
    text = " ".join(text.split())
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def spread_text(runs: Sequence, spread: Spread | None) -> str:
    """How far one run's speedup moves here, in the page's own repeats and the bench's record."""
    if not runs:
        return ""
    last = runs[-1]
    repeats = [run.speedup for run in runs if run.setup == last.setup and run.same_text]
    if not last.same_text:
        own = (f"Run {last.number}'s lanes wrote different texts ({last.tokens_text} tokens), so its speed is not "
               "like for like and it counts as no repeat (temperature 0 compares the same text).")
    elif len(repeats) >= 2:
        ordered = sorted(repeats)
        judged = ("their own spread is now the verdict's band" if len(repeats) >= MIN_REPEATS
                  else f"from {MIN_REPEATS} on, their own spread is the verdict's band")
        own = (f"Your {count(len(repeats), 'run')} of this setup (same prompt and settings) measured "
               f"{ordered[0]:.2f}–{ordered[-1]:.2f}× with the same tokens: one run's speedup moved by "
               f"{ordered[-1] / ordered[0] - 1:.0%} from its lowest to its highest here; {judged}.")
    else:
        own = "Press Run again with the same prompt and settings to see how far one run's speedup moves here."
    bench = (f" The bench measured one run from {spread.low_ratio:.0%} to {spread.high_ratio:.0%} of the median "
             f"({escape_text(spread.source)}), prompts' own differences included." if spread is not None else
             " No bench record matches this machine and setup, so only your repeats measure the spread here.")
    return f"{own}{bench}"


def runs_table_html(runs: Sequence, spread: Spread | None = None) -> str:
    """The table, newest first, and the sentence above it; the first view says what will appear."""
    if not runs:
        return f'<div class="runs-so-far" data-runs="0" style="color:#777">{EMPTY_TEXT}</div>'
    last = runs[-1]
    columns = ["run", "speedup", "γ", "drafter", "T", "tokens", "same text", "prompt"]
    head = "".join(f"<th {HEAD}>{name}</th>" for name in columns)
    rows = []
    for run in reversed(runs):
        repeat = ' class="repeat"' if run.setup == last.setup else ""
        cells = [str(run.number), f"{run.speedup:.2f}×", str(run.gamma), escape_text(drafter_label(run.drafter)),
                 f"{run.temperature:g}", run.tokens_text, "yes" if run.same_text else "no",
                 escape_text(prompt_label(run.prompt_text))]
        rows.append(f"<tr{repeat} data-speedup=\"{run.speedup:.4f}\">" +
                    "".join(f"<td {CELL}>{value}</td>" for value in cells) + "</tr>")
    return (f'<div class="runs-so-far" data-runs="{len(runs)}">'
            f'<p class="runs-spread" style="margin:2px 0 6px">{spread_text(runs, spread)}</p>'
            f'<table class="runs-table" style="border-collapse:collapse;font-size:13px"><tr>{head}</tr>'
            f'{"".join(rows)}</table></div>')
