"""The teaching sections' handlers: thin adapters from specviz.app.lab's logic to the sections'
component values.

Each handler is a module-level function; the ones that read the main page's controls take their
section (specviz.app.teach_sections) first, and specviz.app.teach binds them to it, so a test can
call them with built sections and plain values. Every failure becomes a message in the page, never
a traceback; the long jobs (lab, sweep) stop on Stop and at the host's time limit per run.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

import gradio as gr

from specviz.app import lessons, plots, plots_confidence, plots_round, plots_teach, plots_tree, render, step_lessons
from specviz.app.render.tree_round import figure_words
from specviz.app.lab import exactness, step_mode, sweep
from specviz.app.history import SweepRecord, run_history, sweep_key
from specviz.app.render.verdict import same_text
from specviz.app.live import record_stop, run_settings, stop_presses, stopped_by
from specviz.app.request import POLICY, Request, describe_error, whole_number
from specviz.app.teach_sections import (
    LAB_EXAMPLE, LAB_EXAMPLE_DRAWS, LabSection, StepSection, SweepSection, close_step, empty_lab_chart,
    empty_step_chart, measured_of, theory_values,
)
from specviz.app.ui_handlers import session_of
from specviz.app.wording import count
from specviz.catalogue import drafter_info
from specviz.decoding.config import MAX_GAMMA
from specviz.decoding.events import FinishEvent, PrefillEvent, RoundEvent
from specviz.models.interrupt import RunStopped, pair_models, stoppable
from specviz.models.pairs import ModelPair

STEP_LANE_MAX_PX = 200  # the step lane's text scrolls past this: the stages below are the point
REDRAW_S = 1.0  # the lab and the sweep redraw at most this often


# --- shared by the sections ----------------------------------------------------------------------------


def parse_controls(names: Sequence[str], values: Sequence) -> Request:
    """The main page's values as a Request (ValueError with the user's message if one is bad)."""
    return Request.parse(**dict(zip(names, values, strict=True)))


def load_prompt(request: Request) -> tuple[ModelPair, list[int]]:
    pair = request.load()
    return pair, request.encode(pair)


def over_time(started: float) -> bool:
    return bool(POLICY.max_run_s) and time.perf_counter() - started > POLICY.max_run_s


def time_limit_note(what: str) -> str:
    return f"this server stops {what} after {POLICY.max_run_s} s so other visitors get a turn; the results so far are shown"


def record_stopped(visitor: gr.Request | None, section: str, previous_status: str | None, what: str) -> str:
    """A long section's Stop: record the press (its job checks for it), then add the stopped line to its status."""
    record_stop(session_of(visitor), section)
    return lessons.stopped_html(previous_status or "", what)


# --- step mode ----------------------------------------------------------------------------------------------


@dataclass
class StepSession:
    """One visitor's step run: the engine's generator (in step_mode.StepRun) and the view of its text."""

    request: Request
    pair: ModelPair
    run: step_mode.StepRun
    view: render.RunView
    pending: Sequence | None = None  # a round's events, run and fed, not shown until the visitor has guessed

    @property
    def lane(self) -> render.LaneView:
        return self.view.speculative

    def close(self) -> None:
        """Free the KV caches (a dropped or restarted session)."""
        self.run.close()

    def feed(self, events: Sequence) -> None:
        for event in events:
            self.view.add(event, self.pair.decode)


def start_step(request: Request) -> StepSession:
    pair, prompt_ids = load_prompt(request)
    view = render.RunView(request.prompt_text, prompt_ids, request.config.gamma, request.settings,
                          chat=pair.uses_chat(request.chat), lanes=("speculative",))
    session = StepSession(request, pair, step_mode.StepRun(pair, prompt_ids, request.config), view)
    session.feed(session.run.start())
    return session


def step_lane_html(session: StepSession) -> str:
    status = render.stop_text(session.lane.trace, session.request.config.max_new_tokens) or "press Next round"
    return session.lane.html("Speculative decoding, one round at a time", status, max_height_px=STEP_LANE_MAX_PX)


