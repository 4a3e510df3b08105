"""The teaching sections' layout: step mode, the exactness lab, the theory explorer and the γ sweep,
each a small builder that adds its components to the Blocks being built and returns them in a
dataclass the handlers (specviz.app.teach_handlers) read or write.

Layout only, and the values a section shows before any handler ran: no handler is wired here
(specviz.app.teach wires them).
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from specviz.app import lessons, plots, plots_round, plots_teach, render, step_lessons
from specviz.analysis.payoff import TIE_RULE
from specviz.app.lab import exactness, explorer, sweep
from specviz.app.page_files import page_file
from specviz.app.render.verdict import no_verdict_text, run_payoff
from specviz.analysis.trace import Comparison, Trace, compare
from specviz.app.settings import NAMES
from specviz.catalogue import DEFAULT_DRAFTER
from specviz.decoding.config import MAX_GAMMA

# The main page's controls the sections read, by Request.parse's names: every setting but the reference lane,
# which no section runs.
CONTROL_NAMES = tuple(name for name in NAMES if name != "reference")
STEP_TTL_S = 1800  # a step run left alone this long is dropped with its KV caches
# A setting where the wrong rule shows within a few hundred draws: the tiny-code pair's 2-layer draft
# disagrees with its 8-layer target right after this prompt, and top-k 10 keeps the outcomes few.
LAB_EXAMPLE = {"pair": "tiny-code", "prompt": "        if not", "chat": False, "temperature": 1.0, "top_k": 10,
               "top_p": 1.0, "drafter": DEFAULT_DRAFTER}
LAB_EXAMPLE_DRAWS = 500
THEORY_START = {"alpha": 0.7, "cost_ratio": 0.1, "verify_cost": 1.5}  # the explorer's sliders before any run


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


@dataclass
class LabSection:
    names: list[str]
    examples: dict[str, gr.Component]  # the main page's controls the example sets, in LAB_EXAMPLE order
    num_draws: gr.Slider
    wrong_rule: gr.Checkbox
    example_button: gr.Button
    run_button: gr.Button
    stop_button: gr.Button
    status: gr.HTML
    chart: gr.Plot


@dataclass
class TheorySection:
    sliders: list[gr.Slider]  # α, c, v: theory_values' arguments, in its order
    chart: gr.Plot
    note: gr.HTML
    from_run: gr.Button


@dataclass
class SweepSection:
    names: list[str]
    smallest: gr.Slider
    largest: gr.Slider
    repeats: gr.Slider
    run_button: gr.Button
    stop_button: gr.Button
    status: gr.HTML
    chart: gr.Plot
    confidence_chart: gr.Plot  # easy and hard tokens over the sweep's runs (specviz.app.plots_confidence)
    confidence_note: gr.HTML  # the sentence under it

    @property
    def outputs(self) -> list[gr.Component]:
        return [self.status, self.chart, self.confidence_chart, self.confidence_note]


# --- what the sections show before a handler ran ------------------------------------------------------


def close_step(session) -> None:
    """The step state's delete callback: a dropped session (teach_handlers.StepSession) frees its KV caches."""
    if session is not None:
        session.close()


def empty_step_chart():
    return plots.with_hint(plots.base_figure("The deciding position: q, p and the residual", "token", "probability"),
                           "the chart fills in with each round")


def empty_lab_chart():
    return plots.with_hint(plots.base_figure("First two new tokens", "outcome", "share of draws"), "press Run the lab")


def measured_of(run) -> tuple[Comparison | None, int | None]:
    """(comparison, γ) of the page's last run, or (None, None) before one with both lanes."""
    if run is None or not (run.baseline.trace.rounds and run.speculative.trace.rounds):
        return None, None
    return compare(run.baseline.trace, run.speculative.trace, run.gamma), run.gamma


def theory_values(alpha, cost_ratio, verify_cost, run) -> tuple:
    """The explorer's chart and note for the sliders' values, with the last run's point if there is one."""
    comparison, gamma = measured_of(run)
    view = explorer.theory_view(float(alpha), float(cost_ratio), float(verify_cost), gamma,
                                comparison.speedup if comparison else None)
    # the run's one verdict, as its stats give it, once both lanes are done
    verdict = (run_payoff(run, comparison) or no_verdict_text(run)) if comparison and run.done else None
    note = lessons.theory_note_html(view.alpha, view.cost_ratio, view.verify_cost, comparison, gamma, view.paying_alpha,
                                    verdict)
    return plots_teach.theory_explorer(view), note


# --- the sections ---------------------------------------------------------------------------------------


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
        status = gr.HTML(step_lessons.step_status_html("Press Start.", 0, False, 0), elem_id="step-status",
                         elem_classes=["specviz-status"])
        guess = gr.Radio([], label="your guess: drafts the target keeps", visible=False, elem_id="step-guess")
        lane = gr.HTML("", elem_id="step-lane", js_on_load=page_file("follow_lane.js"))
        round_chart = gr.Plot(plots_round.round_anatomy(Trace(), None), show_label=False, elem_id="chart-step-round")
        with gr.Row(equal_height=False, elem_id="step-row"):
            stages = gr.HTML(step_lessons.step_intro_html(), elem_id="step-stages", css_template=page_file("step_stage.css"),
                             js_on_load=page_file("step_keys.js"))
            chart = gr.Plot(empty_step_chart(), show_label=False, elem_id="chart-step")
    return StepSection(names, state, start_button, next_button, status, lane, stages, chart, round_chart,
                       guess_first, guess)


