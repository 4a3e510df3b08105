"""The step inspector's page: one round up close, opened from the round picker or by a click on a drafted token
in a lane; its layout, handlers and wiring. Its words (`words`), the deciding position's distributions or a tree round's tree,
the round drawn on its time axis, and the way back to the token clicked (static/back_to_token.js)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from specviz.analysis.trace import Trace
from specviz.app import plots, plots_round, render
from specviz.app.inspector.words import find_round, inspector_html
from specviz.app.page_files import page_file
from specviz.catalogue import lane_info

# The way back from the inspector, shown once a token was clicked (static/back_to_token.js).
BACK_TO_TOKEN_HTML = ('<button class="back-to-token" hidden style="border:1px solid #ccc;border-radius:6px;padding:2px 10px;'
                      'background:#fff;cursor:pointer;font-size:13px;font-weight:normal">↑ back to the token you clicked</button>')
# Opening a round: every click is served, one after another in the order made, so the inspector ends on
# the round clicked last. Gradio's default for a click drops one made while the previous is answered, and
# "always_last" re-sends the click without its round; its own queue keeps it clear of the model's jobs.
INSPECT = {"api_visibility": "private", "queue": True, "trigger_mode": "multiple", "concurrency_id": "inspector",
           "concurrency_limit": 1, "show_progress": "hidden"}


@dataclass
class Inspector:
    round_picker: gr.Dropdown
    html: gr.HTML
    chart: gr.Plot
    round_chart: gr.Plot  # the round drawn (specviz.app.plots_round)

    @property
    def outputs(self) -> list[gr.Component]:
        """What opening a round updates, in inspector_values' order."""
        return [self.html, self.chart, self.round_chart]


def inspector_values(run: render.RunView | None, round_index) -> tuple[str, object, object]:
    """The inspector's words, its chart (the deciding position's distributions, or a tree round's tree) and
    the round drawn."""
    event = find_round(run, round_index) if run else None
    if event is None:
        return (inspector_html(None, None),
                plots.with_hint(plots.base_figure("Step inspector", "token", "probability"), "pick a round"),
                plots_round.round_anatomy(Trace(), None))
    lane = run.speculative
    texts = lane.round_texts.get(event.round_index)
    return (inspector_html(run, round_index), plots_round.deciding_chart(event, texts, lane.labels, lane.greedy),
            plots_round.round_anatomy(lane.trace, event, texts, lane.greedy))


def build_inspector() -> Inspector:
    with gr.Accordion("Step inspector: one round up close", open=True, elem_id="inspector-section"):
        round_picker = gr.Dropdown(choices=[], value=None, label="Round", interactive=True, elem_id="round-picker")
        gr.HTML(BACK_TO_TOKEN_HTML, elem_id="back-to-token", js_on_load=page_file("back_to_token.js"))
        html, chart, drawn = inspector_values(None, None)
        round_chart = gr.Plot(drawn, show_label=False, elem_id="chart-round")
        with gr.Row(elem_id="inspector-row"):
            inspector = gr.HTML(html, elem_id="inspector")
            inspector_chart = gr.Plot(chart, show_label=False, elem_id="chart-inspector")
    return Inspector(round_picker, inspector, inspector_chart, round_chart)


def wire_inspector(inspector: Inspector, run_state: gr.State, lanes: dict[str, gr.HTML]) -> None:
    """The round picker and a click on a drafted token both open a round in the inspector."""
    inspector.round_picker.input(inspector_values, [run_state, inspector.round_picker], inspector.outputs,
                                 **INSPECT)
    for name, box in lanes.items():
        if lane_info(name).drafts:
            box.click(on_lane_click, [run_state], [inspector.round_picker, *inspector.outputs], **INSPECT)


def on_lane_click(run, event: gr.EventData):
    round_index = int(getattr(event, "round", 0) or 0) - 1  # data-round counts from 1
    if run is None or find_round(run, round_index) is None:
        return gr.Dropdown(), *inspector_values(run, None)
    return gr.Dropdown(value=round_index), *inspector_values(run, round_index)
