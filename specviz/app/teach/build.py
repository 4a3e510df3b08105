"""The page's teaching sections, one module each: step mode (`step_page`), the exactness lab (`lab_page`), the
theory explorer (`theory_page`) and the γ sweep (`sweep_page`). Each holds its layout (`build_*`), its handlers
(`on_*`), its wiring (`wire_*`), its figure and its words; the gradio-free logic is in specviz.app.lab.
"""

from __future__ import annotations

import gradio as gr

from specviz.app.teach.lab_page import build_lab, wire_lab
from specviz.app.teach.shared import CONTROL_NAMES
from specviz.app.teach.step_page import build_step_mode, wire_step_mode
from specviz.app.teach.sweep_page import build_sweep, wire_sweep
from specviz.app.teach.theory_page import build_theory, wire_theory


def build_sections(controls: dict[str, gr.Component], run_state: gr.State, status: gr.HTML, stats: gr.HTML,
                   concurrency_id: str = "model") -> None:
    """Add the four sections to the Blocks being built (ui.build_app's) and wire them to the main page's controls,
    so every section works on the settings the visitor already chose. `status` is the main page's status line and
    `stats` the last run's statistics (a γ sweep of its setup gives them their recommended γ); model jobs go
    through the page's model queue, `concurrency_id`, on a borrowed GPU on a ZeroGPU Space (specviz.app.zerogpu)."""
    names = [name for name in CONTROL_NAMES if name in controls]
    inputs = [controls[name] for name in names]
    wire_step_mode(build_step_mode(names), inputs, concurrency_id)
    wire_lab(build_lab(names, controls), inputs, status, concurrency_id)
    wire_theory(build_theory(), run_state)
    wire_sweep(build_sweep(names), inputs, run_state, stats, concurrency_id)
