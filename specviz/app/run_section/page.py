"""The run section's layout and wiring: the header, the prompt with Run, Stop, the status line and the examples,
the controls, then the legend, one box per lane and the result card; the values a run puts in the lanes; the
handlers of controls that change other controls (the custom pair's ids, the n-gram slider, a clamped slider).

Its words are specviz.app.run_section.words; the lanes' and the card's HTML is specviz.app.render's (lanes,
stats); the run's own handlers (specviz.app.ui_handlers) send the lanes' values with the rest of the page's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable

import gradio as gr

from specviz.app import render
from specviz.app.live import PACES
from specviz.app.page_files import page_file
from specviz.app.render.tokens import MARKS_SWITCH
from specviz.app.request import CUSTOM, clamped_note
from specviz.app.run_section.words import (
    EXAMPLES_LABEL, MARKS_SWITCH_INFO, PACE_LABEL, READY_TEXT, example_label, example_prompts, header_markdown,
    precision_info,
)
from specviz.app.settings import PAIR_CHOICES, SETTING, SLIDERS, Setting, short_name
from specviz.catalogue import PAGE_LANES, drafter_info, lane_info
from specviz.models.presets import DEFAULT_PRESET, default_drafter_for

QUIET = {"api_visibility": "private", "queue": False, "show_progress": "hidden"}  # instant page-only updates
SLIDER_NAMES = {setting.name: short_name(setting) for setting in SLIDERS}  # for clamp notes


@dataclass
class RunSection:
    """The run section's components that handlers read or write."""

    controls: dict[str, gr.Component]  # Request's names (and "pace") → the control that sets them
    custom_row: gr.Row  # the custom pair's two model ids, shown for the "custom" pair only
    run_button: gr.Button
    stop_button: gr.Button
    status: gr.HTML
    lanes: dict[str, gr.HTML]  # lane name → its box, in PAGE_LANES order
    stats: gr.HTML  # the result card


# --- the controls ---------------------------------------------------------------------------------------------


def control(setting: Setting, **overrides) -> gr.Component:
    """The page's control for a declared setting (specviz.app.settings): its kind, label, help, range and
    default; `overrides` for what only the layout knows (visibility, the first example, the device's words)."""
    options = {"label": setting.page_label, "elem_id": setting.elem_id, "value": setting.default,
               **({"info": setting.info} if setting.info else {}), **overrides}
    if setting.kind == "slider":
        return gr.Slider(setting.minimum, setting.maximum, step=setting.step, **options)
    if setting.kind == "number":  # no range: gradio would refuse a bad value with its own toast, not parse's message
        return gr.Number(precision=0 if setting.parse == "whole" else None, **options)
    if setting.kind == "checkbox":
        return gr.Checkbox(**options)
    if setting.kind == "radio":
        return gr.Radio(list(setting.choices), **options)
    if setting.kind == "dropdown":
        return gr.Dropdown(list(setting.choices), **options)
    return gr.Textbox(**({"placeholder": setting.placeholder} if setting.placeholder else {}), **options)


def controls_for(*names: str, **overrides: dict) -> dict[str, gr.Component]:
    """Name → control for each named setting, in order, inside the layout being built; `overrides` by name."""
    return {name: control(SETTING[name], **overrides.get(name, {})) for name in names}


def build_prompt() -> tuple[dict[str, gr.Component], gr.Button, gr.Button, gr.HTML]:
    """The prompt and the chat switch, Run and Stop with the status line under them, then the example prompts:
    Run sits right under the prompt, on the first screen (below the settings it was under the fold)."""
    examples = example_prompts()
    controls = controls_for("prompt", "chat", prompt={"lines": 5, "max_lines": 12, "value": examples[0].text},
                            chat={"value": examples[0].chat is not False})
    with gr.Row():
        run_button = gr.Button("Run", variant="primary", elem_id="run")
        stop_button = gr.Button("Stop", variant="stop", elem_id="stop")
    status = gr.HTML(render.status_html(READY_TEXT, run=0), elem_id="status", elem_classes=["specviz-status"])
    # Labels, not gradio's two-column table: the table gave the chat switch's long label
    # most of the width and squeezed each prompt into a tall, narrow cell.
    gr.Examples(examples=[[p.text, p.chat is not False] for p in examples], inputs=list(controls.values()),
                example_labels=[example_label(p) for p in examples], label=EXAMPLES_LABEL,
                examples_per_page=len(examples), elem_id="examples")
    return controls, run_button, stop_button, status


def build_pair() -> tuple[dict[str, gr.Component], gr.Row]:
    """The model pair, and the two ids of a custom one (shown only for "custom")."""
    controls = controls_for("pair")
    with gr.Row(visible=False) as custom_row:
        controls.update(controls_for("target_id", "draft_id"))
    return controls, custom_row


def build_drafting() -> dict[str, gr.Component]:
    """Who drafts, how many tokens, and the drafting and precision options folded away."""
    with gr.Row():  # the n-gram slider shows beside the drafters that read it
        controls = controls_for("drafter", "ngram", drafter={"value": default_drafter_for(DEFAULT_PRESET)},
                                ngram={"visible": default_drafter_for(DEFAULT_PRESET) in SETTING["ngram"].drafters})
    controls.update(controls_for("gamma"))
    with gr.Accordion("Drafting and precision", open=False, elem_id="drafting-options"):
        controls.update(controls_for("draft_confidence", "rivals", "tree", "gamma_schedule", "precision",
                                     precision={"info": precision_info()}))
    return controls


