"""The page's teaching sections: step mode, the exactness lab, the theory explorer and the γ sweep.

Layout and wiring only: the logic is in specviz.app.lab, the words in specviz.app.lessons and the
figures in specviz.app.plots. `build_sections` runs inside ui.build_app's Blocks and reads the
main page's controls, so every section works on the settings the user already chose. Jobs that
run the models go through the queue in the page's one model concurrency group, and the long
ones (lab, sweep) can be stopped and respect the host's time limit per run.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import gradio as gr

from specviz.app import lessons, plots, render
from specviz.app.lab import exactness, explorer, step_mode, sweep
from specviz.catalogue import DEFAULT_DRAFTER
from specviz.decoding.engine import MAX_GAMMA
from specviz.decoding.events import FinishEvent, PrefillEvent, RoundEvent
from specviz.app.live import record_stop, stop_presses
from specviz.models.pairs import ModelPair
from specviz.app.render.lanes import FOLLOW_LANE_JS
from specviz.app.request import POLICY, Request, describe_error, whole_number
from specviz.analysis.trace import compare
from specviz.app.wording import count

# The main page's controls this module reads, in Request.parse's order; missing ones take its defaults.
CONTROL_NAMES = ("prompt", "pair", "target_id", "draft_id", "gamma", "temperature", "top_k", "top_p",
                 "max_new_tokens", "seed", "chat", "drafter", "ngram", "precision", "draft_confidence",
                 "gamma_schedule")
PARSE_NAMES = {"prompt": "prompt", "pair": "pair_name"}  # Request.parse's keyword where it differs
STEP_TTL_S = 1800  # a step run left alone this long is dropped with its KV caches
STEP_LANE_MAX_PX = 200  # the step lane's text scrolls past this: the stages below are the point
REDRAW_S = 1.0  # the lab and the sweep redraw at most this often
# A setting where the wrong rule shows within a few hundred draws: the tiny-code pair's 2-layer draft
# disagrees with its 8-layer target right after this prompt, and top-k 10 keeps the outcomes few.
LAB_EXAMPLE = {"pair": "tiny-code", "prompt": "        if not", "chat": False, "temperature": 1.0, "top_k": 10,
               "top_p": 1.0, "drafter": DEFAULT_DRAFTER}
LAB_EXAMPLE_DRAWS = 500
NEXT_KEY_JS = """
if (!window.specvizStepKeys) {
  window.specvizStepKeys = true;
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'n' && event.key !== 'N') return;
    if (event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
    if (event.target.closest('input, textarea, select, [contenteditable="true"]')) return;
    const next = document.querySelector('#step-next');
    if (next && !next.disabled && next.offsetParent !== null) { event.preventDefault(); next.click(); }
  });
}
const next = document.querySelector('#step-next');
if (next) { next.setAttribute('aria-keyshortcuts', 'N'); next.title = 'Next round (N)'; }
"""
STAGE_CSS = """
.step-stage { animation: specviz-stage-in 0.35s ease-out both; }
@keyframes specviz-stage-in { from { opacity: 0; transform: translateY(4px); } to { opacity: 1; transform: none; } }
@media (prefers-reduced-motion: reduce) { .step-stage { animation: none; } }
"""


def parse_controls(names: Sequence[str], values: Sequence) -> Request:
    """The main page's values as a Request (ValueError with the user's message if one is bad)."""
    return Request.parse(**{PARSE_NAMES.get(name, name): value for name, value in zip(names, values)})


def load_prompt(request: Request) -> tuple[ModelPair, list[int]]:
    pair = request.load()
    return pair, pair.encode(request.prompt_text, request.chat)


def over_time(started: float) -> bool:
    return bool(POLICY.max_run_s) and time.perf_counter() - started > POLICY.max_run_s


def time_limit_note(what: str) -> str:
    return f"this server stops {what} after {POLICY.max_run_s} s so other visitors get a turn; the results so far are shown"


def on_stop_pressed(section: str, what: str) -> Callable:
    """The Stop handler of a long section: record the press, then add the stopped line to its status."""
    def on_stop(previous_status, visitor: gr.Request):
        record_stop(visitor.session_hash if visitor else None, section)
        return lessons.stopped_html(previous_status or "", what)
    return on_stop


# --- step mode ----------------------------------------------------------------------------------------------


@dataclass
class StepSession:
    """One visitor's step run: the engine's generator (in step_mode.StepRun) and the view of its text."""

    request: Request
    pair: ModelPair
    run: step_mode.StepRun
    view: render.RunView

    @property
    def lane(self) -> render.LaneView:
        return self.view.speculative

    def feed(self, events: Sequence) -> None:
        for event in events:
            self.view.add(event, self.pair.decode)


def close_step(session: StepSession | None) -> None:
    if session is not None:
        session.run.close()


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


def empty_step_chart():
    return plots.with_hint(plots.base_figure("The deciding position: q, p and the residual", "token", "probability"),
                           "the chart fills in with each round")


def step_values(session: StepSession, events: Sequence) -> tuple:
    """(status, lane, stages, chart, next button) after the events of one press."""
    trace, config = session.lane.trace, session.request.config
    rounds = [event for event in events if isinstance(event, RoundEvent)]
    round_number = len(trace.rounds)
    stages, chart = "", gr.skip()
    if rounds:
        event = rounds[-1]
        texts = session.lane.round_texts[event.round_index]
        before = trace.num_tokens - len(event.emitted_ids)
        stages = lessons.round_html(event, texts, session.lane.labels, before, config.drafter, config.gamma)
        chart = plots.decision_distributions(event, session.lane.labels) if event.gamma else empty_step_chart()
        message = f"Round {round_number} done: {count(len(event.emitted_ids), 'token')} committed, {trace.num_tokens} so far."
    elif any(isinstance(event, PrefillEvent) for event in events):
        stages = lessons.prefill_html(session.lane.first_text, len(session.view.prompt_ids), config.drafter)
        message = "Prefill done: press Next round."
    else:
        message = "Nothing left to do: press Start for a new run."
    finish = next((event for event in events if isinstance(event, FinishEvent)), None)
    if finish is not None:
        stages += lessons.finish_html(trace, finish, config.max_new_tokens)
        message = f"Done after {count(round_number, 'round')}: {count(trace.num_tokens, 'new token')}. Press Start to run again."
    status = lessons.step_status_html(message, round_number, session.run.done, trace.num_tokens,
                                      "done" if session.run.done else "info")
    return status, step_lane_html(session), stages or gr.skip(), chart, gr.Button(interactive=not session.run.done)


def build_step_mode(names: Sequence[str], inputs: list, concurrency_id: str, on_gpu: Callable) -> None:
    step_state = gr.State(None, time_to_live=STEP_TTL_S, delete_callback=close_step)
    with gr.Accordion("Step mode: one real round at a time", open=False, elem_id="step-mode"):
        gr.Markdown("Uses the prompt, pair, drafter, γ and sampling settings above. Each press of **Next round** "
                    "runs one real round of the engine and shows it in stages.")
        with gr.Row():
            start_button = gr.Button("Start", elem_id="step-start", variant="primary", scale=0)
            next_button = gr.Button("Next round", elem_id="step-next", interactive=False, scale=0)
        status = gr.HTML(lessons.step_status_html("Press Start.", 0, False, 0), elem_id="step-status",
                         elem_classes=["specviz-status"])
        lane = gr.HTML("", elem_id="step-lane", js_on_load=FOLLOW_LANE_JS)
        with gr.Row(equal_height=False):
            stages = gr.HTML(lessons.step_intro_html(), elem_id="step-stages", css_template=STAGE_CSS,
                             js_on_load=NEXT_KEY_JS)
            chart = gr.Plot(empty_step_chart(), show_label=False, elem_id="chart-step")

    def show_error(session, error: BaseException) -> tuple:
        message = describe_error(error)
        return (session, lessons.step_status_html(message, 0, False, 0, "error"), gr.skip(), gr.skip(), gr.skip(),
                gr.Button(interactive=session is not None and not session.run.done))

    @on_gpu
    def on_start(session, *values):
        close_step(session)
        try:
            session = start_step(parse_controls(names, values))
        except Exception as error:  # noqa: BLE001 — every failure becomes a message in the page
            return show_error(None, error)
        return (session, *step_values(session, session.run.trace.events()))

    @on_gpu
    def on_next(session):
        if session is None:
            return show_error(None, ValueError("press Start first: it reads the prompt with the settings above"))
        try:
            events = session.run.advance()
            session.feed(events)
        except Exception as error:  # noqa: BLE001
            return show_error(session, error)
        return (session, *step_values(session, events))

    outputs = [step_state, status, lane, stages, chart, next_button]
    start_button.click(on_start, [step_state, *inputs], outputs, api_visibility="private", concurrency_id=concurrency_id)
    next_button.click(on_next, [step_state], outputs, api_visibility="private", concurrency_id=concurrency_id,
                      show_progress="hidden")


# --- exactness lab ---------------------------------------------------------------------------------------------


def bin_labels(bins: exactness.Bins, pair: ModelPair) -> list[str]:
    """"'a' · 'b'" per outcome; runs of spaces counted (␣×8), or indented code makes endless labels."""
    texts = {token_id: compact_spaces(pair.decode([token_id])) for outcome in bins.outcomes for token_id in outcome}
    labels = [f"{plots.label_of(first, texts)} · {plots.label_of(second, texts)}" for first, second in bins.outcomes]
    return labels + (["other"] if bins.has_other else [])


def compact_spaces(text: str) -> str:
    return re.sub(r" {3,}", lambda match: f"␣×{len(match.group())}", text)


def lab_values(tally: exactness.LabTally, labels: list[str], wrong_rule: bool, started: float, note: str = "") -> tuple:
    done = tally.num_draws("speculative")
    p_values = {lane: tally.p_value(lane) for lane in exactness.LANES} if done else {}
    status = lessons.lab_status_html(done, tally.num_planned, p_values, tally.bins.num_bins, wrong_rule,
                                     time.perf_counter() - started, note)
    return status, plots.exactness_histogram(tally, labels, wrong_rule)


def empty_lab_chart():
    return plots.with_hint(plots.base_figure("First two new tokens", "outcome", "share of draws"), "press Run the lab")


def build_lab(names: Sequence[str], inputs: list, controls: dict, concurrency_id: str, on_gpu: Callable) -> None:
    with gr.Accordion("Exactness lab: is the output really the target's?", open=False, elem_id="exactness-lab"):
        gr.Markdown(
            "Draws N short runs from the target alone and N from speculative decoding, with the prompt and sampling "
            "settings above, and compares the first two new tokens of each lane with the target's exact "
            "distribution, computed from its logits. Token 1 is the target's own sample in both lanes; token 2 is "
            "the first token a speculative round decides. Switch on the **wrong rule** (resample from p instead of "
            "norm(max(0, p − q))) and watch the speculative histogram drift and its p-value collapse."
        )
        with gr.Row():
            num_draws = gr.Slider(exactness.MIN_DRAWS, exactness.MAX_DRAWS, value=LAB_EXAMPLE_DRAWS, step=50,
                                  label="N: draws per lane", elem_id="lab-n")
            wrong_rule = gr.Checkbox(value=False, label="WRONG rule: resample from p at a rejection", elem_id="lab-wrong")
        with gr.Row():
            example_button = gr.Button("Example: a setting where the wrong rule is caught", elem_id="lab-example",
                                       size="sm", scale=0)
            run_button = gr.Button("Run the lab", variant="primary", elem_id="lab-run", scale=0)
            stop_button = gr.Button("Stop", variant="stop", elem_id="lab-stop", scale=0)
        status = gr.HTML(lessons.message_html("Press Run the lab."), elem_id="lab-status", elem_classes=["specviz-status"])
        chart = gr.Plot(empty_lab_chart(), show_label=False, elem_id="chart-exactness")

    @on_gpu
    def on_run(visitor: gr.Request, num_draws_value, wrong_value, *values) -> Iterator:
        started = time.perf_counter()
        session = visitor.session_hash if visitor else None
        wrong = bool(wrong_value)
        try:
            request = parse_controls(names, values)
            planned = whole_number(num_draws_value, "N (draws per lane)", exactness.MIN_DRAWS, exactness.MAX_DRAWS)
            exactness.check_lab(request.config, planned)
            yield lessons.message_html(f"Loading the {request.settings['pair']} pair…"), gr.skip()
            pair, prompt_ids = load_prompt(request)
            yield lessons.message_html("Computing the target's exact distribution…"), gr.skip()
            labels, last_drawn, tally = None, 0.0, None
            for tally in exactness.run_lab(pair, prompt_ids, request.config, planned, wrong):
                if stop_presses.since(session, "lab", started):
                    return
                labels = labels or bin_labels(tally.bins, pair)
                if over_time(started):
                    yield lab_values(tally, labels, wrong, started, time_limit_note("the lab"))
                    return
                if time.perf_counter() - last_drawn >= REDRAW_S:
                    yield lab_values(tally, labels, wrong, started)
                    last_drawn = time.perf_counter()
            yield lab_values(tally, labels, wrong, started)
        except Exception as error:  # noqa: BLE001 — every failure becomes a message in the page
            yield lessons.message_html(describe_error(error), "error"), gr.skip()

    def on_example():
        """Set the example's controls, say which, and clear results that were for other settings."""
        example = {name: LAB_EXAMPLE[name] for name in example_names}
        return (*example.values(), LAB_EXAMPLE_DRAWS, lessons.lab_example_html(example, LAB_EXAMPLE_DRAWS),
                empty_lab_chart())

    example_names = [name for name in LAB_EXAMPLE if name in controls]
    lab_event = run_button.click(on_run, [num_draws, wrong_rule, *inputs], [status, chart], api_visibility="private",
                                 concurrency_id=concurrency_id, show_progress="hidden")
    stop_button.click(on_stop_pressed("lab", "the chart and the p-values are for the draws made so far."), [status],
                      [status], cancels=[lab_event], queue=False, api_visibility="private")
    example_button.click(on_example, None, [controls[name] for name in example_names] + [num_draws, status, chart],
                         queue=False, api_visibility="private")


