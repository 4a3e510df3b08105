"""The Gradio app: the page's sections (specviz.app.ui_sections), wired to their handlers
(specviz.app.ui_handlers; the run section's controls by specviz.app.run_section.page), then the sections below
the run, a package each (step mode, the exactness lab, the theory explorer, the γ sweep: `build_sections`), and
the `/generate` API.

Only the page's modules import gradio (tests/test_layers.py names them). One model job runs
at a time (the queue shows each visitor their position); Stop cancels a run; every bad input
becomes a message in the page, never a traceback. Speed figures come from the engine's own
clocks (via the trace), so the time spent here re-rendering never counts against any lane.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # before gradio: no calls to outside hosts

import logging
import threading
from types import MethodType

import gradio as gr
import torch

from specviz.app import render, settings, zerogpu
from specviz.app.live import stream_run
from specviz.models.loading import load_pair
from specviz.models.presets import DEFAULT_PRESET
from specviz.app.request import POLICY, Request, describe_error
from specviz.app.ui_handlers import RUN_INPUTS, on_queued, on_replay, on_run, on_stop
from specviz.app.page_files import page_file
from specviz.app.inspector.page import wire_inspector
from specviz.app.ui_sections import Page, build_page
from specviz.app.run_section.page import QUIET, wire_controls
from specviz.app.run_section.words import TITLE
from specviz.app.section_jobs import CONTROL_NAMES
from specviz.app.exactness_lab.page import build_lab, wire_lab
from specviz.app.step_mode.page import build_step_mode, wire_step_mode
from specviz.app.gamma_sweep.page import build_sweep, wire_sweep
from specviz.app.theory_explorer.page import build_theory, wire_theory

log = logging.getLogger("specviz.app.ui")

MODEL_JOBS = "model"  # concurrency group shared by every handler that runs the models
REPLAY_JOBS = "replay"  # replays need no model: they never wait behind a run
# A phone's chart is laid out this wide, then scaled down to its box whole (static/fit_charts.js). Squeezed to the box
# itself, titles ran past the edge and legends over the titles; laid out at 560 px, a 400 px screen drew text at
# ~7 px. At 440 px in a ~388 px box, tick labels show at ~10.5 px and titles at ~12 px.
PHONE_CHART_PX = 440
CSS = page_file("page.css", PHONE_CHART_PX=PHONE_CHART_PX)
FIT_CHARTS_JS = page_file("fit_charts.js", PHONE_CHART_PX=PHONE_CHART_PX)
# Phones: gradio pads the page 32 px a side, so a chart's box was 336 px of a 400 px screen. The page's padding sits
# above the element gradio scopes the css above to, so this rule goes in the page's head.
PAGE_HEAD = ("<style>@media (max-width: 600px) { .main.fillable { padding-left: 6px !important; "
             "padding-right: 6px !important; } }</style>")
# gradio's default theme pairs each font's Regular with its SemiBold file, and the SemiBold files it ships hold a
# handful of glyphs (Source Sans Pro's: "A" and "B"): bold text mixed those with a fallback font ("EAGLE" read "EᴀGLE").
# The full Bold files serve every heavy weight instead.
THEME = gr.themes.Default(
    font=(gr.themes.LocalFont("Source Sans Pro", weights=(400, 700)), "ui-sans-serif", "system-ui", "sans-serif"),
    font_mono=(gr.themes.LocalFont("IBM Plex Mono", weights=(400, 700)), "ui-monospace", "Consolas", "monospace"),
).set(
    # the controls' hints answer questions ("when can the lanes differ?"): gradio's subdued grey (#bbbbc2) is
    # 1.9 : 1 on white; this one is 6.3 : 1 (WCAG asks 4.5 : 1 of small text)
    body_text_color_subdued="#5f5f68",
    block_info_text_color="#5f5f68",
)
# gradio 6 takes css, js (and theme) in launch(), not Blocks(); uploads are run files, small
# gradio keeps each visitor's page state (small, a fraction of a MiB) until this many newer sessions came
LAUNCH_OPTIONS = {"css": CSS, "js": FIT_CHARTS_JS, "head": PAGE_HEAD, "theme": THEME, "max_file_size": "20mb",
                  "state_session_capacity": POLICY.max_sessions}


def build_app(preload: bool = True) -> gr.Blocks:
    """The page. `preload` loads the default pair in the background so the first run starts fast."""
    if not torch.cuda.is_available():
        torch.set_num_threads(1)  # steady timings, and a core left for the web server
    if zerogpu.LOADS_AT_IMPORT:
        preload_default_pair()  # ZeroGPU's rule: the models go to `cuda` at module level, app.py's import
    elif preload:
        threading.Thread(target=preload_default_pair, daemon=True).start()
    with gr.Blocks(title=TITLE, delete_cache=(3600, 3600)) as demo:
        page = build_page()
        # step mode, exactness lab, theory explorer, γ sweep
        build_sections(page.controls, page.run_state, page.status, page.stats, page.session_runs,
                       concurrency_id=MODEL_JOBS)
        wire_run(page)
        wire_inspector(page.inspector, page.run_state, page.lanes)
        wire_controls(page)
        gr.api(zerogpu.on_gpu(generate, (), None, api_tokens), api_name="generate", concurrency_id=MODEL_JOBS)
    # A full queue answers new visitors with gradio's own "queue is full" error at once.
    return demo.queue(default_concurrency_limit=1, max_size=POLICY.queue_size)


def build_sections(controls: dict[str, gr.Component], run_state: gr.State, status: gr.HTML, stats: gr.HTML,
                   session_runs: gr.State, concurrency_id: str = "model") -> None:
    """Add the four sections below the run to the Blocks being built and wire them to the main page's controls,
    so every section works on the settings the visitor already chose; each section's layout, handlers and words
    are its own package's. `status` is the main page's status line and `stats` the last run's statistics (a γ
    sweep of its setup gives them its recommended γ), `session_runs` the visitor's runs so far (the sweep keeps its
    verdict there); model jobs go through the page's model
    queue, `concurrency_id`, on a borrowed GPU on a ZeroGPU Space (specviz.app.zerogpu)."""
    names = [name for name in CONTROL_NAMES if name in controls]
    inputs = [controls[name] for name in names]
    wire_step_mode(build_step_mode(names), inputs, concurrency_id)
    wire_lab(build_lab(names, controls), inputs, status, concurrency_id)
    wire_theory(build_theory(), run_state)
    wire_sweep(build_sweep(names), inputs, run_state, stats, session_runs, concurrency_id)


def wire_run(page: Page) -> None:
    """Run, Replay and Stop: a run or a replay streams into the page; Stop cancels either."""
    controls = page.controls
    # At once, before the queue: a visitor behind another's run saw "Ready: press Run." beside gradio's own
    # "queue: 1/1"; on_run's first word replaces this one when the run starts.
    queued = page.run_button.click(MethodType(on_queued, page), None, [page.status, page.live_run], **QUIET)
    run_event = queued.then(
        zerogpu.on_gpu(MethodType(on_run, page), page.run_outputs, page.status, run_tokens),
        [page.session_runs, *(controls[name] for name in RUN_INPUTS)], page.run_outputs,
        api_visibility="private", concurrency_id=MODEL_JOBS, show_progress="full", show_progress_on=[page.status],
    )
    replay = page.replay
    replay_event = replay.button.click(
        MethodType(on_replay, page), [replay.pick, replay.file, replay.speed],
        [*page.run_outputs, *page.replayed.values()], api_visibility="private", concurrency_id=REPLAY_JOBS,
        concurrency_limit=4, show_progress="hidden",
    )
    page.stop_button.click(MethodType(on_stop, page), [page.live_run], page.stop_outputs,
                           cancels=[run_event, replay_event], queue=False, api_visibility="private")


def run_tokens(request, session_runs, *values) -> int:
    """The most tokens a run may generate, all its lanes together (ZeroGPU's budget for it)."""
    named = dict(zip(RUN_INPUTS, values))
    lanes = 3 if named.get("reference") else 2
    return lanes * zerogpu.count(named.get("max_new_tokens"), settings.SETTING["max_new_tokens"].default)


# --- the API ----------------------------------------------------------------------------------------------


def generate(*values, **named):
    """Run the lanes to the end; the last value yielded is (target-only text, speculative text, stats).

    The arguments, their types and defaults are specviz.app.settings' (API_SIGNATURE), in its order: the
    page's controls by their names. Stats hold every lane's figures (with its text), the measured and predicted
    speedup, α̂, c, the verify cost and the recommended γ; speeds come from the engine's own timings. While the
    lanes run it yields their texts so far with empty stats; a client's predict() returns only the last value.
    """
    # A generator so that a cancelled call stops: gradio cancels (the client's job.cancel(), a closed page) only
    # between yields; a plain function ran on to its end in a worker thread after gradio had freed its slot.
    try:
        request = Request.parse(**settings.bind(settings.API_SIGNATURE, values, named))
        model_pair = request.load()
        prompt_ids = request.encode(model_pair)
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


def api_tokens(*values, **named) -> int:
    """run_tokens for the API's arguments."""
    try:
        bound = settings.bind(settings.API_SIGNATURE, values, named)
    except Exception:  # noqa: BLE001 — the call itself says what is wrong
        bound = {}
    return run_tokens(None, None, *(bound.get(name) for name in RUN_INPUTS))


# gradio documents the API from the function's signature and annotations: both come from the declarations,
# so the API's arguments and defaults are the page's and the engine's (tests/test_settings.py checks).
generate.__signature__ = settings.API_SIGNATURE
generate.__annotations__ = {**{name: p.annotation for name, p in settings.API_SIGNATURE.parameters.items()},
                            "return": settings.API_SIGNATURE.return_annotation}


def preload_default_pair() -> None:
    try:
        load_pair(DEFAULT_PRESET)
    except Exception as error:  # noqa: BLE001 — a run will report it properly
        log.warning("could not preload the %s pair: %s", DEFAULT_PRESET, error)
