"""The Gradio app: layout and wiring. Handlers are thin adapters from engine events to values.

specviz's gradio modules are this one and `teach` (the teaching sections); nothing else
imports gradio. One model job runs at a time (the queue shows each visitor their position);
Stop cancels a run; every bad input becomes a message in the page, never a traceback. Speed
figures come from the engine's own clocks (via the trace), so the time spent here
re-rendering never counts against any lane.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # before gradio: no calls to outside hosts

import itertools
import logging
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

import gradio as gr
import torch

from specviz import plots, render, teach
from specviz.catalogue import DEFAULT_DRAFTER, DRAFTER_CATALOGUE, PAGE_LANES, drafter_info, lane_info
from specviz.bench import Prompt, load_prompts
from specviz.drafters import MAX_NGRAM
from specviz.engine import GAMMA_SCHEDULES, MAX_GAMMA, DecodeConfig
from specviz.live import PACES, Progress, pace_seconds, record_stop, stop_presses, stream_events, stream_run
from specviz.models import DEFAULT_PRESET, PRECISIONS, PRESETS, cpu_has_native_bf16, default_precision, load_pair
from specviz.render.lanes import FOLLOW_LANE_JS
from specviz.request import (
    CUSTOM, MAX_NEW_TOKENS, POLICY, Request, clamped_note, describe_error, loading_message,
)
from specviz.run import Run, check_speed, recorded_runs, replay
from specviz.trace import Trace
from specviz.wording import count

try:  # Hugging Face ZeroGPU: borrow a GPU for the length of a run
    import spaces
except ImportError:
    spaces = None

log = logging.getLogger("specviz.ui")

MODEL_JOBS = "model"  # concurrency group shared by every handler that runs the models
REPLAY_JOBS = "replay"  # replays need no model: they never wait behind a run
run_numbers = itertools.count(1)  # data-run in the page: tells one run's output from the last
# session → the run it is watching, so Stop can mark its lanes; bounded, since a visitor who
# closes the tab mid-run never finishes (or stops) it
live_runs: OrderedDict[str, render.RunView] = OrderedDict()
LIVE_RUNS_KEPT = 64
SAVED_RUNS_DIR = Path(tempfile.gettempdir()) / "specviz-runs"
SAVED_RUNS_KEPT = 200  # file names cycle, so a busy server's disk use stays bounded
REPLAY_SPEEDS = {"0.25×": 0.25, "1× (as recorded)": 1.0, "4×": 4.0, "at once": float("inf")}
PRECISION_CHOICES = [("default for this device", ""), ("float32: lanes bit-identical", "float32"),
                     ("bfloat16: fast with native bf16", "bfloat16")]


def precision_info() -> str:
    """What the default is here and why, in the words of the bench (README)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        hardware = "a CUDA GPU"
    else:
        hardware = "a CPU " + ("with" if cpu_has_native_bf16() else "without") + " native bf16 (AMX / AVX512-BF16)"
    return (f"Here: {hardware}, so the default is {default_precision(device)}. In 16-bit a batched verify and a "
            "1-token step round differently, so greedy lanes may part at a near-tie: numerics, not the algorithm; "
            "without native bf16 a 16-bit verify is slow")


DRAFTER_CHOICES = [(info.choice, info.name) for info in DRAFTER_CATALOGUE]
FALLBACK_PROMPTS = [
    Prompt("What is the capital of Scotland?", True),
    Prompt("Alice and Bob were walking through the park when", False),
    Prompt("def fibonacci(n):\n", False),
]
CSS = """
.specviz-status .status-error { color: #8a2d00; background: #fdeee6; border: 1px solid #e7a987; }
.specviz-status .status-info { color: #264b66; background: #eaf3fa; border: 1px solid #b9d3e6; }
.specviz-status .status-done { color: #0d4d3b; background: #e6f5ef; border: 1px solid #9fd3bf; }
.specviz-status div[class^="status-"] { padding: 6px 10px; border-radius: 6px; }
/* Warnings appear at the bottom, clear of the pair and γ controls. */
.toast-wrap { top: auto !important; bottom: var(--size-4, 16px); }
#lane-speculative .round { cursor: pointer; }
/* Narrow windows: the inspector's table and chart stack instead of overlapping. */
@media (max-width: 1000px) { #inspector-row { flex-direction: column; } }
/* At 800 px side by side leaves each part ~380 px: the pair's name cut off, chart titles under their
   legends, lanes too narrow to read. One column there. */
@media (max-width: 900px) {
  .specviz-stack { flex-direction: column !important; }
  .specviz-stack > * { width: 100% !important; max-width: 100% !important; align-self: stretch; }
}
"""
# gradio 6 takes css (and theme) in launch(), not Blocks(); uploads are run files, small
LAUNCH_OPTIONS = {"css": CSS, "max_file_size": "20mb"}
# A click on a round of the speculative lane asks the server to open that round in the inspector,
# and brings the inspector into view (it sits below the charts, out of sight on most screens).
ROUND_CLICK_JS = """
element.addEventListener('click', (event) => {
  const round = event.target.closest('.round');
  if (!round) { return; }
  trigger('click', {round: Number(round.dataset.round)});
  document.getElementById('inspector-section')?.scrollIntoView({block: 'start'});
});
""" + FOLLOW_LANE_JS


