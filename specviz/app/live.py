"""A run as the page watches it: events (live or replayed) → snapshots due for a redraw.

No gradio here. The same loop serves a live run and a replay, so a replay renders exactly
like the run it recorded. Redraws are throttled (lanes every LANE_REFRESH_S, charts every
PLOT_REFRESH_S, all of it within DRAW_SHARE of the time); a pace slows how fast the speculative lane's rounds *appear*, never how fast
they run: the engine is a generator, paused while the page waits, and its clocks only run
inside it. A live run's events are computed in a worker thread, one each time the page asks, so
that a Stop can end a forward between two layers (specviz.models.interrupt). A live run's snapshots also say how
far it has got (Headway: the lanes running, their tokens, the time left), for the status line.

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
from specviz.analysis.run import DECODED_IN_TURNS, IN_TURNS
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
    """How far a live run has got, for its status line: the lanes running now (those taking turns, or the one lane
    that runs alone after them) with the tokens each has written, the lanes still to come after them, the tokens
    asked, and the seconds the run has left by the lanes' measured pace (None until it is measurable)."""

    running: tuple[tuple[str, int], ...]  # (lane, its tokens so far), in the run's order
    later: tuple[str, ...]
    max_new_tokens: int | None
    seconds_left: float | None

    @property
    def lanes(self) -> tuple[str, ...]:
        return tuple(lane for lane, _ in self.running)


