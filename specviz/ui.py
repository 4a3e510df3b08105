"""The Gradio app: layout and wiring. Handlers are thin adapters from engine events to values.

The only module of specviz that imports gradio. One model job runs at a time (the queue
shows each visitor their position); Stop cancels a run; every bad input becomes a message in
the page, never a traceback. Speed figures come from the engine's own clocks (via the trace),
so the time spent here re-rendering never counts against either lane.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # before gradio: no calls to outside hosts

import itertools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Iterator

import gradio as gr
import torch

from specviz import plots, render
from specviz.bench import Prompt, load_prompts
from specviz.engine import MAX_GAMMA, decode_both
from specviz.events import FinishEvent, PrefillEvent
from specviz.models import DEFAULT_PRESET, PRESETS, ModelPair, load_pair
from specviz.request import (
    CUSTOM, MAX_NEW_TOKENS, POLICY, Request, check_run_time, describe_error, loading_message,
)
from specviz.trace import Trace

try:  # Hugging Face ZeroGPU: borrow a GPU for the length of a run
    import spaces
except ImportError:
    spaces = None

log = logging.getLogger("specviz.ui")

MODEL_JOBS = "model"  # concurrency group shared by every handler that runs the models
LANE_REFRESH_S = 0.05  # redraw the lanes at most this often (the first token is shown at once)
PLOT_REFRESH_S = 0.5  # redraw the charts at most this often while a lane runs
run_numbers = itertools.count(1)  # data-run in the page: tells one run's output from the last
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
"""
LAUNCH_OPTIONS = {"css": CSS}  # gradio 6 takes css (and theme) in launch(), not Blocks()


# --- inputs --------------------------------------------------------------------------------------


def example_prompts() -> list[Prompt]:
    """The example prompts in assets/prompts.json, or a few built-ins if that file is unreadable."""
    try:
        return load_prompts()
    except (OSError, ValueError) as error:
        log.warning("could not read example prompts: %s", error)
        return FALLBACK_PROMPTS


# --- running -------------------------------------------------------------------------------------


@dataclass
class Progress:
    """What the page should show now: the run so far, which lane is running, what changed."""

    run: render.RunView
    active: str | None  # lane generating now, None when done
    redraw_plots: bool
    finished: bool = False


def stream_run(request: Request, pair: ModelPair, prompt_ids: list[int], run_id: int = 0) -> Iterator[Progress]:
    """Decode both lanes, yielding a Progress whenever the page is due a redraw."""
    run = render.RunView(request.prompt_text, prompt_ids, request.config.gamma, request.settings, run_id,
                         chat=pair.uses_chat(request.chat))
    last_lanes, last_plots = 0.0, time.perf_counter()  # charts first redrawn PLOT_REFRESH_S in
    started = time.perf_counter()
    for event in decode_both(pair, prompt_ids, request.config):
        check_run_time(started, POLICY.max_run_s)
        run.add(event, pair.decode)
        now = time.perf_counter()
        finished_lane = isinstance(event, FinishEvent)
        if finished_lane or isinstance(event, PrefillEvent) or now - last_lanes >= LANE_REFRESH_S:
            redraw_plots = finished_lane or now - last_plots >= PLOT_REFRESH_S
            active = None if finished_lane else event.lane
            yield Progress(run, active, redraw_plots)
            last_lanes = time.perf_counter()
            if redraw_plots:
                last_plots = last_lanes
    yield Progress(run, None, True, finished=True)


def run_to_end(request: Request) -> tuple[render.RunView, ModelPair]:
    pair = request.load()
    prompt_ids = pair.encode(request.prompt_text, request.chat)
    progress = None
    for progress in stream_run(request, pair, prompt_ids):
        pass
    return progress.run, pair


def on_gpu(fn):
    """ZeroGPU when the `spaces` package is there (a no-op elsewhere)."""
    return spaces.GPU(duration=120)(fn) if spaces is not None else fn


# --- page pieces -----------------------------------------------------------------------------------


def status_html(message: str, kind: str = "info", run_id: int = 0) -> str:
    return f'<div class="status-{kind}" data-kind="{kind}" data-run="{run_id}">{render.escape_text(message)}</div>'


def chart_values(run: render.RunView | None) -> list:
    baseline = run.baseline.trace if run else Trace(lane="baseline")
    speculative = run.speculative.trace if run else Trace(lane="speculative")
    gamma = run.gamma if run else 4
    return [
        plots.tokens_vs_time(baseline, speculative),
        plots.accepted_per_round(speculative, gamma),
        plots.cumulative_acceptance(speculative),
        plots.per_position_acceptance(speculative),
    ]


def inspector_values(run: render.RunView | None, round_index) -> tuple[str, object]:
    event = render.find_round(run, round_index) if run else None
    if event is None:
        return render.inspector_html(None, None), plots.with_hint(plots.base_figure("Step inspector", "token", "probability"), "pick a round")
    return render.inspector_html(run, round_index), plots.decision_distributions(event, run.speculative.labels)


