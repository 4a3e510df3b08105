"""The charts' layout, and what each chart shows for a run: the builder adds them to the Blocks being built and
returns them; the run's handlers (specviz.app.ui_handlers, live) redraw them with `chart_values`.
"""

from __future__ import annotations

import gradio as gr

from specviz.analysis.confidence import judged_drafts
from specviz.analysis.trace import Trace
from specviz.app import plots, plots_confidence, render
from specviz.app.charts import timeline
from specviz.app.render.verdict import speedup_is_quoted


def chart_values(run: render.RunView | None, live_only: bool = False) -> list:
    """Every chart of the run and its notes, in the page's order. `live_only` (a lane still running): only the
    race and the rounds as they are decided; the others are left as they are until the lane ends, since each one's
    plotly cost grows with the rounds drawn, and drawing them all twice a second would slow a lane on screen."""
    baseline = run.baseline.trace if run else Trace(lane="baseline")
    speculative = run.speculative.trace if run else Trace(lane="speculative")
    others = [run.lane(name).trace for name in run.lane_names if name not in ("baseline", "speculative")] if run else []
    gamma = run.gamma if run else 4
    drafts = () if live_only else judged_drafts(speculative)  # read by two of the charts drawn at a lane's end
    charts = [  # (drawn live, how)
        (True, lambda: plots.tokens_vs_time(baseline, speculative, *others,
                                             quote_speedup=run is None or speedup_is_quoted(run))),
        (True, lambda: plots.accepted_per_round(speculative, gamma)),
        (False, lambda: plots.cumulative_acceptance(speculative)),
        (False, lambda: plots.per_position_acceptance(speculative)),
        (False, lambda: plots_confidence.run_chart(speculative, plots_confidence.drafted_labels(run.speculative) if run else {},
                                                   drafts)),
        (False, lambda: plots_confidence.confidence_note_html(drafts)),
        (False, lambda: timeline.timeline([baseline, speculative, *others])),
        (False, lambda: timeline.timeline_note_html(run)),
    ]
    return [draw() if live or not live_only else gr.skip() for live, draw in charts]


def build_charts() -> list[gr.Component]:
    """The run's four charts, two to a row, then easy and hard tokens across the page with its sentence, then
    where the time went (every forward on one clock) with its sentence."""
    initial = iter(chart_values(None))
    charts = []
    for row in (("chart-time", "chart-accepted"), ("chart-alpha", "chart-position")):
        with gr.Row(elem_classes=["specviz-stack"]):
            charts += [gr.Plot(next(initial), show_label=False, elem_id=elem_id) for elem_id in row]
    charts.append(gr.Plot(next(initial), show_label=False, elem_id="chart-confidence"))
    charts.append(gr.HTML(next(initial), elem_id="confidence-note"))
    charts.append(gr.Plot(next(initial), show_label=False, elem_id="chart-timeline"))
    charts.append(gr.HTML(next(initial), elem_id="timeline-note"))
    return charts
