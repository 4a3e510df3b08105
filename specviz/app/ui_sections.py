"""The main page's sections, each a small builder that adds its components to the Blocks being
built and returns them; `Page` gathers the ones the handlers (specviz.app.ui_handlers) read or write.

Layout only: no handler is defined or wired here (specviz.app.ui wires them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import gradio as gr
import torch

from specviz.app import plots, render
from specviz.analysis.bench import Prompt, load_prompts
from specviz.catalogue import DRAFTER_CATALOGUE, PAGE_LANES, lane_info
from specviz.decoding.config import GAMMA_SCHEDULES, MAX_GAMMA, MAX_NGRAM, MAX_RIVALS, DecodeConfig
from specviz.app.live import PACES
from specviz.models.precision import cpu_has_native_bf16, default_precision
from specviz.models.presets import DEFAULT_PRESET, PRESETS, default_drafter_for
from specviz.app.render.lanes import FOLLOW_LANE_JS
from specviz.app.request import CUSTOM, MAX_NEW_TOKENS
from specviz.analysis.run import recorded_runs
from specviz.analysis.trace import Trace

log = logging.getLogger("specviz.app.ui")

REPLAY_SPEEDS = {"0.25×": 0.25, "1× (as recorded)": 1.0, "4×": 4.0, "at once": float("inf")}
# The short label: a longer text wraps once the n-gram slider opens beside the radio, and the controls
# below jump (a browser test's click on the reference switch missed for it).
DRAFTER_CHOICES = [(info.label, info.name) for info in DRAFTER_CATALOGUE]
PRECISION_CHOICES = [("default for this device", ""), ("float32", "float32"),
                     ("bfloat16: fast with native bf16", "bfloat16")]
FALLBACK_PROMPTS = [
    Prompt("What is the capital of Scotland?", True),
    Prompt("Alice and Bob were walking through the park when", False),
    Prompt("def fibonacci(n):\n", False),
]
# A click on a round of a drafting lane asks the server to open that round in the inspector,
# and brings the inspector into view (it sits below the charts, out of sight on most screens).
ROUND_CLICK_JS = """
element.addEventListener('click', (event) => {
  const round = event.target.closest('.round');
  if (!round) { return; }
  trigger('click', {round: Number(round.dataset.round)});
  document.getElementById('inspector-section')?.scrollIntoView({block: 'start'});
});
""" + FOLLOW_LANE_JS


@dataclass
class Replay:
    """Save and replay: the download of the last run, and what to replay at which speed."""

    download: gr.DownloadButton
    pick: gr.Dropdown
    file: gr.File
    speed: gr.Radio
    button: gr.Button


@dataclass
class Inspector:
    round_picker: gr.Dropdown
    html: gr.HTML
    chart: gr.Plot


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
    charts: list[gr.Plot]
    run_state: gr.State  # the RunView the inspector, token clicks and the theory explorer read
    replay: Replay
    inspector: Inspector
    explainer: gr.HTML

    @property
    def replayed(self) -> dict[str, gr.Component]:
        """The controls a replay puts back: all but the on-screen pace."""
        return {name: control for name, control in self.controls.items() if name != "pace"}

    @property
    def run_outputs(self) -> list[gr.Component]:
        """What a run or a replay updates, in one order for gradio."""
        return [*self.stop_outputs, self.replay.download]

    @property
    def stop_outputs(self) -> list[gr.Component]:
        return [self.status, *self.lanes.values(), self.stats, *self.charts, self.run_state,
                self.inspector.round_picker, self.inspector.html, self.inspector.chart, self.explainer]


# --- what the sections show ------------------------------------------------------------------------


def status_html(message: str, kind: str = "info", run_id: int = 0) -> str:
    return f'<div class="status-{kind}" data-kind="{kind}" data-run="{run_id}">{render.escape_text(message)}</div>'


def chart_values(run: render.RunView | None) -> list:
    baseline = run.baseline.trace if run else Trace(lane="baseline")
    speculative = run.speculative.trace if run else Trace(lane="speculative")
    others = [run.lane(name).trace for name in run.lane_names if name not in ("baseline", "speculative")] if run else []
    gamma = run.gamma if run else 4
    return [
        plots.tokens_vs_time(baseline, speculative, *others),
        plots.accepted_per_round(speculative, gamma),
        plots.cumulative_acceptance(speculative),
        plots.per_position_acceptance(speculative),
    ]


def inspector_values(run: render.RunView | None, round_index) -> tuple[str, object]:
    event = render.find_round(run, round_index) if run else None
    if event is None:
        return render.inspector_html(None, None), plots.with_hint(plots.base_figure("Step inspector", "token", "probability"), "pick a round")
    return render.inspector_html(run, round_index), plots.decision_distributions(event, run.speculative.labels)


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
    return (f"Here: {hardware}, so the default is {default_precision(device)}. In either precision specviz "
            "computes every token the target checks with the same arithmetic whether it checks one token or several "
            "at once (a batch-invariant attention and matrix products), so at temperature 0 the lanes write the same "
            "text by construction; the stats say what was measured when the model loaded. Without native bf16, "
            "bfloat16 is slow")


def header_markdown() -> str:
    return (
        "# specviz — speculative decoding, live\n"
        "A cheap **drafter** guesses γ tokens (here a small head that reads the target's own hidden states, or a "
        "small draft model); the big **target** model checks them all in one pass. "
        "Type a prompt (or click an example), pick the settings and press **Run**: the left lane is the target "
        "alone, the right lane is speculative decoding with every drafted token coloured by its fate. "
        "Hover a token for q, p, min(1, p/q) and r; click one to open its round in the inspector."
    )


# --- the sections ---------------------------------------------------------------------------------


def build_prompt() -> dict[str, gr.Component]:
    """The prompt, the chat switch and the example prompts."""
    examples = example_prompts()
    prompt = gr.Textbox(label="Prompt", lines=5, max_lines=12, elem_id="prompt", value=examples[0].text)
    chat = gr.Checkbox(
        value=examples[0].chat is not False, label="chat: wrap the prompt in the pair's chat template "
        "(instruct models answer questions; off = plain text completion)", elem_id="chat",
    )
    # Labels, not gradio's two-column table: the table gave the chat switch's long label
    # most of the width and squeezed each prompt into a tall, narrow cell.
    gr.Examples(examples=[[p.text, p.chat is not False] for p in examples], inputs=[prompt, chat],
                example_labels=[example_label(p) for p in examples], label="Example prompts (click one)",
                examples_per_page=len(examples), elem_id="examples")
    return {"prompt": prompt, "chat": chat}


def build_pair() -> tuple[dict[str, gr.Component], gr.Row]:
    """The model pair, and the two ids of a custom one (shown only for "custom")."""
    pair_choices = [(f"{p.name} — {p.note}", p.name) for p in PRESETS.values()]
    pair_choices.append(("custom — type a target and a draft model id", CUSTOM))
    pair = gr.Dropdown(pair_choices, value=DEFAULT_PRESET, label="Model pair (draft → target)", elem_id="pair")
    with gr.Row(visible=False) as custom_row:
        target_id = gr.Textbox(label="Target model id", placeholder="e.g. EleutherAI/pythia-1.4b-deduped", elem_id="target-id")
        draft_id = gr.Textbox(label="Draft model id", placeholder="e.g. EleutherAI/pythia-160m-deduped", elem_id="draft-id")
    return {"pair": pair, "target_id": target_id, "draft_id": draft_id}, custom_row


def build_drafting() -> dict[str, gr.Component]:
    """Who drafts, how many tokens, and the drafting and precision options folded away."""
    with gr.Row():
        drafter = gr.Radio(DRAFTER_CHOICES, value=default_drafter_for(DEFAULT_PRESET), label="drafter: who proposes the γ tokens",
                           elem_id="drafter")
        ngram = gr.Slider(1, MAX_NGRAM, value=3, step=1, label="prompt lookup: longest n-gram", elem_id="ngram",
                          visible=False)
    gamma = gr.Slider(1, MAX_GAMMA, value=3, step=1, label="γ — tokens drafted per round", elem_id="gamma")
    with gr.Accordion("Drafting and precision", open=False, elem_id="drafting-options"):
        draft_confidence = gr.Slider(
            0, 0.95, value=DecodeConfig.draft_confidence, step=0.05, elem_id="draft-confidence",
            label="draft only while sure: stop a round after a draft the drafter gave less than this",
            info="0 = always draft γ. A verify of more tokens costs more, so unlikely drafts cost twice; "
                 "the lane marks where a round stopped (‖)",
        )
        rivals = gr.Slider(
            0, MAX_RIVALS, value=DecodeConfig.rivals, step=1, elem_id="rivals",
            label="rival guesses (greedy): where the drafter is unsure of a round's first token, verify its next guesses too",
            info="0 = off. They ride along in the same verify, each at that position; the target takes the one that is "
                 "its own choice. The lane shows them small and struck through after the first draft",
        )
        gamma_schedule = gr.Radio(list(GAMMA_SCHEDULES), value=DecodeConfig.gamma_schedule,
                                  elem_id="gamma-schedule", label="γ schedule",
                                  info="heuristic (transformers'): γ + 2 after a round whose drafts were "
                                       "all accepted, γ − 1 otherwise")
        precision = gr.Radio(PRECISION_CHOICES, value="", elem_id="precision", label="precision",
                             info=precision_info())
    return {"drafter": drafter, "ngram": ngram, "gamma": gamma, "draft_confidence": draft_confidence,
            "rivals": rivals, "gamma_schedule": gamma_schedule, "precision": precision}


def build_sampling() -> dict[str, gr.Component]:
    """Temperature, top-k, top-p, the token budget, the seed, the reference lane and the pace."""
    temperature = gr.Slider(0, 2, value=0.0, step=0.05, label="temperature (0 = greedy)", elem_id="temperature",
                            info="0: both lanes write the same text, so the speed compares like for like; "
                                 "above 0 each lane draws its own sample")
    with gr.Row():
        top_k = gr.Slider(0, 200, value=0, step=1, label="top-k (0 = off)", elem_id="top-k")
        top_p = gr.Slider(0.05, 1, value=1.0, step=0.05, label="top-p (1 = off)", elem_id="top-p")
    with gr.Row():
        max_new_tokens = gr.Slider(1, MAX_NEW_TOKENS, value=64, step=1, label="max new tokens", elem_id="max-new-tokens")
        # No minimum here: gradio would refuse −5 with its own toast before Request.parse says why.
        seed = gr.Number(value=0, precision=0, label="seed", elem_id="seed")
    with gr.Row():
        reference = gr.Checkbox(value=False, elem_id="reference",
                                label="also run transformers' generate() on the same pair (reference lane)")
        pace = gr.Radio(list(PACES), value="real time", elem_id="pace",
                        label="pace of the speculative lane on screen (timings are unchanged)")
    return {"temperature": temperature, "top_k": top_k, "top_p": top_p, "max_new_tokens": max_new_tokens,
            "seed": seed, "reference": reference, "pace": pace}


def build_lanes() -> dict[str, gr.HTML]:
    """One box per lane; a lane not in a run by default shows once a run has it. A drafting lane's
    rounds open in the inspector on a click."""
    empty = render.lanes_html(None, names=PAGE_LANES)
    boxes = {}
    with gr.Row(equal_height=False, elem_classes=["specviz-stack"]):
        for name, html in zip(PAGE_LANES, empty):
            info = lane_info(name)
            boxes[name] = gr.HTML(html, elem_id=f"lane-{name}", visible=info.by_default,
                                  js_on_load=ROUND_CLICK_JS if info.drafts else FOLLOW_LANE_JS)
    return boxes


def build_charts() -> list[gr.Plot]:
    """The run's four charts, two to a row."""
    initial = iter(chart_values(None))
    charts = []
    for row in (("chart-time", "chart-accepted"), ("chart-alpha", "chart-position")):
        with gr.Row(elem_classes=["specviz-stack"]):
            charts += [gr.Plot(next(initial), show_label=False, elem_id=elem_id) for elem_id in row]
    return charts