def build_lab(names: list[str], controls: dict[str, gr.Component]) -> LabSection:
    with gr.Accordion("Exactness lab: is the output really the target's?", open=False, elem_id="exactness-lab"):
        gr.Markdown(
            "Draws N short runs from the target alone and N from speculative decoding, with the prompt and sampling "
            "settings above, and compares the first two new tokens of each lane with the target's exact "
            "distribution, computed from its logits. Token 1 is the target's own sample in both lanes; token 2 is "
            "the first token a speculative round decides. Switch on the **wrong rule** (resample from p instead of "
            "norm(max(0, p − q)); with a draft tree, Medusa's typical acceptance: keep the first guess the target "
            "finds plausible, no coin) and watch the speculative histogram drift and its p-value collapse."
        )
        with gr.Row():
            num_draws = gr.Slider(exactness.MIN_DRAWS, exactness.MAX_DRAWS, value=LAB_EXAMPLE_DRAWS, step=50,
                                  label="N: draws per lane", elem_id="lab-n")
            wrong_rule = gr.Checkbox(value=False, label="WRONG rule: resample from p at a rejection (with a draft "
                                     "tree: Medusa's typical acceptance)", elem_id="lab-wrong")
        with gr.Row():
            example_button = gr.Button("Example: a setting where the wrong rule is caught", elem_id="lab-example",
                                       size="sm", scale=0)
            run_button = gr.Button("Run the lab", variant="primary", elem_id="lab-run", scale=0)
            stop_button = gr.Button("Stop", variant="stop", elem_id="lab-stop", scale=0)
        status = gr.HTML(render.status_html("Press Run the lab."), elem_id="lab-status", elem_classes=["specviz-status"])
        chart = gr.Plot(empty_lab_chart(), show_label=False, elem_id="chart-exactness")
    examples = {name: controls[name] for name in LAB_EXAMPLE if name in controls}
    return LabSection(names, examples, num_draws, wrong_rule, example_button, run_button, stop_button, status, chart)


def build_theory() -> TheorySection:
    start = THEORY_START
    with gr.Accordion("Theory explorer: when does speculation pay?", open=False, elem_id="theory-explorer"):
        gr.Markdown(
            "Leviathan et al.'s expected speedup, (1 − α^(γ+1)) / ((1 − α)(γc + v)), against γ. α: how often the "
            "target accepts a draft; c: a draft step's time over a target step's; v: a (γ+1)-token verify's time "
            "over a target step's (the paper takes v = 1). After a run, the sliders hold its measured values."
        )
        with gr.Row():
            alpha = gr.Slider(0, 1, value=start["alpha"], step=0.01, label="α: acceptance rate", elem_id="theory-alpha")
            cost_ratio = gr.Slider(0, 2, value=start["cost_ratio"], step=0.01, label="c: draft step / target step",
                                   elem_id="theory-c")
            verify_cost = gr.Slider(0.5, 4, value=start["verify_cost"], step=0.01,  # a run's v to 2 decimals
                                    label="v: verify / target step (1 in the paper)", elem_id="theory-v")
        figure, note_html = theory_values(start["alpha"], start["cost_ratio"], start["verify_cost"], None)
        chart = gr.Plot(figure, show_label=False, elem_id="chart-theory")
        note = gr.HTML(note_html, elem_id="theory-note")
        from_run = gr.Button("Use the last run's α̂, c and v", elem_id="theory-from-run", scale=0)
    return TheorySection([alpha, cost_ratio, verify_cost], chart, note, from_run)


def build_sweep(names: list[str]) -> SweepSection:
    with gr.Accordion("γ sweep: which γ to pick", open=False, elem_id="gamma-sweep"):
        gr.Markdown(
            "Times the target alone and speculative decoding at every γ in the range, with the prompt and settings "
            "above, repeated (each repeat with its own seed); plots the median speedup with its min–max spread over "
            f"the theory's curves, and names one γ: {TIE_RULE}, which drafts less for the same speed. "
            "When the page drafts a tree (a tree budget above 0), every γ is timed both as a chain and as that "
            "tree, and the same rule picks between them. Below it, easy and hard tokens over all the sweep's runs."
        )
        with gr.Row():
            smallest = gr.Slider(1, MAX_GAMMA, value=1, step=1, label="smallest γ", elem_id="sweep-from")
            largest = gr.Slider(1, MAX_GAMMA, value=6, step=1, label="largest γ", elem_id="sweep-to")
            repeats = gr.Slider(1, sweep.MAX_SWEEP_REPEATS, value=2, step=1, label="repeats", elem_id="sweep-repeats")
        with gr.Row():
            run_button = gr.Button("Run sweep", variant="primary", elem_id="sweep-run", scale=0)
            stop_button = gr.Button("Stop", variant="stop", elem_id="sweep-stop", scale=0)
        status = gr.HTML(render.status_html("Press Run sweep."), elem_id="sweep-status", elem_classes=["specviz-status"])
        chart = gr.Plot(plots_teach.gamma_sweep(sweep.sweep_view([])), show_label=False, elem_id="chart-sweep")
        confidence_chart = gr.Plot(plots_teach.sweep_confidence([], {}), show_label=False, elem_id="chart-sweep-confidence")
        confidence_note = gr.HTML("", elem_id="sweep-confidence-note")
    return SweepSection(names, smallest, largest, repeats, run_button, stop_button, status, chart, confidence_chart,
                        confidence_note)
