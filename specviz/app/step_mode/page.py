"""Step mode's page: one real round of the engine at a time, shown in stages; its layout, handlers and wiring
(its words are `words`, its run `session`). With "guess first" the visitor says how many drafts survive before
the verify is shown."""

from __future__ import annotations

from dataclasses import dataclass
from types import MethodType
from typing import Sequence

import gradio as gr

from specviz.analysis.trace import Trace
from specviz.app import plots, plots_round, render, zerogpu
from specviz.app.page_files import page_file
from specviz.app.request import Request, describe_error
from specviz.app.section_jobs import load_prompt, parse_controls
from specviz.app.step_mode import words
from specviz.app.step_mode.session import StepRun
from specviz.app.wording import count
from specviz.decoding.config import MAX_GAMMA, MAX_TREE
from specviz.decoding.events import FinishEvent, PrefillEvent, RoundEvent
from specviz.models.pairs import ModelPair

STEP_TTL_S = 1800  # a step run left alone this long is dropped with its KV caches
STEP_LANE_MAX_PX = 200  # the step lane's text scrolls past this: the stages below are the point


# --- layout -------------------------------------------------------------------------------------------------------


@dataclass
class StepSection:
    names: list[str]  # the main page's controls its Start reads, in CONTROL_NAMES order
    state: gr.State  # the visitor's StepSession
    start_button: gr.Button
    next_button: gr.Button
    status: gr.HTML
    lane: gr.HTML
    stages: gr.HTML
    chart: gr.Plot
    round_chart: gr.Plot  # the round drawn (specviz.app.plots_round), as the inspector draws it
    guess_first: gr.Checkbox  # ask the visitor how many drafts survive before showing the verify
    guess: gr.Radio  # their answer, shown only while a round waits for it

    @property
    def outputs(self) -> list[gr.Component]:
        """What Start, Next round and a guess update, in the order their handlers return."""
        return [self.state, self.status, self.lane, self.stages, self.chart, self.round_chart, self.guess,
                self.next_button]


def close_step(session) -> None:
    """The step state's delete callback: a dropped session (StepSession) frees its KV caches."""
    if session is not None:
        session.run.close()


def empty_step_chart():
    return plots.with_hint(plots.base_figure("The deciding position: q, p and the residual", "token", "probability"),
                           "the chart fills in with each round")


def build_step_mode(names: list[str]) -> StepSection:
    state = gr.State(None, time_to_live=STEP_TTL_S, delete_callback=close_step)
    with gr.Accordion("Step mode: one real round at a time", open=False, elem_id="step-mode"):
        gr.Markdown("Uses the prompt, pair, drafter, γ and sampling settings above. Each press of **Next round** "
                    "runs one real round of the engine and shows it in stages.")
        with gr.Row():
            start_button = gr.Button("Start", elem_id="step-start", variant="primary", scale=0)
            next_button = gr.Button("Next round", elem_id="step-next", interactive=False, scale=0)
            guess_first = gr.Checkbox(False, label="guess first: how many drafts will the target keep?",
                                      elem_id="step-guess-first", scale=1)
        status = gr.HTML(words.step_status_html("Press Start.", 0, False, 0), elem_id="step-status",
                         elem_classes=["specviz-status"])
        guess = gr.Radio([], label="your guess: drafts the target keeps", visible=False, elem_id="step-guess")
        lane = gr.HTML("", elem_id="step-lane", js_on_load=page_file("follow_lane.js"))
        round_chart = gr.Plot(plots_round.round_anatomy(Trace(), None), show_label=False, elem_id="chart-step-round")
        with gr.Row(equal_height=False, elem_id="step-row"):
            stages = gr.HTML(words.step_intro_html(), elem_id="step-stages", css_template=page_file("step_stage.css"),
                             js_on_load=page_file("step_keys.js"))
            chart = gr.Plot(empty_step_chart(), show_label=False, elem_id="chart-step")
    return StepSection(names, state, start_button, next_button, status, lane, stages, chart, round_chart,
                       guess_first, guess)

# --- handlers -----------------------------------------------------------------------------------------------------


@dataclass
class StepSession:
    """One visitor's step run: the engine's generator (in StepRun) and the view of its text.

    On a ZeroGPU Space each press runs in a forked worker and the session crosses by pickle, but the models and
    the engine's generator do not pickle: the session crosses without them (the run keeps its trace, the view its
    text) and, where a press must run the engine, the run resumes by replaying its rounds (StepRun.resume). In
    one process (everywhere but ZeroGPU) nothing is pickled and nothing replays; a guess never runs the engine."""

    request: Request
    pair: ModelPair
    run: StepRun
    view: render.RunView
    pending: Sequence | None = None  # a round's events, run and fed, not shown until the visitor has guessed

    @property
    def lane(self) -> render.LaneView:
        return self.view.speculative

    def feed(self, events: Sequence) -> None:
        for event in events:
            self.view.add(event, self.pair.decode)

    def advance(self) -> list:
        """One round (and the finish where it ended the run), fed to the view."""
        if not self.run.is_live:
            self.run.resume(*load_prompt(self.request))
        events = self.run.advance()
        self.feed(events)
        return events

    def __getstate__(self) -> dict:
        return {name: value for name, value in self.__dict__.items() if name != "pair"}

    def __getattr__(self, name: str):
        """The pair of a session that crossed a process: this process's copy (loaded once, kept)."""
        if name != "pair" or "request" not in self.__dict__:
            raise AttributeError(name)
        self.pair = load_prompt(self.request)[0]
        return self.pair