# --- inputs --------------------------------------------------------------------------------------


def example_prompts() -> list[Prompt]:
    """The example prompts in assets/prompts.json, or a few built-ins if that file is unreadable."""
    try:
        return load_prompts()
    except (OSError, ValueError) as error:
        log.warning("could not read example prompts: %s", error)
        return FALLBACK_PROMPTS


def on_gpu(fn):
    """ZeroGPU when the `spaces` package is there (a no-op elsewhere)."""
    return spaces.GPU(duration=120)(fn) if spaces is not None else fn


def replay_pace_words(speed_name: str) -> str:
    """"at 4×", but "at once" for the speed already named so (not "at at once")."""
    return speed_name if speed_name.startswith("at ") else f"at {speed_name}"


def load_replay(pick, upload) -> Run:
    """The run to replay: an uploaded file, else the recorded run picked."""
    if upload:
        return Run.load(upload)
    runs = recorded_runs()
    if not pick:
        raise ValueError("pick a recorded run or upload a run file (saved with the page's download or `generate --save`)")
    if pick not in runs:
        raise ValueError(f"unknown recorded run {pick!r}; choose one of: {', '.join(runs) or 'none shipped'}")
    return Run.load(runs[pick])


# Settings a saved run records under the name of the page control that sets them (Request.settings).
REPLAYED_SETTINGS = ("gamma", "temperature", "top_k", "top_p", "max_new_tokens", "seed", "drafter", "ngram",
                     "reference", "draft_confidence", "gamma_schedule")


def replayed_controls(saved: Run) -> dict[str, object]:
    """Control name → value that repeats a saved run: its prompt, pair and every setting it recorded
    (older files lack some; those controls keep their values)."""
    settings = saved.settings
    values: dict[str, object] = {"prompt": saved.prompt_text, "chat": saved.chat}
    pair = settings.get("pair")
    if pair in PRESETS:
        values["pair"] = pair
    elif isinstance(pair, str) and " → " in pair:  # a custom pair, recorded as "draft → target"
        values["draft_id"], values["target_id"] = pair.split(" → ", 1)
        values["pair"] = CUSTOM
    values.update({name: settings[name] for name in REPLAYED_SETTINGS if settings.get(name) is not None})
    if settings.get("precision") in PRECISIONS:
        values["precision"] = settings["precision"]
    return values


def stopped_message(run: render.RunView | None) -> str:
    if run is None or not render.round_choices(run):
        return "Stopped: the lanes show how far they got."
    return "Stopped: the lanes show how far they got; pick a round or click a drafted token to inspect it."


def example_label(prompt: Prompt, max_chars: int = 90) -> str:
    """An example's button: its prompt on one line, shortened, marked where it is a plain completion (chat off)."""
    text = " ".join(prompt.text.split())
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return text if prompt.chat is not False else f"completion: {text}"  # first, since gradio cuts long labels


def watch(session: str | None, run: render.RunView) -> None:
    live_runs[session] = run
    live_runs.move_to_end(session)
    while len(live_runs) > LIVE_RUNS_KEPT:
        live_runs.popitem(last=False)


def save_for_download(run: render.RunView) -> str:
    SAVED_RUNS_DIR.mkdir(parents=True, exist_ok=True)
    path = SAVED_RUNS_DIR / f"specviz-run-{run.run_id % SAVED_RUNS_KEPT}.json"
    run.run.save(path)
    return str(path)


