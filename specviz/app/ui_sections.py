"""The main page's sections in their order: the run (specviz.app.run_section), then its charts, the runs so
far, the replay, the inspector, How it works and about the drafters; `Page` gathers the components the handlers
(specviz.app.ui_handlers) read or write.

Placing only: each section's layout and words are its own module's or package's, and no handler is defined or
wired here (specviz.app.ui wires them).
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from specviz.app import render, runs_page
from specviz.app.charts.page import build_charts
from specviz.app.drafters_about.page import build_drafters_about
from specviz.app.inspector.page import Inspector, build_inspector
from specviz.app.replay_page import Replay, build_replay
from specviz.app.run_section.page import RunSection, build_run_section


@dataclass
class Page(RunSection):
    """The components the main page's handlers read or write: the run section's, then those under it."""

    charts: list[gr.Component]  # the run's charts, then the sentence under the confidence chart: redrawn together
    run_state: gr.State  # the RunView the inspector, token clicks and the theory explorer read
    # The run being drawn, as its last update left it, for Stop (ui_handlers.on_stop): None when none is, QUEUED
    # between Run and its first drawing. The updates carry it because on a ZeroGPU Space the run's own process is
    # a forked worker: what it keeps in memory never reaches Stop's handler.
    live_run: gr.State
    session_runs: gr.State  # the visitor's runs so far and last sweep (history.SessionRuns), read and written back
    replay: Replay
    inspector: Inspector
    explainer: gr.HTML
    runs_so_far: list[gr.Component]  # this session's runs: the table with its sentence, then the dot chart

    @property
    def replayed(self) -> dict[str, gr.Component]:
        """The controls a replay puts back: all but the on-screen pace."""
        return {name: control for name, control in self.controls.items() if name != "pace"}

    @property
    def run_outputs(self) -> list[gr.Component]:
        """What a run or a replay updates, in one order for gradio."""
        return [*self.stop_outputs, self.replay.download, *self.runs_so_far, self.session_runs]

    @property
    def stop_outputs(self) -> list[gr.Component]:
        return [self.status, *self.lanes.values(), self.stats, *self.charts, self.run_state, self.live_run,
                self.inspector.round_picker, *self.inspector.outputs, self.explainer]


def build_page() -> Page:
    """The main page, top to bottom, inside the Blocks being built (the teaching sections follow it)."""
    run_state, live_run, session_runs = gr.State(None), gr.State(None), gr.State(None)
    run = build_run_section()
    charts = build_charts()
    runs_so_far = runs_page.build_runs_so_far()
    replay = build_replay()
    inspector = build_inspector()
    # Closed by default: the result card and the lanes carry the lesson; the explainer is one click away.
    with gr.Accordion("How it works", open=False, elem_id="how-it-works"):
        explainer = gr.HTML(render.explain_html(None), elem_id="explainer")
    build_drafters_about()
    return Page(**vars(run), charts=charts, run_state=run_state, live_run=live_run, session_runs=session_runs, replay=replay, inspector=inspector,
                explainer=explainer, runs_so_far=runs_so_far)
