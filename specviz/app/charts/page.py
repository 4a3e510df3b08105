"""The charts' layout, and what each chart shows for a run: `CHARTS` lists them in the page's order, one entry
each (a new chart is its figure function and one entry here); the builder adds them to the Blocks being built and
returns them, and the run's handlers (specviz.app.ui_handlers, live) redraw them with `chart_values`.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

import gradio as gr

from specviz.analysis.confidence import JudgedDraft, judged_drafts
from specviz.analysis.trace import Trace
from specviz.app import plots, plots_confidence, render
from specviz.app.charts import timeline
from specviz.app.render.verdict import speedup_is_quoted


@dataclass(frozen=True)
class Drawn:
    """What the charts read of a run (or of the empty page, `run` None)."""

    run: render.RunView | None
    baseline: Trace
    speculative: Trace
    others: list[Trace]  # lanes beyond the two (the reference lane, a second drafter)
    drafts: Sequence[JudgedDraft]  # judged once, read by two entries; empty while a lane runs

    @property
    def gamma(self) -> int:
        return self.run.gamma if self.run else 4


@dataclass(frozen=True)
class Chart:
    elem_id: str
    draw: Callable[[Drawn], object]  # a plotly figure, or (html) the sentence under a chart
    live: bool = False  # redrawn while a lane runs (else when a lane ends: plotly's cost grows with the rounds drawn)
    row: str = ""  # charts with the same row sit side by side (they stack at a phone's width)
    html: bool = False


CHARTS = (
    Chart("chart-time", lambda d: plots.tokens_vs_time(d.baseline, d.speculative, *d.others,
                                                       quote_speedup=d.run is None or speedup_is_quoted(d.run)),
          live=True, row="race"),
    Chart("chart-accepted", lambda d: plots.accepted_per_round(d.speculative, d.gamma), live=True, row="race"),
    Chart("chart-alpha", lambda d: plots.cumulative_acceptance(d.speculative), row="acceptance"),
    Chart("chart-position", lambda d: plots.per_position_acceptance(d.speculative, d.gamma), row="acceptance"),
    Chart("chart-confidence", lambda d: plots_confidence.run_chart(
        d.speculative, plots_confidence.drafted_labels(d.run.speculative) if d.run else {}, d.drafts)),
    Chart("confidence-note", lambda d: plots_confidence.confidence_note_html(d.drafts), html=True),
    Chart("chart-timeline", lambda d: timeline.timeline([d.baseline, d.speculative, *d.others])),
    Chart("timeline-note", lambda d: timeline.timeline_note_html(d.run), html=True),
)


def chart_values(run: render.RunView | None, live_only: bool = False) -> list:
    """Every chart of the run and its notes, in CHARTS' order. `live_only` (a lane still running): only the live
    ones; the others are left as they are (gr.skip) until the lane ends."""
    others = [run.lane(name).trace for name in run.lane_names if name not in ("baseline", "speculative")] if run else []
    speculative = run.speculative.trace if run else Trace(lane="speculative")
    drawn = Drawn(run, run.baseline.trace if run else Trace(lane="baseline"), speculative, others,
                  () if live_only else judged_drafts(speculative))
    return [chart.draw(drawn) if chart.live or not live_only else gr.skip() for chart in CHARTS]


def build_charts() -> list[gr.Component]:
    """The charts in CHARTS' order: a row's charts side by side, the others across the page."""
    components = []
    values = iter(chart_values(None))
    for row, charts in itertools.groupby(CHARTS, key=lambda chart: chart.row):
        with gr.Row(elem_classes=["specviz-stack"]) if row else contextlib.nullcontext():
            components += [gr.HTML(next(values), elem_id=chart.elem_id) if chart.html
                           else gr.Plot(next(values), show_label=False, elem_id=chart.elem_id) for chart in charts]
    return components