# --- page pieces -----------------------------------------------------------------------------------


def status_html(message: str, kind: str = "info", run_id: int = 0) -> str:
    return f'<div class="status-{kind}" data-kind="{kind}" data-run="{run_id}">{render.escape_text(message)}</div>'


def chart_values(run: render.RunView | None) -> list:
    baseline = run.baseline.trace if run else Trace(lane="baseline")
    speculative = run.speculative.trace if run else Trace(lane="speculative")
    others = [run.lane("reference").trace] if run and run.has_lane("reference") else []
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


def done_summary(run: render.RunView) -> str:
    parts = [f"{lane_info(name).label} {count(run.lane(name).trace.num_tokens, 'token')}" for name in run.lane_names]
    summary = "Done: " + ", ".join(parts)
    speedup = render.stats_dict(run).get("speedup")
    if speedup is not None:
        summary += f"; speculative decoding ran at {speedup:.2f}× the target alone's speed (one run: a noisy sample)"
    return summary + "."


def header_markdown() -> str:
    return (
        "# specviz — speculative decoding, live\n"
        "A small **draft** model guesses γ tokens; the big **target** model checks them all in one pass. "
        "Type a prompt (or click an example), pick the settings and press **Run**: the left lane is the target "
        "alone, the right lane is speculative decoding with every drafted token coloured by its fate. "
        "Hover a token for q, p, min(1, p/q) and r; click one to open its round in the inspector."
    )


