"""The page's teaching sections: step mode, the exactness lab, the theory explorer and the γ sweep.

Wiring only: the layout is in specviz.app.teach_sections, the handlers in
specviz.app.teach_handlers, the logic in specviz.app.lab, the words in specviz.app.step_lessons
(step mode) and specviz.app.lessons (the rest), and the figures in specviz.app.plots_teach.
`build_sections` runs inside ui.build_app's Blocks and reads the main page's controls, so every
section works on the settings the user already chose. Jobs
that run the models go through the queue in the page's one model concurrency group, and the long
ones (lab, sweep) can be stopped and respect the host's time limit per run.
"""

from __future__ import annotations

from types import MethodType
from typing import Callable

import gradio as gr

from specviz.app.teach_handlers import (
    on_lab_example, on_lab_run, on_lab_stop, on_measured_run, on_step_guess, on_step_next, on_step_start, on_sweep_run,
    on_sweep_stop,
)
from specviz.app.teach_sections import (
    CONTROL_NAMES, LabSection, StepSection, SweepSection, TheorySection, build_lab, build_step_mode, build_sweep,
    build_theory, theory_values,
)


def build_sections(controls: dict[str, gr.Component], run_state: gr.State, status: gr.HTML, stats: gr.HTML,
                   concurrency_id: str = "model", on_gpu: Callable = lambda fn: fn) -> None:
    """Add the four sections to the Blocks being built and wire them. `controls` maps names in
    CONTROL_NAMES to the main page's inputs; `status` is the main page's status line, beside them, and `stats`
    the last run's statistics (a γ sweep of its setup gives them their recommended γ); `concurrency_id` is the
    page's model queue; `on_gpu` wraps model handlers (ZeroGPU on a Space)."""
    names = [name for name in CONTROL_NAMES if name in controls]
    inputs = [controls[name] for name in names]
    wire_step_mode(build_step_mode(names), inputs, concurrency_id, on_gpu)
    wire_lab(build_lab(names, controls), inputs, status, concurrency_id, on_gpu)
    wire_theory(build_theory(), run_state)
    wire_sweep(build_sweep(names), inputs, run_state, stats, concurrency_id, on_gpu)


def wire_step_mode(section: StepSection, inputs: list, concurrency_id: str, on_gpu: Callable) -> None:
    """Start reads the page's controls; Next round advances the visitor's run by one round."""
    outputs = section.outputs
    section.start_button.click(on_gpu(MethodType(on_step_start, section)), [section.state, *inputs], outputs,
                               api_visibility="private", concurrency_id=concurrency_id)
    section.next_button.click(on_gpu(on_step_next), [section.state, section.guess_first], outputs,
                              api_visibility="private", concurrency_id=concurrency_id, show_progress="hidden")
    # a guess shows the round already run: no model work, so no queue
    section.guess.input(on_step_guess, [section.state, section.guess], outputs, api_visibility="private", queue=False,
                        show_progress="hidden")


def wire_lab(section: LabSection, inputs: list, page_status: gr.HTML, concurrency_id: str, on_gpu: Callable) -> None:
    """Run streams the tally into the status and the histogram; Stop cancels it; the example sets controls and
    says so in the lab and in the page's status line."""
    lab_event = section.run_button.click(
        on_gpu(MethodType(on_lab_run, section)), [section.num_draws, section.wrong_rule, *inputs],
        [section.status, section.chart], api_visibility="private", concurrency_id=concurrency_id,
        show_progress="hidden",
    )
    section.stop_button.click(on_lab_stop, [section.status], [section.status], cancels=[lab_event], queue=False,
                              api_visibility="private")
    section.example_button.click(MethodType(on_lab_example, section), None,
                                 [*section.examples.values(), section.num_draws, section.wrong_rule, section.status,
                                  section.chart, page_status],
                                 queue=False, api_visibility="private")


def wire_theory(section: TheorySection, run_state: gr.State) -> None:
    """Each slider redraws the chart and note; a finished run (or the button) moves the sliders to its values."""
    sliders = section.sliders
    # One listener for all three sliders, not one each: "always_last" holds back a redraw only while the same
    # listener's last one is in flight, so with three listeners an older slider's reply could land after a newer
    # one's and leave the note at values the sliders no longer show.
    # A visitor's own moves only (input, not change): a run's values come with their chart (on_measured_run), and
    # change events for values set in a closed accordion redrew with some sliders old.
    gr.on([slider.input for slider in sliders], theory_values, [*sliders, run_state], [section.chart, section.note],
          api_visibility="private", queue=False, show_progress="hidden", trigger_mode="always_last")
    measured = [*sliders, section.chart, section.note]
    run_state.change(on_measured_run, [run_state], measured, api_visibility="private", queue=False,
                     show_progress="hidden")
    section.from_run.click(on_measured_run, [run_state], measured, api_visibility="private", queue=False,
                           show_progress="hidden")


def wire_sweep(section: SweepSection, inputs: list, run_state: gr.State, stats: gr.HTML, concurrency_id: str,
               on_gpu: Callable) -> None:
    """Run streams the sweep into its chart, then restates the last run's statistics where it swept that setup."""
    sweep_event = section.run_button.click(
        on_gpu(MethodType(on_sweep_run, section)),
        [section.smallest, section.largest, section.repeats, run_state, *inputs],
        [*section.outputs, stats], api_visibility="private", concurrency_id=concurrency_id,
        show_progress="hidden",
    )
    section.stop_button.click(on_sweep_stop, [section.status], [section.status], cancels=[sweep_event], queue=False,
                              api_visibility="private")