def build_sampling() -> dict[str, gr.Component]:
    """Temperature, top-k, top-p, the token budget, the seed, the reference lane and the pace."""
    controls = controls_for("temperature")
    for row in (("top_k", "top_p"), ("max_new_tokens", "seed")):
        with gr.Row():
            controls.update(controls_for(*row))
    with gr.Row():
        controls.update(controls_for("reference"))
        controls["pace"] = gr.Radio(list(PACES), value=next(iter(PACES)), elem_id="pace", label=PACE_LABEL)
    return controls


# --- the lanes and the card -------------------------------------------------------------------------------------


def build_lanes() -> tuple[dict[str, gr.HTML], gr.HTML]:
    """The legend, the switch that shows the rival guesses and stop marks, one box per lane (a lane not in a run by
    default shows once a run has it; a drafting lane's rounds open in the inspector on a click), then the result
    card."""
    gr.HTML(render.legend_html(), elem_id="legend")
    # The marks it shows are hidden by page.css until it is ticked, so it needs no handler (and no redraw).
    gr.Checkbox(False, label=MARKS_SWITCH, info=MARKS_SWITCH_INFO, elem_id="lane-marks", container=False,
                interactive=True)
    empty = render.lanes_html(None, names=PAGE_LANES)
    boxes = {}
    with gr.Row(equal_height=False, elem_classes=["specviz-stack", "specviz-lanes"]):
        for name, html in zip(PAGE_LANES, empty):
            info = lane_info(name)
            scripts = (page_file("round_click.js") if info.drafts else "") + page_file("follow_lane.js")
            boxes[name] = gr.HTML(html, elem_id=f"lane-{name}", visible=info.by_default, js_on_load=scripts)
    card = gr.HTML(render.stats_html(None), elem_id="stats")
    return boxes, card


def lane_values(boxes: dict[str, gr.HTML], run: render.RunView | None, active: tuple[str, ...] = ()) -> dict:
    """Every lane box; one not in a run by default shows only while the run has it."""
    htmls = render.lanes_html(run, active, names=PAGE_LANES)
    values = {}
    for (name, box), html in zip(boxes.items(), htmls):
        shown = lane_info(name).by_default or bool(run and run.has_lane(name))
        values[box] = html if lane_info(name).by_default else gr.HTML(html, visible=shown)
    return values


# --- the section, top to bottom ---------------------------------------------------------------------------------


def build_run_section() -> RunSection:
    """The header, the prompt beside the controls, then the legend, the lanes and the card, inside the Blocks
    being built."""
    gr.Markdown(header_markdown())
    with gr.Row(elem_classes=["specviz-stack"]):
        with gr.Column(scale=3):
            controls, run_button, stop_button, status = build_prompt()
        with gr.Column(scale=2):
            pair_controls, custom_row = build_pair()
            controls.update(pair_controls)
            controls.update(build_drafting())
            controls.update(build_sampling())
    lanes, stats = build_lanes()
    return RunSection(controls=controls, custom_row=custom_row, run_button=run_button, stop_button=stop_button,
                      status=status, lanes=lanes, stats=stats)


# --- controls that change other controls -------------------------------------------------------------------------


def on_pair_change(pair):
    return gr.Row(visible=pair == CUSTOM)


def pair_pick_js(pairs: Iterable[str]) -> str:
    """A pair picked on the page brings its own drafter (the default pair's head, else the draft model).

    It runs in the browser, not as a server round trip: an answer that came back after the visitor had
    already clicked another drafter put the pair's own back over their pick."""
    own = {pair: default_drafter_for(pair) for pair in pairs}
    return f"(pair) => ({json.dumps(own)})[pair] ?? {json.dumps(default_drafter_for(CUSTOM))}"


def on_drafter_change(drafter_value):
    return gr.Slider(visible="ngram" in drafter_info(drafter_value).settings)


def on_release(name: str, slider: gr.Slider):
    """A slider's release: say so when its box pulled a typed value into range (γ = 100 → 16)."""
    def note_clamp(event: gr.EventData):
        note = clamped_note(name, getattr(event, "_data", None), slider.minimum, slider.maximum)
        return render.status_html(note, "info", run=0) if note else gr.skip()
    return note_clamp


def wire_controls(section: RunSection) -> None:
    """Controls that change other controls: the custom pair's ids, the n-gram slider, clamped values."""
    controls = section.controls
    for name, label in SLIDER_NAMES.items():
        slider = controls[name]
        slider.release(on_release(label, slider), None, [section.status], **QUIET)
    controls["pair"].change(on_pair_change, [controls["pair"]], [section.custom_row], **QUIET)
    # Only a visitor's own pick of a pair brings its drafter (input, not change): a replay sets both itself.
    controls["pair"].input(None, [controls["pair"]], [controls["drafter"]],
                           js=pair_pick_js(value for _, value in PAIR_CHOICES), **QUIET)
    controls["drafter"].change(on_drafter_change, [controls["drafter"]], [controls["ngram"]], **QUIET)