def step_values(session: StepSession, events: Sequence, said: str = "") -> tuple:
    """(status, lane, stages, chart, round drawn, guess, next button) after the events of one press; `said` goes
    before the status (the visitor's guess against the round)."""
    trace, config = session.lane.trace, session.request.config
    rounds = [event for event in events if isinstance(event, RoundEvent)]
    round_number = len(trace.rounds)
    stages, chart, drawn = "", gr.skip(), gr.skip()
    if rounds:
        event = rounds[-1]
        texts = session.lane.round_texts[event.round_index]
        drawn = plots_round.round_anatomy(trace, event, texts, session.lane.greedy)
        before = trace.num_tokens - len(event.emitted_ids)
        stages = step_lessons.round_html(event, texts, session.lane.labels, before, config.drafter,
                                         session.run.draft_room(event), greedy=session.lane.greedy)
        chart = (plots.decision_distributions(event, session.lane.labels, greedy=session.lane.greedy) if event.gamma
                 else empty_step_chart())
        if event.tree and texts.nodes:  # a tree round: the inspector's tree beside its mask
            chart = plots_tree.tree_figure(event, **figure_words(event, texts.nodes, session.lane.greedy))
        message = f"Round {round_number} done: {count(len(event.emitted_ids), 'token')} committed, {trace.num_tokens} so far."
    elif any(isinstance(event, PrefillEvent) for event in events):
        stages = step_lessons.prefill_html(session.lane.first_text, len(session.view.prompt_ids), config.drafter)
        drawn = plots_round.round_anatomy(trace, None)  # a new run: no round drawn yet
        message = "Prefill done: press Next round."
    else:
        message = "Nothing left to do: press Start for a new run."
    finish = next((event for event in events if isinstance(event, FinishEvent)), None)
    if finish is not None:
        stages += step_lessons.finish_html(trace, finish, config.max_new_tokens)
        message = f"Done after {count(round_number, 'round')}: {count(trace.num_tokens, 'new token')}. Press Start to run again."
    status = step_lessons.step_status_html(f"{said} {message}".strip(), round_number, session.run.done,
                                           trace.num_tokens, "done" if session.run.done else "info")
    return (status, step_lane_html(session), stages or gr.skip(), chart, drawn, gr.Radio(visible=False, value=None),
            gr.Button(interactive=not session.run.done))


def guess_values(session: StepSession, event: RoundEvent) -> tuple:
    """StepSection.outputs' values while a round waits for the visitor's guess: its drafting only, the lane as it
    was, the verify drawn as one block still to be read, and the numbers to pick from."""
    lane = session.lane
    texts = lane.round_texts[event.round_index]
    stages = step_lessons.guess_html(event, texts, session.request.config.drafter, session.run.draft_room(event),
                                     lane.greedy)
    drawn = plots_round.round_anatomy(lane.trace, event, texts, lane.greedy, reveal=False)
    status = step_lessons.step_status_html(f"Round {event.round_index + 1} drafted: how many drafts will the target "
                                           "keep? Pick your guess.", event.round_index, False, lane.trace.num_tokens)
    choices = [str(number) for number in range(step_lessons.max_kept(event) + 1)]
    return (status, gr.skip(), stages, gr.skip(), drawn, gr.Radio(choices, value=None, visible=True),
            gr.Button(interactive=False))


def step_error(session: StepSession | None, error: BaseException) -> tuple:
    """StepSection.outputs' values for a failure: the message, and Next round usable while the run goes on."""
    message = describe_error(error)
    return (session, step_lessons.step_status_html(message, 0, False, 0, "error"), gr.skip(), gr.skip(), gr.skip(),
            gr.skip(), gr.skip(), gr.Button(interactive=session is not None and not session.run.done))


def on_step_start(section: StepSection, session: StepSession | None, *values) -> tuple:
    close_step(session)
    try:
        session = start_step(parse_controls(section.names, values))
    except Exception as error:  # noqa: BLE001 — every failure becomes a message in the page
        return step_error(None, error)
    return (session, *step_values(session, session.run.trace.events()))


def on_step_next(session: StepSession | None, guess_first: bool = False) -> tuple:
    if session is None:
        return step_error(None, ValueError("press Start first: it reads the prompt with the settings above"))
    if session.pending is not None:  # a round still waits for its guess (the N key): show it, run no other
        events, session.pending = session.pending, None
        return (session, *step_values(session, events, "No guess this time."))
    try:
        events = session.run.advance()
        session.feed(events)
    except Exception as error:  # noqa: BLE001
        return step_error(session, error)
    drafted = [event for event in events if isinstance(event, RoundEvent) and event.gamma]
    if guess_first and drafted:
        session.pending = events
        return (session, *guess_values(session, drafted[-1]))
    return (session, *step_values(session, events))