def start_step(request: Request) -> StepSession:
    pair, prompt_ids = load_prompt(request)
    view = render.RunView(request.prompt_text, prompt_ids, request.config.gamma, request.settings,
                          chat=pair.uses_chat(request.chat), lanes=("speculative",))
    session = StepSession(request, pair, StepRun(pair, prompt_ids, request.config), view)
    session.feed(session.run.start())
    return session


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
        stages = words.round_html(event, texts, session.lane.labels, before, config.drafter,
                                         session.run.draft_room(event), greedy=session.lane.greedy)
        chart = (plots_round.deciding_chart(event, texts, session.lane.labels, session.lane.greedy) if event.gamma
                 else empty_step_chart())
        message = f"Round {round_number} done: {count(len(event.emitted_ids), 'token')} committed, {trace.num_tokens} so far."
    elif any(isinstance(event, PrefillEvent) for event in events):
        stages = words.prefill_html(session.lane.first_text, len(session.view.prompt_ids), config.drafter)
        drawn = plots_round.round_anatomy(trace, None)  # a new run: no round drawn yet
        message = "Prefill done: press Next round."
    else:
        message = "Nothing left to do: press Start for a new run."
    finish = next((event for event in events if isinstance(event, FinishEvent)), None)
    if finish is not None:
        stages += words.finish_html(trace, finish, config.max_new_tokens)
        message = f"Done after {count(round_number, 'round')}: {count(trace.num_tokens, 'new token')}. Press Start to run again."
    status = words.step_status_html(f"{said} {message}".strip(), round_number, session.run.done,
                                           trace.num_tokens, "done" if session.run.done else "info")
    lane = session.lane.html("Speculative decoding, one round at a time",
                             render.stop_text(trace, config.max_new_tokens) or "press Next round",
                             max_height_px=STEP_LANE_MAX_PX)
    return (status, lane, stages or gr.skip(), chart, drawn, gr.Radio(visible=False, value=None),
            gr.Button(interactive=not session.run.done))


def guess_values(session: StepSession, event: RoundEvent) -> tuple:
    """StepSection.outputs' values while a round waits for the visitor's guess: its drafting only, the lane as it
    was, the verify drawn as one block still to be read, and the numbers to pick from."""
    lane = session.lane
    texts = lane.round_texts[event.round_index]
    stages = words.guess_html(event, texts, session.request.config.drafter, session.run.draft_room(event),
                                     lane.greedy)
    drawn = plots_round.round_anatomy(lane.trace, event, texts, lane.greedy, reveal=False)
    status = words.step_status_html(f"Round {event.round_index + 1} drafted: how many drafts will the target "
                                           "keep? Pick your guess.", event.round_index, False, lane.trace.num_tokens)
    choices = [str(number) for number in range(words.max_kept(event) + 1)]
    return (status, gr.skip(), stages, gr.skip(), drawn, gr.Radio(choices, value=None, visible=True),
            gr.Button(interactive=False))


def step_error(session: StepSession | None, error: BaseException) -> tuple:
    """StepSection.outputs' values for a failure: the message, and Next round usable while the run goes on."""
    message = describe_error(error)
    return (session, words.step_status_html(message, 0, False, 0, "error"), *[gr.skip()] * 5,
            gr.Button(interactive=session is not None and not session.run.done))


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
        events = session.advance()
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
        return (session, *[gr.skip()] * 5, gr.Radio(visible=False), gr.skip())
    events, session.pending = session.pending, None
    event = next(event for event in reversed(events) if isinstance(event, RoundEvent))
    return (session, *step_values(session, events, words.guess_said(str(guess), event)))


# --- wiring -------------------------------------------------------------------------------------------------------


def round_tokens(section: StepSection):
    """The most tokens one press may generate (ZeroGPU's budget): a round, γ drafts and the target's token, or a
    tree's budget of them."""
    def tokens_of(session, *values) -> int:
        named = dict(zip(section.names, values))
        return 1 + max(zerogpu.count(named.get("gamma"), 1), zerogpu.count(named.get("tree"), 0))
    return tokens_of


def wire_step_mode(section: StepSection, inputs: list, concurrency_id: str) -> None:
    """Start reads the page's controls; Next round advances the visitor's run by one round."""
    outputs = section.outputs
    section.start_button.click(zerogpu.on_gpu(MethodType(on_step_start, section), outputs, section.status,
                                              round_tokens(section)),
                               [section.state, *inputs], outputs, api_visibility="private",
                               concurrency_id=concurrency_id)
    # the session knows its γ; a round of the largest γ the page allows bounds it
    next_round = zerogpu.on_gpu(on_step_next, outputs, section.status, lambda session, guess_first: 1 + max(MAX_GAMMA, MAX_TREE))
    section.next_button.click(next_round, [section.state, section.guess_first], outputs,
                              api_visibility="private", concurrency_id=concurrency_id, show_progress="hidden")
    # a guess shows the round already run: no model work, so no queue
    section.guess.input(on_step_guess, [section.state, section.guess], outputs, api_visibility="private", queue=False,
                        show_progress="hidden")
