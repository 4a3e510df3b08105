"""The page's measurement sections beside the run's charts: where the time went, in words under its chart,
and the runs made on this page so far (specviz.app.history), with how far one run's speedup moves.

Layout and values only; ui_sections places them and ui_handlers fills them.
"""

from __future__ import annotations

import gradio as gr

from specviz.analysis.timeline import time_went_text
from specviz.app import plots_runs, render
from specviz.app.render.runs_so_far import runs_table_html
from specviz.catalogue import lane_info


def runs_values(runs: list, spread=None) -> list:
    """The runs-so-far table (with how far one run moves here) and its dot chart (specviz.app.history)."""
    return [runs_table_html(runs, spread), plots_runs.runs_chart(runs)]


def build_runs_so_far() -> list[gr.Component]:
    with gr.Accordion("Runs on this page so far: how much one run's speedup varies", open=True,
                      elem_id="runs-so-far-section"):
        table, chart = runs_values([])
        return [gr.HTML(table, elem_id="runs-so-far"), gr.Plot(chart, show_label=False, elem_id="chart-runs")]


def timeline_note_html(run: render.RunView | None) -> str:
    """Where the time went, in words, under its chart (specviz.analysis.timeline)."""
    names = run.lane_names if run else ()
    text = time_went_text([(lane_info(name).label, run.lane(name).trace, lane_info(name).drafts) for name in names])
    if not text:
        return ""
    return f'<p class="time-went" style="margin:2px 0;color:#555;font-size:13.5px">{render.escape_text(text)}</p>'