def build_replay() -> Replay:
    recorded = list(recorded_runs())
    with gr.Accordion("Save and replay a run", open=False):
        with gr.Row():
            download = gr.DownloadButton("Download this run (JSON)", visible=False, elem_id="run-download")
            pick = gr.Dropdown(recorded, value=recorded[0] if recorded else None, label="recorded runs",
                               elem_id="replay-pick")
            file = gr.File(label="or upload a run file", file_types=[".json", ".gz"], type="filepath",
                           elem_id="replay-file")
            speed = gr.Radio(list(REPLAY_SPEEDS), value="1× (as recorded)", label="replay speed",
                             elem_id="replay-speed")
        button = gr.Button("Replay", elem_id="replay-run")
    return Replay(download, pick, file, speed, button)


def build_inspector() -> Inspector:
    with gr.Accordion("Step inspector: one round up close", open=True, elem_id="inspector-section"):
        round_picker = gr.Dropdown(choices=[], value=None, label="Round", interactive=True, elem_id="round-picker")
        html, chart = inspector_values(None, None)
        with gr.Row(elem_id="inspector-row"):
            inspector = gr.HTML(html, elem_id="inspector")
            inspector_chart = gr.Plot(chart, show_label=False, elem_id="chart-inspector")
    return Inspector(round_picker, inspector, inspector_chart)


def build_page() -> Page:
    """The main page, top to bottom, inside the Blocks being built (the teaching sections follow it)."""
    run_state = gr.State(None)
    gr.Markdown(header_markdown())
    with gr.Row(elem_classes=["specviz-stack"]):
        with gr.Column(scale=3):
            controls = build_prompt()
        with gr.Column(scale=2):
            pair_controls, custom_row = build_pair()
            controls.update(pair_controls)
            controls.update(build_drafting())
            controls.update(build_sampling())
            with gr.Row():
                run_button = gr.Button("Run", variant="primary", elem_id="run")
                stop_button = gr.Button("Stop", variant="stop", elem_id="stop")
    status = gr.HTML(status_html("Ready: press Run."), elem_id="status", elem_classes=["specviz-status"])
    gr.HTML(render.legend_html(), elem_id="legend")
    lanes = build_lanes()
    stats = gr.HTML(render.stats_html(None), elem_id="stats")
    charts = build_charts()
    replay = build_replay()
    inspector = build_inspector()
    with gr.Accordion("How it works", open=True):
        explainer = gr.HTML(render.explain_html(None), elem_id="explainer")
    return Page(controls, custom_row, run_button, stop_button, status, lanes, stats, charts, run_state, replay,
                inspector, explainer)