def on_step_guess(session: StepSession | None, guess: str | None) -> tuple:
    """The visitor's guess: the round it waited on, shown whole, with how the guess went."""
    if session is None or session.pending is None or guess is None:
        return (session, gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.Radio(visible=False), gr.skip())
    events, session.pending = session.pending, None
    event = next(event for event in reversed(events) if isinstance(event, RoundEvent))
    return (session, *step_values(session, events, step_lessons.guess_said(str(guess), event)))


# --- exactness lab ---------------------------------------------------------------------------------------------


def bin_labels(bins: exactness.Bins, pair: ModelPair) -> list[str]:
    """"'a' · 'b'" per outcome; runs of spaces counted (␣×8), or indented code makes endless labels."""
    texts = {token_id: compact_spaces(pair.decode([token_id])) for outcome in bins.outcomes for token_id in outcome}
    labels = [f"{plots.label_of(first, texts)} · {plots.label_of(second, texts)}" for first, second in bins.outcomes]
    return labels + (["other"] if bins.has_other else [])


def compact_spaces(text: str) -> str:
    return re.sub(r" {3,}", lambda match: f"␣×{len(match.group())}", text)


def lab_values(tally: exactness.LabTally, labels: list[str], wrong_rule: bool, started: float, start: str,
               note: str = "", settings: str = "") -> tuple:
    done = tally.num_draws("speculative")
    p_values = {lane: tally.p_value(lane) for lane in exactness.LANES} if done else {}
    outside = {lane: tally.bars_outside(lane) for lane in exactness.LANES}
    waiting_for = tally.bins.draws_needed if tally.too_few("speculative") else 0  # the lanes draw in turn
    status = lessons.lab_status_html(done, tally.num_planned, p_values, tally.bins.num_bins, wrong_rule,
                                     time.perf_counter() - started, note, outside, start, tally.wrong_words,
                                     waiting_for, settings)
    return status, plots_teach.exactness_histogram(tally, labels, wrong_rule)


def lab_start_html(start: exactness.LabStart, pair: ModelPair) -> str:
    """Where the lab tests, in the pair's own text (lessons.lab_start_html)."""
    if not start.lead_ids:
        return ""
    return lessons.lab_start_html(pair.decode(list(start.lead_ids)), pair.decode(list(start.skipped)), start.skipped_prob)


def on_lab_run(section: LabSection, visitor: gr.Request, num_draws_value, wrong_value, *values) -> Iterator[tuple]:
    started = time.perf_counter()
    session = session_of(visitor)
    wrong = bool(wrong_value)
    try:
        request = parse_controls(section.names, values)
        planned = whole_number(num_draws_value, "N (draws per lane)", exactness.MIN_DRAWS, exactness.MAX_DRAWS)
        exactness.check_lab(request.config, planned)
        config = request.config
        settings = lessons.lab_settings_text(request.settings["pair"], config.temperature, config.top_k, config.top_p,
                                             config.gamma, drafter_info(config.drafter).label, config.tree)
        yield render.status_html(f"Loading the {request.settings['pair']} pair…"), gr.skip()
        pair, prompt_ids = load_prompt(request)
        yield render.status_html("Computing the target's exact distribution…"), gr.skip()
        labels, start, last_drawn, tally = None, "", 0.0, None
        tallies = exactness.run_lab(pair, prompt_ids, request.config, planned, wrong)
        for tally in stoppable(tallies, pair_models(pair), stopped_by(session, "lab", started)):
            if stop_presses.since(session, "lab", started):
                return
            if labels is None:
                labels, start = bin_labels(tally.bins, pair), lab_start_html(tally.start, pair)
            if over_time(started):
                yield lab_values(tally, labels, wrong, started, start, time_limit_note("the lab"), settings=settings)
                return
            if time.perf_counter() - last_drawn >= REDRAW_S:
                yield lab_values(tally, labels, wrong, started, start, settings=settings)
                last_drawn = time.perf_counter()
        yield lab_values(tally, labels, wrong, started, start, settings=settings)
    except RunStopped:  # Stop came inside a forward: the job ends there, as between two tallies
        return
    except Exception as error:  # noqa: BLE001 — every failure becomes a message in the page
        yield render.status_html(describe_error(error), "error"), gr.skip()


