"""A run as the page watches it: events (live or replayed) → snapshots due for a redraw.

No gradio here. The same loop serves a live run and a replay, so a replay renders exactly
like the run it recorded. Redraws are throttled (lanes every LANE_REFRESH_S, charts every
PLOT_REFRESH_S, all of it within DRAW_SHARE of the time); a pace slows how fast the speculative lane's rounds *appear*, never how fast
they run: the engine is a generator, paused while the page waits, and its clocks only run
inside it. A live run's events are computed in a worker thread, one each time the page asks, so
that a Stop can end a forward between two layers (specviz.models.interrupt). A live run's snapshots also say how
far it has got (Headway: its lane, tokens, the time left), for the status line.

Drawing is not free, and it must not land inside the engine's clocks. A redraw makes the
server build HTML and JSON (in gradio's event loop, beside the engine's thread) and the
browser lay it out (on the same machine for a local user); left to run beside the next
forward, both take the CPU and its memory bandwidth from the lane being timed: redrawing often makes
the page's speedups swing far from the CLI's on the same prompt, while redrawing seldom, with a pause
of REDRAW_SETTLE_S after each redraw, keeps them near it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from specviz.catalogue import lane_info
from specviz.decoding.engine import decode_lanes, top2_logit_gap
from specviz.decoding.events import Event, FinishEvent, PrefillEvent, RoundEvent
from specviz.models.interrupt import RunStopped, StopCheck, pair_models, stoppable
from specviz.models.pairs import ModelPair
from specviz.app.render.lanes import RunView
from specviz.app.request import POLICY, Request, check_run_time
from specviz.analysis.expectations import loaded_settings
from specviz.analysis.prefill import recording_prefills
from specviz.analysis.trace import first_divergence

LANE_REFRESH_S = 0.25  # redraw the lanes at most this often (the first token is shown at once)
# After each redraw of a live run, the engine waits this long, untimed, so the page's drawing
# happens while no lane's clock runs (see the module's docstring).
REDRAW_SETTLE_S = 0.05
PLOT_REFRESH_S = 0.5  # redraw the charts at most this often while a lane runs
# Drawing a live run (the server's HTML and charts, the settle after each redraw) may take at most this share of
# its wall time: a redraw that is due waits while the drawing so far is above it. Without it, redrawing all charts
# every PLOT_REFRESH_S (plotly's cost grows with the rounds drawn) can take as long as the lanes themselves, so the
# race one watched was slower than the speedup the page reported.
DRAW_SHARE = 0.1
# Seconds the page waits after showing each round of a drafting lane: real time, or slow
# enough for the eye to follow each decision. Timings reported are the engine's, unchanged.
PACES = {"real time": 0.0, "slow (4 rounds/s)": 0.25, "1 round/s": 1.0}
QUIET_EVERY_S = 0.25  # while a lane that is not redrawn (the reference) runs: how often the consumer gets a chance to stop
# …and how often its status line says how far it has got (a line, not a redraw: it takes next to no CPU from it)
STATUS_EVERY_S = 1.0
# Tokens a lane writes after its first before its pace gives an estimate of the time left: one from fewer swings
# with the first steps' warm-up.
MIN_TIMED_TOKENS = 4
Decode = Callable[[list[int]], str]


@dataclass(frozen=True)
class Headway:
    """How far a live run has got, for its status line: the lane running, its tokens written of those asked, and
    the seconds the run has left by the lanes' measured pace (None until it is measurable)."""

    lane: str
    lane_number: int  # 1-based, of num_lanes
    num_lanes: int
    num_tokens: int
    max_new_tokens: int | None
    seconds_left: float | None


@dataclass
class Progress:
    """What the page should show now: the run so far, which lane is running, what changed."""

    run: RunView
    active: str | None  # lane generating now, None when done
    redraw_plots: bool
    finished: bool = False
    divergence_gap: float | None = None  # greedy lanes that parted: the target's top-2 logit gap there
    quiet: bool = False  # nothing to draw: only a point where the consumer may stop (Stop, a cancelled call)
    # With redraw_plots: a lane just finished, so every chart is due; else only the live ones (charts.page.chart_values)
    lane_finished: bool = False
    headway: Headway | None = None  # a live run under way: how far it has got (a replay: None, its status is its own)


