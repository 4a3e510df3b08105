"""The page's runs so far as dots (specviz.app.history): one run's speedup, and how far it moves.

Built from the runs' records only. The last run's setup (same prompt and settings) is drawn in colour and
every other run in grey, so repeats stand out as a column of dots; a hollow dot is a run whose lanes wrote
different texts (no like-for-like speed); a band behind the repeats spans their min–max.
"""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from specviz.app.palette import COLORS
from specviz.app.plots import PAGE_LEGEND_ROWS, base_figure, with_hint

OTHER_COLOUR = "#9a9a9a"


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
            customdata=[[run.gamma, run.drafter, run.temperature, run.tokens_text,
                         "same text" if run.same_text else "different texts"] for run in chosen],
            hovertemplate=("run %{x}: %{y:.2f}×, γ = %{customdata[0]}, %{customdata[1]}, T = %{customdata[2]}, "
                           "%{customdata[3]} tokens (%{customdata[4]})<extra></extra>"),
        )
    top = max([1.2, *(run.speedup for run in runs)]) * 1.15
    figure.update_layout(yaxis_range=[0, top], xaxis={"dtick": 1, "range": [0.5, max(run.number for run in runs) + 0.5]})
    return figure