def header_markdown() -> str:
    return (
        "# specviz — speculative decoding, live\n"
        "A small **draft** model guesses γ tokens; the big **target** model checks them all in one pass. "
        "Type a prompt (or click an example), pick the settings and press **Run**: the left lane is the target "
        "alone, the right lane is speculative decoding with every drafted token coloured by its fate. "
        "Hover a token for q, p, min(1, p/q) and r."
    )


def build_app(preload: bool = True) -> gr.Blocks:
    """The page. `preload` loads the default pair in the background so the first run starts fast."""
    if not torch.cuda.is_available():
        torch.set_num_threads(1)  # steady timings, and a core left for the web server
    if preload:
        threading.Thread(target=preload_default_pair, daemon=True).start()

    pair_choices = [(f"{p.name} — {p.note}", p.name) for p in PRESETS.values()]
    pair_choices.append(("custom — type a target and a draft model id", CUSTOM))

    with gr.Blocks(title="specviz — speculative decoding, live") as demo:
        run_state = gr.State(None)
        gr.Markdown(header_markdown())
        with gr.Row():
            with gr.Column(scale=3):
                examples = example_prompts()
                prompt = gr.Textbox(label="Prompt", lines=5, max_lines=12, elem_id="prompt", value=examples[0].text)
                chat = gr.Checkbox(
                    value=examples[0].chat is not False, label="chat: wrap the prompt in the pair's chat template "
                    "(instruct models answer questions; off = plain text completion)", elem_id="chat",
                )
                gr.Examples(examples=[[p.text, p.chat is not False] for p in examples], inputs=[prompt, chat],
                            label="Example prompts (click one)")
            with gr.Column(scale=2):
                pair_name = gr.Dropdown(pair_choices, value=DEFAULT_PRESET, label="Model pair (draft → target)", elem_id="pair")
                with gr.Row(visible=False) as custom_row:
                    target_id = gr.Textbox(label="Target model id", placeholder="e.g. EleutherAI/pythia-1.4b-deduped", elem_id="target-id")
                    draft_id = gr.Textbox(label="Draft model id", placeholder="e.g. EleutherAI/pythia-160m-deduped", elem_id="draft-id")
                gamma = gr.Slider(1, MAX_GAMMA, value=3, step=1, label="γ — tokens drafted per round", elem_id="gamma")
                temperature = gr.Slider(0, 2, value=0.7, step=0.05, label="temperature (0 = greedy)", elem_id="temperature")
                with gr.Row():
                    top_k = gr.Slider(0, 200, value=0, step=1, label="top-k (0 = off)", elem_id="top-k")
                    top_p = gr.Slider(0.05, 1, value=1.0, step=0.05, label="top-p (1 = off)", elem_id="top-p")
                with gr.Row():
                    max_new_tokens = gr.Slider(1, MAX_NEW_TOKENS, value=64, step=1, label="max new tokens", elem_id="max-new-tokens")
                    seed = gr.Number(value=0, precision=0, label="seed", elem_id="seed", minimum=0)
                with gr.Row():
                    run_button = gr.Button("Run", variant="primary", elem_id="run")
                    stop_button = gr.Button("Stop", variant="stop", elem_id="stop")
        status = gr.HTML(status_html("Ready: press Run."), elem_id="status", elem_classes=["specviz-status"])
        gr.HTML(render.legend_html(), elem_id="legend")
        empty_lanes = render.lanes_html(None)
        with gr.Row(equal_height=False):
            baseline_lane = gr.HTML(empty_lanes[0], elem_id="lane-baseline", max_height=460, autoscroll=True)
            speculative_lane = gr.HTML(empty_lanes[1], elem_id="lane-speculative", max_height=460, autoscroll=True)
        stats = gr.HTML(render.stats_html(None), elem_id="stats")
        initial_charts = chart_values(None)
        with gr.Row():
            time_chart = gr.Plot(initial_charts[0], show_label=False, elem_id="chart-time")
            accepted_chart = gr.Plot(initial_charts[1], show_label=False, elem_id="chart-accepted")
        with gr.Row():
            alpha_chart = gr.Plot(initial_charts[2], show_label=False, elem_id="chart-alpha")
            position_chart = gr.Plot(initial_charts[3], show_label=False, elem_id="chart-position")
        charts = [time_chart, accepted_chart, alpha_chart, position_chart]
        with gr.Accordion("Step inspector: one round up close", open=True):
            round_picker = gr.Dropdown(choices=[], value=None, label="Round", interactive=True, elem_id="round-picker")
            initial_inspector = inspector_values(None, None)
            with gr.Row():
                inspector = gr.HTML(initial_inspector[0], elem_id="inspector")
                inspector_chart = gr.Plot(initial_inspector[1], show_label=False, elem_id="chart-inspector")
        with gr.Accordion("How it works", open=True):
            explainer = gr.HTML(render.explain_html(None), elem_id="explainer")

        def page_values(progress: Progress) -> dict:
            run = progress.run
            lanes = render.lanes_html(run, progress.active)
            values = {baseline_lane: lanes[0], speculative_lane: lanes[1], stats: render.stats_html(run)}
            if progress.redraw_plots:
                values.update(zip(charts, chart_values(run)))
            if progress.finished:
                chosen = render.default_round(run)
                html_value, chart_value = inspector_values(run, chosen)
                comparison = render.stats_dict(run)
                speedup = comparison.get("speedup")
                summary = f"Done: {run.baseline.trace.num_tokens} + {run.speculative.trace.num_tokens} tokens"
                if speedup is not None:
                    summary += f"; speculative decoding ran at {speedup:.2f}× the target alone's speed"
                values.update({
                    run_state: run,
                    round_picker: gr.Dropdown(choices=render.round_choices(run), value=chosen),
                    inspector: html_value,
                    inspector_chart: chart_value,
                    explainer: render.explain_html(run),
                    status: status_html(summary + ".", "done", run.run_id),
                })
            return values

        def show_error(error: BaseException, run_id: int) -> dict:
            message = describe_error(error)
            gr.Warning(message)
            return {status: status_html(message, "error", run_id)}

        @on_gpu
        def on_run(prompt_text, chat_value, pair, target, draft, gamma_value, temperature_value, top_k_value,
                   top_p_value, max_new_tokens_value, seed_value):
            run_id = next(run_numbers)
            try:
                request = Request.parse(prompt_text, pair, target, draft, gamma_value, temperature_value,
                                        top_k_value, top_p_value, max_new_tokens_value, seed_value, chat_value)
                yield {status: status_html(loading_message(request), "info", run_id)}
                model_pair = request.load()
                prompt_ids = model_pair.encode(request.prompt_text, request.chat)
            except Exception as error:  # noqa: BLE001 — every failure becomes a message in the page
                yield show_error(error, run_id)
                return
            yield {
                status: status_html(f"Generating with γ = {request.config.gamma}: the target alone first, then speculative decoding…", "info", run_id),
                **dict(zip((baseline_lane, speculative_lane), render.lanes_html(None))),
                stats: render.stats_html(None),
                round_picker: gr.Dropdown(choices=[], value=None),
            }
            try:
                for progress in stream_run(request, model_pair, prompt_ids, run_id):
                    yield page_values(progress)
            except Exception as error:  # noqa: BLE001 — keep what was drawn, say what happened
                yield show_error(error, run_id)

        def on_pick_round(run, round_index):
            return inspector_values(run, round_index)

        def on_pair_change(pair):
            return gr.Row(visible=pair == CUSTOM)

        def on_stop():
            return status_html("Stopped.", "info")

        inputs = [prompt, chat, pair_name, target_id, draft_id, gamma, temperature, top_k, top_p, max_new_tokens, seed]
        outputs = [status, baseline_lane, speculative_lane, stats, *charts, run_state, round_picker, inspector,
                   inspector_chart, explainer]
        run_event = run_button.click(
            on_run, inputs, outputs, api_visibility="private", concurrency_id=MODEL_JOBS,
            show_progress="full", show_progress_on=[status],
        )
        stop_button.click(on_stop, None, [status], cancels=[run_event], queue=False, api_visibility="private")
        round_picker.input(on_pick_round, [run_state, round_picker], [inspector, inspector_chart],
                            api_visibility="private", show_progress="hidden", queue=False)
        pair_name.change(on_pair_change, [pair_name], [custom_row], api_visibility="private", queue=False,
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
) -> tuple[str, str, dict]:
    """Run both lanes to the end; return (target-only text, speculative text, stats).

    `pair` is a preset name (embedded, tiny-code, pythia, smollm2, qwen2.5) or "custom" with
    target_id and draft_id. `chat` wraps the prompt in the pair's chat template where it has
    one. Stats hold both lanes' figures, the measured and predicted speedup, α̂, c and the
    recommended γ; speeds come from the engine's own timings.
    """
    try:
        request = Request.parse(prompt, pair, target_id, draft_id, gamma, temperature, top_k, top_p, max_new_tokens,
                                seed, chat)
        run, model_pair = run_to_end(request)
    except Exception as error:  # noqa: BLE001 — the client gets the message, the server keeps serving
        raise gr.Error(describe_error(error)) from error
    return (
        model_pair.decode(run.baseline.trace.token_ids),
        model_pair.decode(run.speculative.trace.token_ids),
        render.stats_dict(run),
    )


def preload_default_pair() -> None:
    try:
        load_pair(DEFAULT_PRESET)
    except Exception as error:  # noqa: BLE001 — a run will report it properly
        log.warning("could not preload the %s pair: %s", DEFAULT_PRESET, error)