class StopPresses:
    """When each visitor last pressed a section's Stop.

    Gradio cancels a job from the browser, beside the Stop call, so the job may still yield
    after Stop was answered; it asks here first and ends instead of drawing over "Stopped"
    (or putting "generating…" back in the lanes).
    Bounded, since a visitor who closes the tab never asks again.
    """

    KEPT = 256

    def __init__(self) -> None:
        self.pressed: OrderedDict[tuple[str | None, str], float] = OrderedDict()
        self.lock = threading.Lock()  # Stop handlers of different visitors run in gradio's worker threads

    def press(self, session: str | None, section: str) -> None:
        with self.lock:
            self.pressed[session, section] = time.perf_counter()
            self.pressed.move_to_end((session, section))
            while len(self.pressed) > self.KEPT:
                self.pressed.popitem(last=False)

    def since(self, session: str | None, section: str, started: float) -> bool:
        """Whether Stop was pressed in this section after a job that began at `started`."""
        return self.pressed.get((session, section), float("-inf")) >= started


stop_presses = StopPresses()  # sections: "run" (the main page's run or replay), "lab", "sweep"
STOP_SETTLE_S = 0.3  # a Stop answers this long after it is recorded: longer than one redraw takes


def record_stop(session: str | None, section: str) -> None:
    """What every Stop handler does first: record the press, then wait, so that a redraw the job
    began before the press reaches the page before the handler's "Stopped"."""
    stop_presses.press(session, section)
    time.sleep(STOP_SETTLE_S)


def pace_seconds(pace) -> float:
    if pace in (None, ""):
        return 0.0
    if pace not in PACES:
        raise ValueError(f"unknown pace {pace!r}; choose one of: {', '.join(PACES)}")
    return PACES[pace]


def stream_events(run: RunView, events: Iterable[Event], decode: Decode, pace_s: float = 0.0,
                  max_run_s: int = 0, settle_s: float = 0.0, live: bool = False) -> Iterator[Progress]:
    """Feed events into the run view, yielding a Progress whenever the page is due a redraw.

    After each redraw the events wait `pace_s` (a drafting round shown at a pace) or `settle_s`
    (any other redraw of a lane still running) before the engine is asked for more. Redraws that only
    show progress keep the drawing under DRAW_SHARE of the time; a lane's first token and its end are
    always drawn. `live`: each lane's time on screen is kept (LaneView.shown_s), to say beside its model work.

    transformers' reference lane runs in a thread of its own while its events arrive, so the
    page is not redrawn until it finishes: drawing would take the CPU from the lane being timed.
    Quiet snapshots still come every QUIET_EVERY_S, since a consumer (gradio) can only stop a
    run between two of them.
    """
    last_lanes, last_plots = 0.0, time.perf_counter()  # charts first redrawn PLOT_REFRESH_S in
    started = lane_began = time.perf_counter()  # lane_began: when the running lane began reading its prompt
    first_token = last_said = started  # when the running lane wrote its first token; when a quiet lane's was said
    drawn_s = 0.0  # time spent drawing (the consumer's work on each Progress, the settle after it)

    def headway(now: float) -> Headway | None:  # a live run's status line: how far it has got
        return headway_of(run, now - lane_began, now - first_token) if live else None
    for event in events:
        check_run_time(started, max_run_s)
        run.add(event, decode)
        finished_lane = isinstance(event, FinishEvent)
        lane = lane_info(event.lane)
        paced = pace_s > 0 and isinstance(event, RoundEvent) and lane.drafts
        now = time.perf_counter()
        if isinstance(event, PrefillEvent):  # the lane began reading its prompt then (setting up before is not its time)
            lane_began, first_token = now - event.prefill_s, now
        if live and finished_lane:
            run.lane(event.lane).shown_s = now - lane_began
        if not lane.redraws and isinstance(event, RoundEvent):
            if now - last_lanes >= QUIET_EVERY_S:
                said = now - last_said >= STATUS_EVERY_S
                yield Progress(run, event.lane, False, quiet=True, headway=headway(now) if said else None)
                last_lanes = time.perf_counter()
                last_said = last_lanes if said else last_said
            continue
        within_share = drawn_s <= DRAW_SHARE * (now - started)
        if paced or finished_lane or isinstance(event, PrefillEvent) or (now - last_lanes >= LANE_REFRESH_S and within_share):
            redraw_plots = finished_lane or (now - last_plots >= PLOT_REFRESH_S and within_share)
            yield Progress(run, next_lane(run) if finished_lane else event.lane, redraw_plots, lane_finished=finished_lane,
                           headway=headway(now))
            last_lanes = time.perf_counter()
            if redraw_plots:
                last_plots = last_lanes
            if paced:
                time.sleep(pace_s)
            elif settle_s > 0 and not finished_lane:
                time.sleep(settle_s)
            drawn_s += time.perf_counter() - now - (pace_s if paced else 0.0)  # a pace is the visitor's choice


