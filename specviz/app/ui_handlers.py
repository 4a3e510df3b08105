"""The main page's handlers (a run, a replay, Stop): thin adapters from a run's snapshots to the page's component
values. The controls that change other controls are the run section's own (specviz.app.run_section.page).

Each handler is a plain function of the `Page` (specviz.app.ui_sections) and the values gradio
passes; specviz.app.ui binds it to the page it wires, so a test can call it with a built page and
plain values. Every bad input becomes a message in the page, never a traceback.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Iterable, Iterator

import gradio as gr

from specviz.app import render
from specviz.app.live import Progress, pace_seconds, record_stop, stop_presses, stopped_by, stream_events, stream_run
from specviz.app.settings import NAMES
from specviz.app.request import Request, describe_error, loading_message
from specviz.analysis.prefill import reading_note_for
from specviz.analysis.run import Run, check_speed, replay
from specviz.app.history import SessionRuns, repeats_of
from specviz.app.runs_page import runs_values
from specviz.app.inspector.page import inspector_values
from specviz.app.inspector.words import default_round, round_choices
from specviz.app.replay_page import REPLAY_SPEEDS, load_replay, replay_pace_words, replayed_controls, save_for_download
from specviz.app.charts.page import chart_values
from specviz.app.ui_sections import Page
from specviz.app.run_section.page import lane_values
from specviz.app.run_section.words import done_summary, running_summary

QUEUED = "queued"  # Page.live_run between Run and the run's first drawing: a Stop then ends a run that drew nothing
RUN_INPUTS = (*NAMES, "pace")  # on_run's values, in its order: every setting, then the on-screen pace


# --- runs, without the page -----------------------------------------------------------------------


def new_run_id() -> int:
    """data-run in the page, which tells one run's output from the last, and the run's download name: drawn at
    random, not counted, since on a ZeroGPU Space each run may go on in a fresh fork of this process, every one of
    which would count from the same number (0 is no run's)."""
    return secrets.randbelow(2**31 - 1) + 1


NOTHING_TO_STOP = "Nothing to stop: no run is going. Run starts one."
STOPPED_BEFORE_DRAWING = "Stopped before the run wrote a token."


def stopped_message(run: render.RunView) -> str:
    if not round_choices(run):
        return "Stopped: the lanes show how far they got."
    return "Stopped: the lanes show how far they got; pick a round or click a drafted token to inspect it."


@dataclass
class Drawing:
    """The run a handler is drawing, so that its error path keeps what was drawn (marked as cut short)."""

    run: render.RunView | None = None


def session_of(request: gr.Request | None) -> str | None:
    return request.session_hash if request else None


# --- the page's values -----------------------------------------------------------------------------


def inspect_values(page: Page, run: render.RunView) -> dict:
    """What makes a run inspectable: the round picker, the inspector on its default round, the
    explainer, and the run in the session (token clicks and the theory explorer read it)."""
    chosen = default_round(run)
    return {
        page.run_state: run,
        page.inspector.round_picker: gr.Dropdown(choices=round_choices(run), value=chosen),
        **dict(zip(page.inspector.outputs, inspector_values(run, chosen))),
        page.explainer: render.explain_html(run),
    }


def keep_run(page: Page, session_runs: SessionRuns, run: render.RunView) -> dict:
    """A finished live run joins the visitor's runs so far (written back to the session); its repeats there become
    its verdict's band."""
    record = session_runs.add(run)
    runs = session_runs.runs()
    if record is not None:
        run.repeats = repeats_of(runs, record)
    run.sweep = session_runs.sweep_of(run)
    return {**dict(zip(page.runs_so_far, runs_values(runs))), page.session_runs: session_runs}


def page_values(page: Page, progress: Progress, session_runs: SessionRuns | None = None) -> dict:
    """The page's values for a snapshot; a finished live run joins `session_runs` (None: a replay, not kept)."""
    run = progress.run
    status = ({page.status: render.status_html(running_summary(progress.headway), "info", run=run.run_id)}
              if progress.headway is not None and not progress.finished else {})
    if progress.quiet:  # a chance to stop, and at times a status line; gradio reads an empty dict as one bare value
        return status or {page.status: gr.skip()}
    # first: the stats read the repeats
    kept = keep_run(page, session_runs, run) if progress.finished and session_runs is not None else {}
    values = {**kept, **status, **lane_values(page.lanes, run, progress.active),
              page.stats: render.stats_html(run, progress.divergence_gap),
              page.live_run: None if progress.finished else run}
    if progress.redraw_plots:
        values.update(zip(page.charts, chart_values(run, live_only=not (progress.finished or progress.lane_finished))))
    if progress.finished:
        values.update(inspect_values(page, run))
        values.update({
            page.status: render.status_html(done_summary(run), "done", run=run.run_id),
            page.replay.download: gr.DownloadButton(value=save_for_download(run), visible=True),
        })
    return values


def stopped_values(page: Page, run: render.RunView) -> dict:
    """A run that ended early (Stop, an error, the time cap): its lanes say they stopped, and what was
    generated stays inspectable."""
    run.cut_short = True  # its open lanes will get no FinishEvent: lanes, card and charts then say it stopped
    return {**lane_values(page.lanes, run), page.stats: render.stats_html(run), page.live_run: None,
            **dict(zip(page.charts, chart_values(run))), **inspect_values(page, run)}


def stopped_page(page: Page, run: render.RunView) -> dict:
    return {page.status: render.status_html(stopped_message(run), "info", run=run.run_id), **stopped_values(page, run)}


def page_updates(page: Page, progresses: Iterable[Progress], session: str | None, started: float,
                 drawing: Drawing, session_runs: SessionRuns | None = None) -> Iterator[dict]:
    """The page's values for each snapshot of a live or replayed run, until Stop is pressed; a live run that
    finishes joins `session_runs`."""
    for progress in progresses:
        drawing.run = progress.run
        values = page_values(page, progress, session_runs)  # rendering takes a while: Stop may come meanwhile
        if stop_presses.since(session, "run", started):  # Stop came before gradio's cancel
            # The job's last update can reach the page after Stop's own (a paced run sleeps
            # through the cancel, and gradio then re-sends the last value it had), so the
            # job's last word is the stopped page too.
            yield stopped_page(page, progress.run)
            return
        yield values


def show_error(page: Page, error: BaseException, run_id: int, run: render.RunView | None = None) -> dict:
    """The error said in the status line; `run`: what the handler had drawn of its run, kept and marked as cut
    short (None: nothing was drawn)."""
    message = describe_error(error)
    values = {page.status: render.status_html(message, "error", run=run_id), page.live_run: None}
    if run is None:
        # A refused input: the page clears what the last run drew, whose settings the controls no
        # longer hold (seed −5 beside a temperature-2 lane); marking it stale instead would have to
        # reach every part that shows it, token clicks and the theory sliders included.
        values.update(cleared_values(page))
    else:
        # A run under way may be watched far from the status line: a warning too. A refused input is
        # said once, in the status line under Run, where the visitor just clicked.
        gr.Warning(message)
        values.update(stopped_values(page, run))
    return values


def cleared_values(page: Page) -> dict:
    """The page as before any run: what a new run clears (blank_values), and the charts, the inspector,
    the explainer and the run in the session too."""
    return {
        **blank_values(page), **dict(zip(page.charts, chart_values(None))), page.run_state: None,
        **dict(zip(page.inspector.outputs, inspector_values(None, None))), page.explainer: render.explain_html(None),
    }


def blank_values(page: Page) -> dict:
    """What a new run clears at once: lanes, stats, the round picker and the last run's download."""
    return {
        **lane_values(page.lanes, None),
        page.stats: render.stats_html(None),
        page.inspector.round_picker: gr.Dropdown(choices=[], value=None),
        page.replay.download: gr.DownloadButton(visible=False),
    }


def start_values(page: Page, run_id: int, message: str) -> dict:
    return {page.status: render.status_html(message, "info", run=run_id), **blank_values(page)}


def replayed_values(page: Page, saved: Run) -> tuple[dict, list[str]]:
    """The controls a replay sets, and the names of those left alone because the run's value lies
    outside the slider's range here (a host's smaller token cap): gradio would refuse it at Run."""
    values, kept = {}, []
    replayed = page.replayed
    for name, value in replayed_controls(saved).items():
        component = replayed[name]
        bounds = (getattr(component, "minimum", None), getattr(component, "maximum", None))
        if isinstance(component, gr.Slider) and not bounds[0] <= value <= bounds[1]:
            kept.append(f"{name.replace('_', ' ')} {value}")
            continue
        values[component] = value
    return values, kept


# --- the handlers ------------------------------------------------------------------------------------


QUEUED_TEXT = ("Queued: runs take turns on the model, one at a time; yours starts as soon as the one ahead of it "
               "ends (gradio's line here shows your place and the seconds waited).")


def on_queued(page: Page) -> dict:
    """Run was pressed: the status says the run is queued until on_run, its first word, takes over; a Stop now
    ends it."""
    return {page.status: render.status_html(QUEUED_TEXT, "info", run=0), page.live_run: QUEUED}


def on_run(page: Page, request: gr.Request, session_runs: SessionRuns | None, *values):
    """Run the page's settings: `values` are RUN_INPUTS' controls, in its order; `session_runs` the visitor's runs
    so far (None before the first)."""
    run_id = new_run_id()
    started = time.perf_counter()
    session = session_of(request)
    named = dict(zip(RUN_INPUTS, values, strict=True))
    pace_value = named.pop("pace")
    try:
        parsed = Request.parse(**named)
        pace_s = pace_seconds(pace_value)
        yield {page.status: render.status_html(loading_message(parsed), "info", run=run_id)}
        model_pair = parsed.load()
        prompt_ids = parsed.encode(model_pair)
        # Said before the prefill starts: a long prompt's reading showed only "Generating…" for minutes.
        reading = reading_note_for(model_pair, prompt_ids, len(parsed.lanes))
    except Exception as error:  # noqa: BLE001 — every failure becomes a message in the page
        yield show_error(page, error, run_id)
        return
    lanes = "the target alone first, then speculative decoding" + (", then transformers" if parsed.reference else "")
    yield start_values(page, run_id, f"Generating with γ = {parsed.config.gamma}: {lanes}… {reading}".strip())
    drawing = Drawing()
    try:
        # Stop ends the model's work between two of its layers, so a long prompt's reading stops too
        progresses = stream_run(parsed, model_pair, prompt_ids, run_id, pace_s, stopped_by(session, "run", started))
        yield from page_updates(page, progresses, session, started, drawing, session_runs or SessionRuns())
    except Exception as error:  # noqa: BLE001 — keep what was drawn, say what happened
        yield show_error(page, error, run_id, drawing.run)


def on_replay(page: Page, pick, upload, speed_name, request: gr.Request):
    run_id = new_run_id()
    started = time.perf_counter()
    session = session_of(request)
    try:
        saved = load_replay(pick, upload)
        speed = check_speed(REPLAY_SPEEDS.get(speed_name, speed_name))
    except Exception as error:  # noqa: BLE001
        yield show_error(page, error, run_id)
        return
    view = render.RunView.replaying(saved, run_id)
    values, kept = replayed_values(page, saved)
    settings_note = "Its prompt and settings are now in the controls above, so Run repeats it live"
    if kept:
        settings_note += f" (except {', '.join(kept)}: outside this page's range, so yours are kept)"
    yield {**start_values(page, run_id, f"Replaying a saved run ({saved.settings.get('pair', 'unknown pair')}, γ = "
                                        f"{saved.settings.get('gamma')}) {replay_pace_words(speed_name)}. "
                                        f"{settings_note}."), **values}
    drawing = Drawing()
    try:
        yield from page_updates(page, stream_events(view, replay(saved, speed), saved.replayed_decode), session, started,
                                drawing)
        finished = page_values(page, Progress(view, (), True, finished=True))
        yield {**finished, page.status: render.status_html(f"{done_summary(view)} {settings_note}.", "done", run=run_id)}
    except Exception as error:  # noqa: BLE001
        yield show_error(page, error, run_id, drawing.run)


def on_stop(page: Page, live_run: render.RunView | str | None, request: gr.Request) -> dict:
    """Stop: the run being drawn (`live_run`, as its last update left it) says how far it got; a run queued or
    still loading is ended before it drew anything; with none going, Stop says so and leaves the page alone."""
    record_stop(session_of(request), "run")
    if isinstance(live_run, render.RunView):
        return stopped_page(page, live_run)
    said = STOPPED_BEFORE_DRAWING if live_run == QUEUED else NOTHING_TO_STOP
    return {page.status: render.status_html(said, "info", run=0), page.live_run: None}