# --- theory explorer ---------------------------------------------------------------------------------------------


def measured_of(run) -> tuple:
    """(comparison, γ) of the page's last run, or (None, None) before one with both lanes."""
    if run is None or not (run.baseline.trace.rounds and run.speculative.trace.rounds):
        return None, None
    return compare(run.baseline.trace, run.speculative.trace, run.gamma), run.gamma


def theory_values(alpha, cost_ratio, verify_cost, run) -> tuple:
    comparison, gamma = measured_of(run)
    view = explorer.theory_view(float(alpha), float(cost_ratio), float(verify_cost), gamma,
                           comparison.speedup if comparison else None)
    note = lessons.theory_note_html(view.alpha, view.cost_ratio, view.verify_cost, comparison, gamma, view.paying_alpha)
    return plots.theory_explorer(view), note


def build_theory(run_state: gr.State) -> None:
    initial = dict(alpha=0.7, cost_ratio=0.1, verify_cost=1.5)
    with gr.Accordion("Theory explorer: when does speculation pay?", open=False, elem_id="theory-explorer"):
        gr.Markdown(
            "Leviathan et al.'s expected speedup, (1 − α^(γ+1)) / ((1 − α)(γc + v)), against γ. α: how often the "
            "target accepts a draft; c: a draft step's time over a target step's; v: a (γ+1)-token verify's time "
            "over a target step's (the paper takes v = 1). After a run, the sliders hold its measured values."
        )
        with gr.Row():
            alpha = gr.Slider(0, 1, value=initial["alpha"], step=0.01, label="α: acceptance rate", elem_id="theory-alpha")
            cost_ratio = gr.Slider(0, 2, value=initial["cost_ratio"], step=0.01, label="c: draft step / target step",
                                   elem_id="theory-c")
            verify_cost = gr.Slider(0.5, 4, value=initial["verify_cost"], step=0.05,
                                    label="v: verify / target step (1 in the paper)", elem_id="theory-v")
        figure, note_html = theory_values(initial["alpha"], initial["cost_ratio"], initial["verify_cost"], None)
        chart = gr.Plot(figure, show_label=False, elem_id="chart-theory")
        note = gr.HTML(note_html, elem_id="theory-note")
        from_run = gr.Button("Use the last run's α̂, c and v", elem_id="theory-from-run", scale=0)

    def on_run_change(run):
        comparison, _ = measured_of(run)
        if comparison is None:
            return gr.skip(), gr.skip(), gr.skip()
        return (round(comparison.acceptance_rate, 2), round(min(comparison.cost_ratio, 2.0), 2),
                round(min(max(comparison.verify_cost, 0.5), 4.0), 2))

    sliders = [alpha, cost_ratio, verify_cost]
    for slider in sliders:
        slider.change(theory_values, [*sliders, run_state], [chart, note], api_visibility="private", queue=False,
                      show_progress="hidden", trigger_mode="always_last")
    run_state.change(on_run_change, [run_state], sliders, api_visibility="private", queue=False, show_progress="hidden")
    from_run.click(on_run_change, [run_state], sliders, api_visibility="private", queue=False, show_progress="hidden")


