"""The page's runs so far (specviz.app.history), one section: how much one run's speedup varies here.

A table, newest first, under the sentence that answers the question (this page's repeats of the last run's setup;
what the bench measured for one run here is the verdict's band, said once, in the card), and the same runs as dots:
the last run's setup in colour and every other run in grey, so repeats stand out as a column of dots; a hollow dot
is a run whose lanes wrote different texts (no like-for-like speed); a band behind the repeats spans their min–max.
Built from the runs' records only; the run's handler fills it (`runs_values`) when a run ends.
"""

from __future__ import annotations

from typing import Sequence

import gradio as gr
import plotly.graph_objects as go

from specviz.analysis.payoff import MIN_REPEATS
from specviz.app.palette import COLORS
from specviz.app.plots import PAGE_LEGEND_ROWS, base_figure, with_hint
from specviz.app.render.tokens import escape_text
from specviz.app.wording import count
from specviz.catalogue import drafter_info

CELL = 'style="padding:2px 10px;border-bottom:1px solid #eee;text-align:right"'
HEAD = 'style="padding:2px 10px;border-bottom:1px solid #ccc;text-align:right"'
EMPTY_TEXT = ("Each run you make on this page is listed here with its speedup, so you can see how far one run "
              "moves: run the same prompt twice and the same tokens measure a different speed.")
OTHER_COLOUR = "#9a9a9a"


def runs_values(runs: list) -> list:
    """The runs-so-far table (with how far one run moves here) and its dot chart."""
    return [runs_table_html(runs), runs_chart(runs)]


def build_runs_so_far() -> list[gr.Component]:
    # Closed at first: after one run, the card's band already says how far one run moves here (one answer); the
    # section is where a learner who repeats a run compares their own repeats.
    with gr.Accordion("Runs on this page so far: how much one run's speedup varies", open=False,
                      elem_id="runs-so-far-section"):
        table, chart = runs_values([])
        return [gr.HTML(table, elem_id="runs-so-far"), gr.Plot(chart, show_label=False, elem_id="chart-runs")]


def drafter_label(name: str, tree: int = 0) -> str:
    """The drafter's name, and its tree where it drafted one: two rows of one γ and drafter can be a chain and a
    tree, whose speeds differ most of all."""
    try:
        label = drafter_info(name).label
    except (KeyError, ValueError):
        label = name or "—"
    return f"{label}, a tree of {tree}" if tree else label


def prompt_label(text: str, max_chars: int = 32) -> str:
    text = " ".join(text.split())
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def spread_text(runs: Sequence) -> str:
    """How far one run's speedup moves here, in the page's own repeats."""
    if not runs:
        return ""
    last = runs[-1]
    repeats = [run.speedup for run in runs if run.setup == last.setup and run.same_text]
    if not last.same_text:
        return (f"Run {last.number}'s lanes wrote different texts ({last.tokens_text} tokens), so its speed is not "
                "like for like and it counts as no repeat (temperature 0 compares the same text).")
    if len(repeats) >= 2:
        ordered = sorted(repeats)
        judged = ("their own spread is now the verdict's band" if len(repeats) >= MIN_REPEATS
                  else f"from {MIN_REPEATS} on, their own spread is the verdict's band")
        return (f"Your {count(len(repeats), 'run')} of this setup (same prompt and settings) measured "
                f"{ordered[0]:.2f}–{ordered[-1]:.2f}× with the same tokens: one run's speedup moved by "
                f"{ordered[-1] / ordered[0] - 1:.0%} from its lowest to its highest here; {judged}.")
    return "Press Run again with the same prompt and settings to see how far one run's speedup moves here."


def runs_table_html(runs: Sequence) -> str:
    """The table, newest first, and the sentence above it; the first view says what will appear."""
    if not runs:
        return f'<div class="runs-so-far" data-runs="0" style="color:#777">{EMPTY_TEXT}</div>'
    last = runs[-1]
    columns = ["run", "speedup", "γ", "drafter", "T", "tokens", "same text", "prompt"]
    head = "".join(f"<th {HEAD}>{name}</th>" for name in columns)
    rows = []
    for run in reversed(runs):
        repeat = ' class="repeat"' if run.setup == last.setup else ""
        cells = [str(run.number), f"{run.speedup:.2f}×", str(run.gamma), escape_text(drafter_label(run.drafter, run.tree)),
                 f"{run.temperature:g}", run.tokens_text, "yes" if run.same_text else "no",
                 escape_text(prompt_label(run.prompt_text))]
        rows.append(f"<tr{repeat} data-speedup=\"{run.speedup:.4f}\">" +
                    "".join(f"<td {CELL}>{value}</td>" for value in cells) + "</tr>")
    return (f'<div class="runs-so-far" data-runs="{len(runs)}">'
            f'<p class="runs-spread" style="margin:2px 0 6px">{spread_text(runs)}</p>'
            f'<table class="runs-table" style="border-collapse:collapse;font-size:13px"><tr>{head}</tr>'
            f'{"".join(rows)}</table></div>')


def runs_chart(runs: Sequence) -> go.Figure:
    """Speedup of each run against its number in this session; 1× dotted; the last setup's repeats banded."""
    figure = base_figure("This page's runs: speedup of each", "run on this page", "× the target alone's speed",
                         legend_rows=PAGE_LEGEND_ROWS)
    if not runs:
        return with_hint(figure, "each run you make appears here")
    last = runs[-1]
    repeats = [run for run in runs if run.setup == last.setup and run.same_text]
    if len(repeats) >= 2:
        low, high = min(run.speedup for run in repeats), max(run.speedup for run in repeats)
        figure.add_hrect(y0=low, y1=high, fillcolor=COLORS["bonus"], opacity=0.12, line_width=0,
                         annotation_text=f"repeats: {low:.2f}–{high:.2f}×", annotation_position="top right")
    figure.add_hline(y=1.0, line_dash="dot", line_color="#444")
    groups = (("the last run's setup", [run for run in runs if run.setup == last.setup], COLORS["bonus"]),
              ("other settings or prompts", [run for run in runs if run.setup != last.setup], OTHER_COLOUR))
    for name, chosen, colour in groups:
        if not chosen:
            continue
        figure.add_scatter(
            x=[run.number for run in chosen], y=[run.speedup for run in chosen], mode="markers", name=name,
            marker={"size": 11, "color": [colour if run.same_text else "white" for run in chosen],
                    "line": {"color": colour, "width": 2}},
            customdata=[[run.gamma, drafter_label(run.drafter, run.tree), run.temperature, run.tokens_text,
                         "same text" if run.same_text else "different texts"] for run in chosen],
            hovertemplate=("run %{x}: %{y:.2f}×, γ = %{customdata[0]}, %{customdata[1]}, T = %{customdata[2]}, "
                           "%{customdata[3]} tokens (%{customdata[4]})<extra></extra>"),
        )
    top = max([1.2, *(run.speedup for run in runs)]) * 1.15
    figure.update_layout(yaxis_range=[0, top], xaxis={"dtick": 1, "range": [0.5, max(run.number for run in runs) + 0.5]})
    return figure