def headway_of(run: RunView, lane_s: float, decoding_s: float) -> Headway | None:
    """How far a run has got: its first lane not done, its tokens, and the time the run has left (seconds_left).
    `lane_s`: seconds since that lane began reading its prompt; `decoding_s`: since its first token."""
    running = [name for name in run.lane_names if not run.lane(name).trace.done]
    if not running:
        return None
    trace = run.lane(running[0]).trace
    return Headway(running[0], run.lane_names.index(running[0]) + 1, len(run.lane_names), trace.num_tokens,
                   run.settings.get("max_new_tokens"), seconds_left(run, running, lane_s, decoding_s))


def seconds_left(run: RunView, running: list[str], lane_s: float, decoding_s: float) -> float | None:
    """The running lane's tokens still to come at its own pace so far, then each lane after it as long as the
    finished lanes took on screen (before any has finished, as long as this one will take in all); None until
    either is measured. Tokens still to come: as many as a finished lane wrote (greedy lanes write the same text,
    which may end before the tokens asked), else those asked; an estimate, since a lane may end early."""
    trace = run.lane(running[0]).trace
    finished = [run.lane(name) for name in run.lane_names if run.lane(name).trace.done and run.lane(name).shown_s]
    per_lane_s = sum(lane.shown_s for lane in finished) / len(finished) if finished else None
    expected = finished[0].trace.num_tokens if finished else run.settings.get("max_new_tokens")
    started = trace.prefill is not None
    timed = trace.num_tokens - 1  # tokens written after the first, in decoding_s
    if started and expected and timed >= MIN_TIMED_TOKENS and decoding_s > 0:
        this_left_s = max(expected - trace.num_tokens, 0) * decoding_s / timed
        per_lane_s = per_lane_s or lane_s + this_left_s
    elif per_lane_s is not None:
        this_left_s = max(per_lane_s - (lane_s if started else 0.0), 0.0)
    else:
        return None
    return this_left_s + per_lane_s * (len(running) - 1)


def next_lane(run: RunView) -> str | None:
    """The lane the engine runs next once one finishes (it reads the prompt before its first token), or None;
    None too for a lane the page does not redraw while it runs (transformers' reference lane), which would
    keep saying so to its end."""
    name = next((name for name in run.lane_names if not run.lane(name).trace.done), None)
    return name if name is not None and lane_info(name).redraws else None


def never_stopped() -> bool:
    return False


def stopped_by(session: str | None, section: str, started: float) -> StopCheck:
    """Whether a section's Stop was pressed since a job began at `started`: the check a job's forwards ask
    between two of the model's layers (specviz.models.interrupt)."""
    return lambda: stop_presses.since(session, section, started)


def run_settings(request: Request, pair: ModelPair) -> dict:
    """What a run records of its setup: the settings asked for, then what loading the pair settled (device,
    precision, the verify's invariance)."""
    return {**request.settings, **loaded_settings(pair)}


def stream_run(request: Request, pair: ModelPair, prompt_ids: list[int], run_id: int = 0,
               pace_s: float = 0.0, should_stop: StopCheck = never_stopped) -> Iterator[Progress]:
    """Decode the request's lanes live; the last Progress is marked finished. When `should_stop` says so
    (the page's Stop), the model's work ends between two layers, a long prompt's reading included, and
    the last Progress is a quiet one: the consumer's own check of the same press ends it there."""
    settings = run_settings(request, pair)
    run = RunView(request.prompt_text, prompt_ids, request.config.gamma, settings, run_id,
                  chat=pair.uses_chat(request.chat), lanes=request.lanes)
    events = stoppable(recording_prefills(pair, decode_lanes(pair, prompt_ids, request.config, request.lanes)),
                       pair_models(pair), should_stop)
    try:
        yield from stream_events(run, events, pair.decode, pace_s, POLICY.max_run_s, settle_s=REDRAW_SETTLE_S, live=True)
    except RunStopped:
        yield Progress(run, None, False, quiet=True)
        return
    yield Progress(run, None, True, finished=True, divergence_gap=divergence_gap(run, pair))


def divergence_gap(run: RunView, pair: ModelPair) -> float | None:
    """Where greedy lanes part, how near a tie the target's choice was (one extra target forward)."""
    if run.settings.get("temperature", 0) != 0:
        return None
    baseline, speculative = run.baseline.trace, run.speculative.trace
    index = first_divergence(baseline, speculative)
    if index is None:
        return None
    return top2_logit_gap(pair, run.prompt_ids + baseline.token_ids[:index])
