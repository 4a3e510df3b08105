"""Where the time went, drawn (specviz.analysis.trace): one row per lane, each from 0 on its own clock (the
lanes take turns, and each lane's clock runs only in its own turns), target forwards as tall blocks as wide as they took and draft forwards as thin
blocks under them. The lane that finishes first is the faster one: the speedup is seen, not just read.
"""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from specviz.analysis.trace import Block, Trace, lane_blocks, time_went_text
from specviz.app import render
from specviz.app.palette import COLORS
from specviz.app.plots import base_figure, with_hint
from specviz.catalogue import lane_info

TARGET_HEIGHT, DRAFT_HEIGHT = 0.6, 0.22  # in rows: a draft forward is a thin block under the target's row
# name in the legend (short: six of them wrap to two columns in a phone's legend rows; one of 30 characters made
# them six rows, over the title), colour, and whether it sits in the thin draft band
STYLES = {
    "prefill": ("prefill", "#bdbdbd", False),
    "step": ("target step", "#7f7f7f", False),
    "verify-kept": ("verify: all kept", COLORS["bonus"], False),
    "verify-rejected": ("verify: one rejected", COLORS["resample"], False),
    "draft-kept": ("draft: kept", COLORS["accepted"], True),
    "draft-thrown": ("draft: thrown away", COLORS["rejected"], True),
}
LEGEND_ROWS = 3
ROW_GAP = 1.0


def hover_text(block: Block) -> str:
    what = (f"round {block.round_index + 1}" if block.round_index is not None
            else "the prefill (the prompt; both models for speculative)")
    if block.is_draft:
        fate = "its token kept" if block.kind == "draft-kept" else "its token thrown away"
        return f"{what}: a draft forward, {block.duration_s * 1000:.1f} ms, {fate}"
    forwards = f", {block.num_forwards} forwards" if block.num_forwards > 1 else ""
    tokens = "1 token" if block.num_tokens == 1 else f"{block.num_tokens} tokens"
    return f"{what}: {STYLES[block.kind][0]}, {block.duration_s * 1000:.1f} ms{forwards}, {tokens}"


def timeline(traces: Sequence[Trace]) -> go.Figure:
    """Each lane's blocks in its own row, top to bottom in the order given (the target alone first)."""
    started = [trace for trace in traces if trace.prefill is not None]
    title = "Where the time went: each forward as a block on one clock"
    figure = base_figure(title, "seconds of model work (each lane from its own start)", "", legend_rows=LEGEND_ROWS)
    if not started:
        return with_hint(figure, "press Run")
    rows = {trace.lane or "baseline": -index * ROW_GAP for index, trace in enumerate(started)}
    blocks_by_kind: dict[str, list[tuple[float, Block]]] = {kind: [] for kind in STYLES}
    for trace in started:
        for block in lane_blocks(trace):
            blocks_by_kind[block.kind].append((rows[trace.lane or "baseline"], block))
    for kind, entries in blocks_by_kind.items():
        if not entries:
            continue
        name, colour, thin = STYLES[kind]
        figure.add_bar(
            orientation="h", name=name, marker={"color": colour, "line": {"width": 0.5, "color": "white"}},
            base=[block.start_s for _, block in entries], x=[block.duration_s for _, block in entries],
            y=[row - (TARGET_HEIGHT + DRAFT_HEIGHT) / 2 if thin else row for row, _ in entries],
            width=DRAFT_HEIGHT if thin else TARGET_HEIGHT,
            hovertext=[hover_text(block) for _, block in entries], hoverinfo="text",
        )
    ends = [(trace.wall_s, rows[trace.lane or "baseline"]) for trace in started]
    for end_s, row in ends:  # where each lane finished: the faster lane's line comes first
        figure.add_shape(type="line", x0=end_s, x1=end_s, y0=row - 0.55, y1=row + 0.4,
                         line={"color": "#444", "width": 1.5, "dash": "dot"})
    figure.update_layout(
        barmode="overlay", bargap=0,
        yaxis={"tickvals": list(rows.values()), "ticktext": [lane_info(lane).label for lane in rows],
               "range": [min(rows.values()) - 0.8, 0.6], "showgrid": False, "zeroline": False},
        xaxis={"range": [0, max(end for end, _ in ends) * 1.02 or 1.0]},
        margin={"l": 110},
    )
    return figure


def timeline_note_html(run: render.RunView | None) -> str:
    """Where the time went, in words, under its chart (specviz.analysis.trace)."""
    names = run.lane_names if run else ()
    text = time_went_text([(lane_info(name).label, run.lane(name).trace, lane_info(name).drafts) for name in names])
    if not text:
        return ""
    return f'<p class="time-went" style="margin:2px 0;color:#555;font-size:13.5px">{render.escape_text(text)}</p>'