def build_app(preload: bool = True) -> gr.Blocks:
    """The page. `preload` loads the default pair in the background so the first run starts fast."""
    if not torch.cuda.is_available():
        torch.set_num_threads(1)  # steady timings, and a core left for the web server
    if preload:
        threading.Thread(target=preload_default_pair, daemon=True).start()

    pair_choices = [(f"{p.name} — {p.note}", p.name) for p in PRESETS.values()]
    pair_choices.append(("custom — type a target and a draft model id", CUSTOM))
    recorded = list(recorded_runs())

    with gr.Blocks(title="specviz — speculative decoding, live", delete_cache=(3600, 3600)) as demo:
        run_state = gr.State(None)
        gr.Markdown(header_markdown())
        with gr.Row(elem_classes=["specviz-stack"]):
            with gr.Column(scale=3):
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
            with gr.Column(scale=2):
                pair_name = gr.Dropdown(pair_choices, value=DEFAULT_PRESET, label="Model pair (draft → target)", elem_id="pair")
                with gr.Row(visible=False) as custom_row:
                    target_id = gr.Textbox(label="Target model id", placeholder="e.g. EleutherAI/pythia-1.4b-deduped", elem_id="target-id")
                    draft_id = gr.Textbox(label="Draft model id", placeholder="e.g. EleutherAI/pythia-160m-deduped", elem_id="draft-id")
                with gr.Row():
                    drafter = gr.Radio(DRAFTER_CHOICES, value=DEFAULT_DRAFTER, label="drafter: who proposes the γ tokens",
                                       elem_id="drafter")
                    ngram = gr.Slider(1, MAX_NGRAM, value=3, step=1, label="prompt lookup: longest n-gram", elem_id="ngram",
                                      visible=False)
                gamma = gr.Slider(1, MAX_GAMMA, value=3, step=1, label="γ — tokens drafted per round", elem_id="gamma")
                with gr.Accordion("Drafting and precision", open=False, elem_id="drafting-options"):
                    draft_confidence = gr.Slider(
                        0, 0.95, value=DecodeConfig.draft_confidence, step=0.05, elem_id="draft-confidence",
                        label="draft only while sure: stop a round after a draft the draft model gave less than this",
                        info="0 = always draft γ. A verify of more tokens costs more, so unlikely drafts cost twice; "
                             "the lane marks where a round stopped (‖)",
                    )
                    gamma_schedule = gr.Radio(list(GAMMA_SCHEDULES), value=DecodeConfig.gamma_schedule,
                                              elem_id="gamma-schedule", label="γ schedule",
                                              info="heuristic (transformers'): γ + 2 after a round whose drafts were "
                                                   "all accepted, γ − 1 otherwise")
                    precision = gr.Radio(PRECISION_CHOICES, value="", elem_id="precision", label="precision",
                                         info=precision_info())
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
                with gr.Row():
                    run_button = gr.Button("Run", variant="primary", elem_id="run")
                    stop_button = gr.Button("Stop", variant="stop", elem_id="stop")
        status = gr.HTML(status_html("Ready: press Run."), elem_id="status", elem_classes=["specviz-status"])
        gr.HTML(render.legend_html(), elem_id="legend")
        empty_lanes = render.lanes_html(None, names=PAGE_LANES)
        with gr.Row(equal_height=False, elem_classes=["specviz-stack"]):
            baseline_lane = gr.HTML(empty_lanes[0], elem_id="lane-baseline", js_on_load=FOLLOW_LANE_JS)
            speculative_lane = gr.HTML(empty_lanes[1], elem_id="lane-speculative", js_on_load=ROUND_CLICK_JS)
            reference_lane = gr.HTML(empty_lanes[2], elem_id="lane-reference", js_on_load=FOLLOW_LANE_JS,
                                     visible=False)
        lane_boxes = [baseline_lane, speculative_lane, reference_lane]
        stats = gr.HTML(render.stats_html(None), elem_id="stats")
        initial_charts = chart_values(None)
        with gr.Row(elem_classes=["specviz-stack"]):
            time_chart = gr.Plot(initial_charts[0], show_label=False, elem_id="chart-time")
            accepted_chart = gr.Plot(initial_charts[1], show_label=False, elem_id="chart-accepted")
        with gr.Row(elem_classes=["specviz-stack"]):
            alpha_chart = gr.Plot(initial_charts[2], show_label=False, elem_id="chart-alpha")
            position_chart = gr.Plot(initial_charts[3], show_label=False, elem_id="chart-position")
        charts = [time_chart, accepted_chart, alpha_chart, position_chart]
        with gr.Accordion("Save and replay a run", open=False):
            with gr.Row():
                download = gr.DownloadButton("Download this run (JSON)", visible=False, elem_id="run-download")
                replay_pick = gr.Dropdown(recorded, value=recorded[0] if recorded else None, label="recorded runs",
                                          elem_id="replay-pick")
                replay_file = gr.File(label="or upload a run file", file_types=[".json", ".gz"], type="filepath",
                                      elem_id="replay-file")
                replay_speed = gr.Radio(list(REPLAY_SPEEDS), value="1× (as recorded)", label="replay speed",
                                        elem_id="replay-speed")
            replay_button = gr.Button("Replay", elem_id="replay-run")
        with gr.Accordion("Step inspector: one round up close", open=True, elem_id="inspector-section"):
            round_picker = gr.Dropdown(choices=[], value=None, label="Round", interactive=True, elem_id="round-picker")
            initial_inspector = inspector_values(None, None)
            with gr.Row(elem_id="inspector-row"):
                inspector = gr.HTML(initial_inspector[0], elem_id="inspector")
                inspector_chart = gr.Plot(initial_inspector[1], show_label=False, elem_id="chart-inspector")
        with gr.Accordion("How it works", open=True):
            explainer = gr.HTML(render.explain_html(None), elem_id="explainer")
        controls = dict(prompt=prompt, chat=chat, pair=pair_name, target_id=target_id, draft_id=draft_id,
                        drafter=drafter, ngram=ngram, gamma=gamma, temperature=temperature, top_k=top_k, top_p=top_p,
                        max_new_tokens=max_new_tokens, seed=seed, precision=precision,
                        draft_confidence=draft_confidence, gamma_schedule=gamma_schedule)
        # step mode, exactness lab, theory explorer, γ sweep
        teach.build_sections(controls, run_state, concurrency_id=MODEL_JOBS, on_gpu=on_gpu)
        replayed = {**controls, "reference": reference}  # what a replay puts back

        def lane_values(run: render.RunView | None, active: str | None = None, stopped: bool = False) -> dict:
            htmls = render.lanes_html(run, active, names=PAGE_LANES, stopped=stopped)
            values = dict(zip(lane_boxes, htmls))
            values[reference_lane] = gr.HTML(htmls[2], visible=bool(run and run.has_lane("reference")))
            return values

        def inspect_values(run: render.RunView) -> dict:
            """What makes a run inspectable: the round picker, the inspector on its default round, the
            explainer, and the run in the session (token clicks and the theory explorer read it)."""
            chosen = render.default_round(run)
            html_value, chart_value = inspector_values(run, chosen)
            return {
                run_state: run,
                round_picker: gr.Dropdown(choices=render.round_choices(run), value=chosen),
                inspector: html_value,
                inspector_chart: chart_value,
                explainer: render.explain_html(run),
            }

        def page_values(progress: Progress, session: str | None = None) -> dict:
            run = progress.run
            if progress.quiet:  # a chance to stop, nothing to draw; gradio reads an empty dict as one bare value
                return {status: gr.skip()}
            values = {**lane_values(run, progress.active), stats: render.stats_html(run, progress.divergence_gap)}
            if progress.redraw_plots:
                values.update(zip(charts, chart_values(run)))
            if progress.finished:
                live_runs.pop(session, None)
                values.update(inspect_values(run))
                values.update({
                    status: status_html(done_summary(run), "done", run.run_id),
                    download: gr.DownloadButton(value=save_for_download(run), visible=True),
                })
            return values

        def stopped_values(run: render.RunView) -> dict:
            """A run that ended early (Stop, an error, the time cap): its lanes say they stopped, and what was
            generated stays inspectable."""
            return {**lane_values(run, stopped=True), stats: render.stats_html(run),
                    **dict(zip(charts, chart_values(run))), **inspect_values(run)}

        def stopped_page(run: render.RunView) -> dict:
            return {status: status_html(stopped_message(run), "info", run.run_id), **stopped_values(run)}

        def page_updates(progresses, session: str | None, started: float):
            """The page's values for each snapshot of a live or replayed run, until Stop is pressed."""
            for progress in progresses:
                watch(session, progress.run)
                values = page_values(progress, session)  # rendering takes a while: Stop may come meanwhile
                if stop_presses.since(session, "run", started):  # Stop came before gradio's cancel
                    # The job's last update can reach the page after Stop's own (a paced run sleeps
                    # through the cancel, and gradio then re-sends the last value it had), so the
                    # job's last word is the stopped page too.
                    yield stopped_page(progress.run)
                    return
                yield values

        def show_error(error: BaseException, run_id: int, session: str | None = None) -> dict:
            message = describe_error(error)
            values = {status: status_html(message, "error", run_id)}
            run = live_runs.pop(session, None)
            if run is not None:
                # A run under way may be watched far from the status line: a warning too. A refused input is
                # said once, in the status line under Run, where the visitor just clicked.
                gr.Warning(message)
                values.update(stopped_values(run))
            return values

        def start_values(run_id: int, message: str) -> dict:
            return {
                status: status_html(message, "info", run_id),
                **lane_values(None),
                stats: render.stats_html(None),
                round_picker: gr.Dropdown(choices=[], value=None),
                download: gr.DownloadButton(visible=False),
            }

        @on_gpu
        def on_run(prompt_text, chat_value, pair, target, draft, drafter_value, ngram_value, gamma_value,
                   temperature_value, top_k_value, top_p_value, max_new_tokens_value, seed_value, reference_value,
                   pace_value, precision_value, confidence_value, schedule_value, request: gr.Request):
            run_id = next(run_numbers)
            started = time.perf_counter()
            session = request.session_hash if request else None
            try:
                parsed = Request.parse(prompt_text, pair, target, draft, gamma_value, temperature_value, top_k_value,
                                       top_p_value, max_new_tokens_value, seed_value, chat_value, drafter_value,
                                       ngram_value, reference_value, precision_value, confidence_value, schedule_value)
                pace_s = pace_seconds(pace_value)
                yield {status: status_html(loading_message(parsed), "info", run_id)}
                model_pair = parsed.load()
                prompt_ids = model_pair.encode(parsed.prompt_text, parsed.chat)
            except Exception as error:  # noqa: BLE001 — every failure becomes a message in the page
                yield show_error(error, run_id)
                return
            lanes = "the target alone first, then speculative decoding" + (", then transformers" if parsed.reference else "")
            yield start_values(run_id, f"Generating with γ = {parsed.config.gamma}: {lanes}…")
            try:
                yield from page_updates(stream_run(parsed, model_pair, prompt_ids, run_id, pace_s), session, started)
            except Exception as error:  # noqa: BLE001 — keep what was drawn, say what happened
                yield show_error(error, run_id, session)

        def on_replay(pick, upload, speed_name, request: gr.Request):
            run_id = next(run_numbers)
            started = time.perf_counter()
            session = request.session_hash if request else None
            try:
                saved = load_replay(pick, upload)
                speed = check_speed(REPLAY_SPEEDS.get(speed_name, speed_name))
            except Exception as error:  # noqa: BLE001
                yield show_error(error, run_id)
                return
            view = render.RunView.replaying(saved, run_id)
            values, kept = replayed_values(saved)
            settings_note = "Its prompt and settings are now in the controls above, so Run repeats it live"
            if kept:
                settings_note += f" (except {', '.join(kept)}: outside this page's range, so yours are kept)"
            yield {**start_values(run_id, f"Replaying a saved run ({saved.settings.get('pair', 'unknown pair')}, γ = "
                                          f"{saved.settings.get('gamma')}) {replay_pace_words(speed_name)}. "
                                          f"{settings_note}."), **values}
            try:
                yield from page_updates(stream_events(view, replay(saved, speed), saved.replayed_decode), session, started)
                finished = page_values(Progress(view, None, True, finished=True), session)
                yield {**finished, status: status_html(f"{done_summary(view)} {settings_note}.", "done", run_id)}
            except Exception as error:  # noqa: BLE001
                yield show_error(error, run_id, session)

        def replayed_values(saved: Run) -> tuple[dict, list[str]]:
            """The controls a replay sets, and the names of those left alone because the run's value lies
            outside the slider's range here (a host's smaller token cap): gradio would refuse it at Run."""
            values, kept = {}, []
            for name, value in replayed_controls(saved).items():
                component = replayed[name]
                bounds = (getattr(component, "minimum", None), getattr(component, "maximum", None))
                if isinstance(component, gr.Slider) and not bounds[0] <= value <= bounds[1]:
                    kept.append(f"{name.replace('_', ' ')} {value}")
                    continue
                values[component] = value
            return values, kept

        def on_pick_round(run, round_index):
            return inspector_values(run, round_index)

        def on_lane_click(run, event: gr.EventData):
            round_index = int(getattr(event, "round", 0) or 0) - 1  # data-round counts from 1
            if run is None or render.find_round(run, round_index) is None:
                return gr.Dropdown(), *inspector_values(run, None)
            return gr.Dropdown(value=round_index), *inspector_values(run, round_index)

        def on_pair_change(pair):
            return gr.Row(visible=pair == CUSTOM)

        def on_drafter_change(drafter_value):
            return gr.Slider(visible="ngram" in drafter_info(drafter_value).settings)

        def on_stop(request: gr.Request):
            session = request.session_hash if request else None
            record_stop(session, "run")
            run = live_runs.pop(session, None)
            if run is None:
                return {status: status_html(stopped_message(run), "info", 0)}
            return stopped_page(run)

        def on_release(name: str, slider: gr.Slider):
            """A slider's release: say so when its box pulled a typed value into range (γ = 100 → 16)."""
            def note_clamp(event: gr.EventData):
                note = clamped_note(name, getattr(event, "_data", None), slider.minimum, slider.maximum)
                return status_html(note, "info") if note else gr.skip()
            return note_clamp

        inputs = [prompt, chat, pair_name, target_id, draft_id, drafter, ngram, gamma, temperature, top_k, top_p,
                  max_new_tokens, seed, reference, pace, precision, draft_confidence, gamma_schedule]
        outputs = [status, *lane_boxes, stats, *charts, run_state, round_picker, inspector, inspector_chart, explainer,
                   download]
        run_event = run_button.click(
            on_run, inputs, outputs, api_visibility="private", concurrency_id=MODEL_JOBS,
            show_progress="full", show_progress_on=[status],
        )
        replay_event = replay_button.click(
            on_replay, [replay_pick, replay_file, replay_speed], [*outputs, *replayed.values()], api_visibility="private",
            concurrency_id=REPLAY_JOBS, concurrency_limit=4, show_progress="hidden",
        )
        stop_button.click(on_stop, None, [status, *lane_boxes, stats, *charts, run_state, round_picker, inspector,
                                          inspector_chart, explainer],
                          cancels=[run_event, replay_event], queue=False, api_visibility="private")
        for name, slider in (("γ", gamma), ("temperature", temperature), ("top-k", top_k), ("top-p", top_p),
                             ("max new tokens", max_new_tokens), ("n-gram size", ngram),
                             ("draft confidence", draft_confidence)):
            slider.release(on_release(name, slider), None, [status], queue=False, show_progress="hidden",
                           api_visibility="private")
        round_picker.input(on_pick_round, [run_state, round_picker], [inspector, inspector_chart],
                           api_visibility="private", show_progress="hidden", queue=False)
        speculative_lane.click(on_lane_click, [run_state], [round_picker, inspector, inspector_chart],
                               api_visibility="private", show_progress="hidden", queue=False)
        pair_name.change(on_pair_change, [pair_name], [custom_row], api_visibility="private", queue=False,
                         show_progress="hidden")
        drafter.change(on_drafter_change, [drafter], [ngram], api_visibility="private", queue=False,
                       show_progress="hidden")
        gr.api(on_gpu(generate), api_name="generate", concurrency_id=MODEL_JOBS)
    # A full queue answers new visitors with gradio's own "queue is full" error at once.
    return demo.queue(default_concurrency_limit=1, max_size=POLICY.queue_size)


