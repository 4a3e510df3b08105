"""The main page's sections, each a small builder that adds its components to the Blocks being
built and returns them; `Page` gathers the ones the handlers (specviz.app.ui_handlers) read or write.

Layout only: no handler is defined or wired here (specviz.app.ui wires them). The sections that are packages of
their own keep their layout there (specviz.app.charts, drafters_about, inspector); this module places them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import gradio as gr
import torch

from specviz.app import render, runs_page
from specviz.analysis.bench import Prompt, load_prompts
from specviz.app.live import PACES
from specviz.models.precision import cpu_has_native_bf16, default_precision
from specviz.models.slots import call_rows
from specviz.models.presets import DEFAULT_PRESET, default_drafter_for
from specviz.app.charts.page import build_charts
from specviz.app.drafters_about.page import build_drafters_about
from specviz.app.inspector.page import Inspector, build_inspector
from specviz.app.lanes_page import build_lanes
from specviz.app.replay_page import Replay, build_replay
from specviz.app.settings import SETTING, Setting

log = logging.getLogger("specviz.app.ui")

FALLBACK_PROMPTS = [
    Prompt("What is the capital of Scotland?", True),
    Prompt("Alice and Bob were walking through the park when", False),
    Prompt("def fibonacci(n):\n", False),
]


@dataclass
class Page:
    """The components the main page's handlers read or write."""

    controls: dict[str, gr.Component]  # Request's names (and "pace") → the control that sets them
    custom_row: gr.Row  # the custom pair's two model ids, shown for the "custom" pair only
    run_button: gr.Button
    stop_button: gr.Button
    status: gr.HTML
    lanes: dict[str, gr.HTML]  # lane name → its box, in PAGE_LANES order
    stats: gr.HTML
    charts: list[gr.Component]  # the run's charts, then the sentence under the confidence chart: redrawn together
    run_state: gr.State  # the RunView the inspector, token clicks and the theory explorer read
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
        return [*self.stop_outputs, self.replay.download, *self.runs_so_far]

    @property
    def stop_outputs(self) -> list[gr.Component]:
        return [self.status, *self.lanes.values(), self.stats, *self.charts, self.run_state,
                self.inspector.round_picker, *self.inspector.outputs, self.explainer]


# --- what the sections show ------------------------------------------------------------------------


def example_prompts() -> list[Prompt]:
    """The example prompts in assets/prompts.json, or a few built-ins if that file is unreadable."""
    try:
        return load_prompts()
    except (OSError, ValueError) as error:
        log.warning("could not read example prompts: %s", error)
        return FALLBACK_PROMPTS


def example_label(prompt: Prompt, max_chars: int = 90) -> str:
    """An example's button: its prompt on one line, shortened, marked where it is a plain completion (chat off)."""
    text = " ".join(prompt.text.split())
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return text if prompt.chat is not False else f"completion: {text}"  # first, since gradio cuts long labels


def precision_info() -> str:
    """What the default is here and why, in the words of the bench (README)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        hardware = "a CUDA GPU"
    else:
        hardware = "a CPU " + ("with" if cpu_has_native_bf16() else "without") + " native bf16 (AMX / AVX512-BF16)"
    return (f"Here: {hardware}, so the default is {default_precision(device)}. In either precision, on any CPU "
            f"or GPU, specviz computes every token the target checks in one fixed shape ({call_rows(device)} rows a "
            "call, each over its own keys), so checking several tokens at once rounds exactly like checking one and at temperature 0 the "
            "lanes write the same text by construction; the stats say so for each model, and say where a model's "
            "attention keeps it out. Without native bf16, bfloat16 is slow")


def header_markdown() -> str:
    """The first view: what this is and what to do, in words before any notation (the lanes stack on a
    narrow screen, so they are named, never "left" and "right")."""
    return (
        "# specviz — speculative decoding, live\n"
        "A language model writes one token per pass through its network. **Speculative decoding** lets a small, "
        "cheap **drafter** guess the next few tokens and the big **target** model check all the guesses in one "
        "pass: the output is still exactly the target's, made in fewer of its slow passes.\n\n"
        "**Try it:** pick an example prompt below (or type your own) and press **Run**. Then watch the two lanes: "
        "**Target only** writes the plain way, one token per pass; **Speculative decoding** writes the same text "
        "with every guess coloured by what happened to it. Click a coloured token to see why it was kept or thrown "
        "away. *About the drafters* and *How it works*, further down, explain the rest."
    )


# --- the sections ---------------------------------------------------------------------------------


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
    status = gr.HTML(render.status_html("Ready: press Run.", run=0), elem_id="status", elem_classes=["specviz-status"])
    # Labels, not gradio's two-column table: the table gave the chat switch's long label
    # most of the width and squeezed each prompt into a tall, narrow cell.
    gr.Examples(examples=[[p.text, p.chat is not False] for p in examples], inputs=list(controls.values()),
                example_labels=[example_label(p) for p in examples], label="Example prompts (click one)",
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
        # The pace is the page's alone (not a run setting): its home is live.PACES.
        controls["pace"] = gr.Radio(list(PACES), value=next(iter(PACES)), elem_id="pace",
                                    label="pace of the speculative lane on screen (timings are unchanged)")
    return controls


def build_page() -> Page:
    """The main page, top to bottom, inside the Blocks being built (the teaching sections follow it)."""
    run_state = gr.State(None)
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
    charts = build_charts()
    runs_so_far = runs_page.build_runs_so_far()
    replay = build_replay()
    inspector = build_inspector()
    # Closed by default: the result card and the lanes carry the lesson; the explainer is one click away.
    with gr.Accordion("How it works", open=False, elem_id="how-it-works"):
        explainer = gr.HTML(render.explain_html(None), elem_id="explainer")
    build_drafters_about()
    return Page(controls, custom_row, run_button, stop_button, status, lanes, stats, charts, run_state, replay,
                inspector, explainer, runs_so_far)