@dataclass
class Progress:
    """What the page should show now: the run so far, which lane is running, what changed."""

    run: RunView
    active: tuple[str, ...]  # the lanes generating now, their boxes say so (running_lanes); () when done
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
    (any other redraw while a lane still runs) before the engine is asked for more. Redraws that only
    show progress keep the drawing under DRAW_SHARE of the time; a lane's first token and its end are
    always drawn. `live`: each lane's time on screen is kept (LaneView.shown_s, from the moment the run's first lane
    began reading its prompt to the lane's end), to say beside its model work.

    transformers' reference lane runs in a thread of its own while its events arrive, so the
    page is not redrawn until it finishes: drawing would take the CPU from the lane being timed.
    Quiet snapshots still come every QUIET_EVERY_S, since a consumer (gradio) can only stop a
    run between two of them.
    """
    last_lanes, last_plots = 0.0, time.perf_counter()  # charts first redrawn PLOT_REFRESH_S in
    started = last_said = time.perf_counter()  # last_said: when a quiet lane's progress was last said
    began: float | None = None  # when the run's first lane began reading its prompt (setting up before is no lane's)
    drawn_s = 0.0  # time spent drawing (the consumer's work on each Progress, the settle after it)

    def headway(now: float) -> Headway | None:  # a live run's status line: how far it has got
        return headway_of(run, now - began) if live and began is not None else None
    for event in events:
        check_run_time(started, max_run_s)
        run.add(event, decode)
        finished_lane = isinstance(event, FinishEvent)
        lane = lane_info(event.lane)
        paced = pace_s > 0 and isinstance(event, RoundEvent) and lane.drafts
        now = time.perf_counter()
        if isinstance(event, PrefillEvent) and began is None:
            began = now - event.prefill_s
        if live and finished_lane and began is not None:
            run.lane(event.lane).shown_s = now - began
        if not lane.redraws and isinstance(event, RoundEvent):
            if now - last_lanes >= QUIET_EVERY_S:
                said = now - last_said >= STATUS_EVERY_S
                yield Progress(run, running_lanes(run), False, quiet=True, headway=headway(now) if said else None)
                last_lanes = time.perf_counter()
                last_said = last_lanes if said else last_said
            continue
        within_share = drawn_s <= DRAW_SHARE * (now - started)
        if paced or finished_lane or isinstance(event, PrefillEvent) or (now - last_lanes >= LANE_REFRESH_S and within_share):
            redraw_plots = finished_lane or (now - last_plots >= PLOT_REFRESH_S and within_share)
            yield Progress(run, running_lanes(run), redraw_plots, lane_finished=finished_lane, headway=headway(now))
            last_lanes = time.perf_counter()
            if redraw_plots:
                last_plots = last_lanes
            if paced:
                time.sleep(pace_s)
            elif settle_s > 0 and lanes_now(run)[0]:  # a lane's clock runs next: the drawing settles first
                time.sleep(settle_s)
            drawn_s += time.perf_counter() - now - (pace_s if paced else 0.0)  # a pace is the visitor's choice


def lanes_now(run: RunView) -> tuple[list[str], list[str]]:
    """The lanes running now and those after them, in the engine's order (engine.decode_lanes): in a run whose
    lanes take turns (its settings say IN_TURNS) every unfinished lane of the turns, then each other lane alone; in
    a run recorded before lanes took turns, one lane after another."""
    unfinished = [name for name in run.lane_names if not run.lane(name).trace.done]
    turns = [name for name in unfinished if lane_info(name).in_turns] if run.settings.get(IN_TURNS) else []
    running = turns or unfinished[:1]
    return running, [name for name in unfinished if name not in running]


def running_lanes(run: RunView) -> tuple[str, ...]:
    """The lanes whose boxes say they run ("generating…", or "reading the prompt…" before their first token); a lane
    the page does not redraw while it runs (transformers' reference lane) only from its first token: said before,
    "reading the prompt…" would stay to its end."""
    return tuple(name for name in lanes_now(run)[0]
                 if lane_info(name).redraws or run.lane(name).trace.prefill is not None)


def headway_of(run: RunView, run_s: float) -> Headway | None:
    """How far a run has got: the lanes running now, their tokens, and the time the run has left (seconds_left).
    `run_s`: seconds since its first lane began reading its prompt."""
    running, later = lanes_now(run)
    if not running:
        return None
    return Headway(tuple((name, run.lane(name).trace.num_tokens) for name in running), tuple(later),
                   run.settings.get("max_new_tokens"), seconds_left(run, running, later, run_s))


def seconds_left(run: RunView, running: list[str], later: list[str], run_s: float) -> float | None:
    """The model work still to come, on the page's clock: each running lane's tokens still to come at its own pace so
    far (one not yet timed MIN_TIMED_TOKENS after its first: as long as a finished lane's model work took, less its
    own so far), each lane after them as long as a finished lane's (before any has finished, as the running lanes'
    will in all, on average), all scaled by the run's wall time over its model work so far (the drawing, the engine
    outside its clocks). None until that can be said. Tokens still to come: as many as a finished lane wrote (greedy
    lanes write the same text, which may end before the tokens asked), else those asked; an estimate, since a lane
    may end early."""
    traces = [run.lane(name).trace for name in run.lane_names]
    model_s = sum(trace.wall_s for trace in traces)
    finished = [trace for trace in traces if trace.done]
    finished_s = sum(trace.wall_s for trace in finished) / len(finished) if finished else None
    expected = finished[0].num_tokens if finished else run.settings.get("max_new_tokens")
    left_s, totals_s = 0.0, []
    for name in running:
        trace = run.lane(name).trace
        timed = trace.num_tokens - 1  # tokens written after the first
        if trace.prefill is not None and expected and timed >= MIN_TIMED_TOKENS:
            this_left_s = max(expected - trace.num_tokens, 0) * (trace.wall_s - trace.prefill.prefill_s) / timed
        elif finished_s is not None:
            this_left_s = max(finished_s - trace.wall_s, 0.0)
        else:
            return None
        left_s += this_left_s
        totals_s.append(trace.wall_s + this_left_s)
    if model_s <= 0:
        return None
    per_lane_s = finished_s if finished_s is not None else sum(totals_s) / len(totals_s)
    return (left_s + per_lane_s * len(later)) * max(run_s / model_s, 1.0)


def never_stopped() -> bool:
    return False


def stopped_by(session: str | None, section: str, started: float) -> StopCheck:
    """Whether a section's Stop was pressed since a job began at `started`: the check a job's forwards ask
    between two of the model's layers (specviz.models.interrupt)."""
    return lambda: stop_presses.since(session, section, started)


def run_settings(request: Request, pair: ModelPair) -> dict:
    """What a run records of its setup: the settings asked for, then what loading the pair settled (device,
    precision, the verify's invariance), and that its lanes take turns (a replay then says so as the run did)."""
    return {**request.settings, **loaded_settings(pair), **DECODED_IN_TURNS}


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
        yield Progress(run, (), False, quiet=True)
        return
    yield Progress(run, (), True, finished=True, divergence_gap=divergence_gap(run, pair))


def divergence_gap(run: RunView, pair: ModelPair) -> float | None:
    """Where greedy lanes part, how near a tie the target's choice was (one extra target forward)."""
    if run.settings.get("temperature", 0) != 0:
        return None
    baseline, speculative = run.baseline.trace, run.speculative.trace
    index = first_divergence(baseline, speculative)
    if index is None:
        return None
    return top2_logit_gap(pair, run.prompt_ids + baseline.token_ids[:index])