# --- γ sweep -------------------------------------------------------------------------------------------------------


def build_sweep(names: Sequence[str], inputs: list, concurrency_id: str, on_gpu: Callable) -> None:
    with gr.Accordion("γ sweep: which γ to pick", open=False, elem_id="gamma-sweep"):
        gr.Markdown(
            "Times the target alone and speculative decoding at every γ in the range, with the prompt and settings "
            "above, repeated (each repeat with its own seed); plots the median speedup with its min–max spread over "
            "the theory's curves, and names the γ with the best median."
        )
        with gr.Row():
            smallest = gr.Slider(1, MAX_GAMMA, value=1, step=1, label="smallest γ", elem_id="sweep-from")
            largest = gr.Slider(1, MAX_GAMMA, value=6, step=1, label="largest γ", elem_id="sweep-to")
            repeats = gr.Slider(1, sweep.MAX_SWEEP_REPEATS, value=2, step=1, label="repeats", elem_id="sweep-repeats")
        with gr.Row():
            run_button = gr.Button("Run sweep", variant="primary", elem_id="sweep-run", scale=0)
            stop_button = gr.Button("Stop", variant="stop", elem_id="sweep-stop", scale=0)
        status = gr.HTML(lessons.message_html("Press Run sweep."), elem_id="sweep-status", elem_classes=["specviz-status"])
        chart = gr.Plot(plots.gamma_sweep(sweep.sweep_view([])), show_label=False, elem_id="chart-sweep")

    @on_gpu
    def on_run(visitor: gr.Request, smallest_value, largest_value, repeats_value, *values) -> Iterator:
        started = time.perf_counter()
        session = visitor.session_hash if visitor else None
        try:
            request = parse_controls(names, values)
            gammas = sweep.sweep_gamma_range(whole_number(smallest_value, "smallest γ", 1, MAX_GAMMA),
                                           whole_number(largest_value, "largest γ", 1, MAX_GAMMA))
            config = sweep.sweep_config(request.config, gammas, whole_number(repeats_value, "repeats"))
            yield lessons.message_html(f"Loading the {request.settings['pair']} pair…"), gr.skip()
            pair, prompt_ids = load_prompt(request)
            temperature = request.config.temperature
            last_drawn = 0.0
            for progress in sweep.sweep_gammas(pair, prompt_ids, config):
                if stop_presses.since(session, "sweep", started):
                    return
                finished = progress.num_done == progress.num_total
                late = over_time(started)
                if finished or late or time.perf_counter() - last_drawn >= REDRAW_S:
                    view = sweep.sweep_view(progress.results(temperature))
                    note = time_limit_note("the sweep") if late and not finished else ""
                    yield (lessons.sweep_status_html(progress.num_done, progress.num_total,
                                                     time.perf_counter() - started, view, note),
                           plots.gamma_sweep(view, max(gammas)))
                    last_drawn = time.perf_counter()
                if late:
                    return
        except Exception as error:  # noqa: BLE001 — every failure becomes a message in the page
            yield lessons.message_html(describe_error(error), "error"), gr.skip()

    sweep_event = run_button.click(on_run, [smallest, largest, repeats, *inputs], [status, chart],
                                   api_visibility="private", concurrency_id=concurrency_id, show_progress="hidden")
    stop_button.click(on_stop_pressed("sweep", "the chart shows the runs made so far."), [status], [status],
                      cancels=[sweep_event], queue=False, api_visibility="private")


# --- the sections ----------------------------------------------------------------------------------------------------


def build_sections(controls: dict[str, gr.Component], run_state: gr.State, concurrency_id: str = "model",
                   on_gpu: Callable = lambda fn: fn) -> None:
    """Add the four sections to the Blocks being built. `controls` maps names in CONTROL_NAMES
    to the main page's inputs; `concurrency_id` is the page's model queue; `on_gpu` wraps model
    handlers (ZeroGPU on a Space)."""
    names = [name for name in CONTROL_NAMES if name in controls]
    inputs = [controls[name] for name in names]
    build_step_mode(names, inputs, concurrency_id, on_gpu)
    build_lab(names, inputs, controls, concurrency_id, on_gpu)
    build_theory(run_state)
    build_sweep(names, inputs, concurrency_id, on_gpu)