def on_lab_example(section: LabSection) -> tuple:
    """Set the example's controls, tick the wrong rule (the button promises a setting where it is caught),
    say which, in the lab and in the page's status line beside the controls, and clear results that were for other
    settings."""
    example = {name: LAB_EXAMPLE[name] for name in section.examples}
    return (*example.values(), LAB_EXAMPLE_DRAWS, True, lessons.lab_example_html(example, LAB_EXAMPLE_DRAWS),
            empty_lab_chart(), lessons.lab_example_main_html(example))


def on_lab_stop(previous_status, visitor: gr.Request) -> str:
    return record_stopped(visitor, "lab", previous_status, "the chart and the p-values are for the draws made so far.")


# --- theory explorer ---------------------------------------------------------------------------------------------


def on_measured_run(run) -> tuple:
    """The sliders at the last run's α̂, c and v (each within its slider's range) with the chart and note drawn
    for those same values, or all unchanged before a run. The chart is drawn here, not by the sliders' change
    events: in a closed accordion those fired for some sliders and not others, and the chart said one v
    beside a slider at another."""
    comparison, _ = measured_of(run)
    if comparison is None:
        return gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
    values = (round(comparison.acceptance_rate, 2), round(min(comparison.cost_ratio, 2.0), 2),
              round(min(max(comparison.verify_cost, 0.5), 4.0), 2))
    return (*values, *theory_values(*values, run))


# --- γ sweep -------------------------------------------------------------------------------------------------------


def on_sweep_run(section: SweepSection, visitor: gr.Request, smallest_value, largest_value, repeats_value,
                 run: render.RunView | None, *values) -> Iterator[tuple]:
    """Time the page's setup at each γ; a sweep that finished is kept for this visitor (app.history), so the
    statistics of a run of its setup, the last one's at once, quote its recommended γ."""
    started = time.perf_counter()
    session = session_of(visitor)
    try:
        request = parse_controls(section.names, values)
        gammas = sweep.sweep_gamma_range(whole_number(smallest_value, "smallest γ", 1, MAX_GAMMA),
                                         whole_number(largest_value, "largest γ", 1, MAX_GAMMA))
        config = sweep.sweep_config(request.config, gammas, whole_number(repeats_value, "repeats"))
        yield render.status_html(f"Loading the {request.settings['pair']} pair…"), *[gr.skip()] * 4
        pair, prompt_ids = load_prompt(request)
        temperature = request.config.temperature
        last_drawn = 0.0
        progresses = sweep.sweep_gammas(pair, prompt_ids, config)
        for progress in stoppable(progresses, pair_models(pair), stopped_by(session, "sweep", started)):
            if stop_presses.since(session, "sweep", started):
                return
            finished = progress.num_done == progress.num_total
            late = over_time(started)
            if finished or late or time.perf_counter() - last_drawn >= REDRAW_S:
                view = sweep.sweep_view(progress.results(temperature))
                note = time_limit_note("the sweep") if late and not finished else ""
                drafts = progress.judged_drafts()
                stats = keep_sweep(session, request, pair, view, run) if finished else gr.skip()
                yield (lessons.sweep_status_html(progress.num_done, progress.num_total,
                                                 time.perf_counter() - started, view, note),
                       plots_teach.gamma_sweep(view, max(gammas)), plots_teach.sweep_confidence(drafts, progress.labels),
                       plots_confidence.confidence_note_html(drafts, "the sweep's runs"), stats)
                last_drawn = time.perf_counter()
            if late:
                return
    except RunStopped:  # Stop came inside a forward: the job ends there, as between two runs
        return
    except Exception as error:  # noqa: BLE001 — every failure becomes a message in the page
        yield render.status_html(describe_error(error), "error"), *[gr.skip()] * 4


def keep_sweep(session: str | None, request: Request, pair: ModelPair, view: sweep.SweepView,
               run: render.RunView | None):
    """Keep a finished sweep's verdict for the session; the last run's statistics redrawn where it swept that run's
    setup (and the run has a verdict to restate), else left as they are."""
    if view.payoff is None:
        return gr.skip()
    setup = sweep_key(request.prompt_text, run_settings(request, pair))
    run_history.add_sweep(session, SweepRecord(setup, view.payoff))
    if run is None or sweep_key(run.prompt_text, run.settings) != setup or not run.done or not same_text(run):
        return gr.skip()
    run.sweep = view.payoff
    return render.stats_html(run)


def on_sweep_stop(previous_status, visitor: gr.Request) -> str:
    return record_stopped(visitor, "sweep", previous_status, "the chart shows the runs made so far.")