def generate(
    prompt: str,
    pair: str = DEFAULT_PRESET,
    gamma: int = 4,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    max_new_tokens: int = 64,
    seed: int = 0,
    target_id: str = "",
    draft_id: str = "",
    chat: bool = True,
    drafter: str = DEFAULT_DRAFTER,
    ngram: int = 3,
    reference: bool = False,
    precision: str = "",
    draft_confidence: float = DecodeConfig.draft_confidence,
    gamma_schedule: str = DecodeConfig.gamma_schedule,
) -> tuple[str, str, dict]:
    """Run the lanes to the end; the last value yielded is (target-only text, speculative text, stats).

    `pair` is a preset name (embedded, tiny-code, pythia, smollm2, qwen2.5) or "custom" with
    target_id and draft_id. `chat` wraps the prompt in the pair's chat template where it has
    one. `drafter` is "model" (the draft model) or "prompt-lookup" (n-grams up to `ngram`
    copied from the prompt and text so far). `reference` adds a lane running transformers'
    own generate() on the same pair. `precision` is "float32", "bfloat16" or "" (the device's
    default); `draft_confidence` stops a round's drafting after a draft the draft model was less
    sure of (0 = off); `gamma_schedule` is "constant" or "heuristic". Stats hold every lane's figures (with its text), the
    measured and predicted speedup, α̂, c, the verify cost and the recommended γ; speeds come
    from the engine's own timings. While the lanes run it yields their texts so far with empty
    stats; a client's predict() returns only the last value, the finished run.
    """
    # A generator so that a cancelled call stops: gradio cancels (the client's job.cancel(), a
    # closed page) only between yields. As a plain function the run went on to its end in a
    # worker thread after gradio had already freed its concurrency slot, so cancelled runs kept
    # the CPU or GPU from the next visitor and could pile up past the one-at-a-time queue.
    # The return annotation documents the API: each value yielded is one such tuple.
    try:
        request = Request.parse(prompt, pair, target_id, draft_id, gamma, temperature, top_k, top_p, max_new_tokens,
                                seed, chat, drafter, ngram, reference, precision, draft_confidence, gamma_schedule)
        model_pair = request.load()
        prompt_ids = model_pair.encode(request.prompt_text, request.chat)
        for progress in stream_run(request, model_pair, prompt_ids):
            run = progress.run
            if not progress.finished:
                yield model_pair.decode(run.baseline.trace.token_ids), model_pair.decode(run.speculative.trace.token_ids), {}
    except Exception as error:  # noqa: BLE001 — the client gets the message, the server keeps serving
        raise gr.Error(describe_error(error)) from error
    stats = render.stats_dict(run)
    for name in run.lane_names:
        stats[name]["text"] = model_pair.decode(run.lane(name).trace.token_ids)
    yield stats["baseline"]["text"], stats["speculative"]["text"], stats


def preload_default_pair() -> None:
    try:
        load_pair(DEFAULT_PRESET)
    except Exception as error:  # noqa: BLE001 — a run will report it properly
        log.warning("could not preload the %s pair: %s", DEFAULT_PRESET, error)
