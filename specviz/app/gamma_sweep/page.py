"""The γ sweep's page: the page's setup timed at every γ of a range, with its one recommended γ, its chart over
the theory's curves and easy and hard tokens over its runs; its layout, handlers and wiring (the timed runs and
what the chart draws: `measure`)."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from types import MethodType
from typing import Iterator, Mapping, Sequence

import gradio as gr
import plotly.graph_objects as go

from specviz.analysis.confidence import JudgedDraft
from specviz.analysis.payoff import TIE_RULE, GammaAnswer, sweep_answer
from specviz.app import plots_confidence, render, zerogpu
from specviz.app.history import SessionRuns, SweepRecord, sweep_key
from specviz.app.gamma_sweep import measure
from specviz.app.gamma_sweep.measure import SweepView
from specviz.app.live import run_settings
from specviz.app.palette import COLORS, INK
from specviz.app.plots import SECTION_HEIGHT, base_figure, legend_below, two_line_title, with_hint
from specviz.app.plots_confidence import acceptance_by_confidence
from specviz.app.render.tokens import escape_text
from specviz.app.render.verdict import same_text, spread_for, verdict_html
from specviz.app.settings import SETTING
from specviz.app.request import Request, describe_error, whole_number
from specviz.app.section_jobs import (
    REDRAW_S, going, load_prompt, on_section_queued, over_time, parse_controls, progress_html, record_stopped,
    still_going, time_limit_note, until_stopped,
)
from specviz.app.ui_handlers import session_of
from specviz.decoding.config import MAX_GAMMA
from specviz.models.interrupt import RunStopped
from specviz.models.pairs import ModelPair

# Each tree budget's measured points: its own colour and marker, nudged right of the chain's so their min–max
# whiskers at one γ stay apart (the hover still says the γ).
TREE_STYLES = ((COLORS["draft"], "diamond"), (COLORS["accepted"], "square"), (COLORS["resample"], "triangle-up"))
TREE_NUDGE = 0.18


# --- layout -------------------------------------------------------------------------------------------------------


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
            repeats = gr.Slider(1, measure.MAX_SWEEP_REPEATS, value=2, step=1, label="repeats", elem_id="sweep-repeats")
        with gr.Row():
            run_button = gr.Button("Run sweep", variant="primary", elem_id="sweep-run", scale=0)
            stop_button = gr.Button("Stop", variant="stop", elem_id="sweep-stop", scale=0)
        status = gr.HTML(render.status_html("Press Run sweep."), elem_id="sweep-status", elem_classes=["specviz-status"])
        chart = gr.Plot(gamma_sweep(measure.sweep_view([])), show_label=False, elem_id="chart-sweep")
        confidence_chart = gr.Plot(sweep_confidence([], {}), show_label=False, elem_id="chart-sweep-confidence")
        confidence_note = gr.HTML("", elem_id="sweep-confidence-note")
    return SweepSection(names, smallest, largest, repeats, run_button, stop_button, status, chart, confidence_chart,
                        confidence_note)


# --- handlers -----------------------------------------------------------------------------------------------------

RESTATED = 2  # the run and its statistics, restated with the sweep's answer
KEPT = RESTATED + 1  # keep_sweep's outputs: those, then the visitor's runs so far (SessionRuns)
AFTER_STATUS = 3 + KEPT  # the sweep's outputs after its status: its chart, confidence chart and note, then those


def not_restated() -> tuple:
    """keep_sweep's run and statistics where the sweep restates nothing there."""
    return (gr.skip(),) * RESTATED


def not_kept() -> tuple:
    """keep_sweep's outputs while the sweep runs: nothing kept yet."""
    return (gr.skip(),) * KEPT


def on_sweep_run(section: SweepSection, visitor: gr.Request, smallest_value, largest_value, repeats_value,
                 run: render.RunView | None, session_runs: SessionRuns | None, *values) -> Iterator[tuple]:
    """Time the page's setup at each γ; a sweep that finished is kept for this visitor (app.history), so the
    statistics of a run of its setup, the last one's at once, quote its recommended γ."""
    started = time.perf_counter()
    session = session_of(visitor)
    try:
        request = parse_controls(section.names, values)
        gammas = measure.sweep_gamma_range(whole_number(smallest_value, "smallest γ", 1, MAX_GAMMA),
                                         whole_number(largest_value, "largest γ", 1, MAX_GAMMA))
        config = measure.sweep_config(request.config, gammas, whole_number(repeats_value, "repeats"))
        yield going(render.status_html(f"Loading the {request.settings['pair']} pair…")), *[gr.skip()] * AFTER_STATUS
        pair, prompt_ids = load_prompt(request)
        temperature = request.config.temperature
        spread = spread_for(run_settings(request, pair))  # a cell of one repeat is judged as one run is, here
        last_drawn = 0.0
        progresses = measure.sweep_gammas(pair, prompt_ids, config)
        for progress in until_stopped(progresses, pair, session, "sweep", started):
            finished = progress.num_done == progress.num_total
            late = over_time(started)
            if finished or late or time.perf_counter() - last_drawn >= REDRAW_S:
                view = measure.sweep_view(progress.results(temperature), spread=spread,
                                        most_drafted=progress.most_drafted())
                note = time_limit_note("the sweep") if late and not finished else ""
                drafts = progress.judged_drafts()
                kept = keep_sweep(session_runs or SessionRuns(), request, pair, view, run) if finished else not_kept()
                values = (sweep_status_html(progress.num_done, progress.num_total,
                                            time.perf_counter() - started, view, note),
                          gamma_sweep(view, max(gammas)), sweep_confidence(drafts, progress.labels),
                          plots_confidence.confidence_note_html(drafts, "the sweep's runs"), *kept)
                yield values if finished or late else still_going(values)
                last_drawn = time.perf_counter()
            if late:
                return
    except RunStopped:  # Stop: the job ends there, the stopped line stays
        return
    except Exception as error:  # noqa: BLE001 — every failure becomes a message in the page
        yield render.status_html(describe_error(error), "error"), *[gr.skip()] * AFTER_STATUS


def keep_sweep(session_runs: SessionRuns, request: Request, pair: ModelPair, view: measure.SweepView,
               run: render.RunView | None) -> tuple:
    """Keep a finished sweep's verdict in the visitor's runs so far; where it swept the last run's setup and the run
    has a verdict to restate, the run and its statistics (the one section that gives "which γ") redrawn with the
    sweep's; in the order of the sweep's last outputs. Both go back as outputs (a change in place would stay where
    this runs, which on a ZeroGPU Space is another process)."""
    if view.payoff is None:
        return not_kept()
    setup = sweep_key(request.prompt_text, run_settings(request, pair))
    session_runs.sweep = SweepRecord(setup, view.payoff)
    if run is None or sweep_key(run.prompt_text, run.settings) != setup or not run.done or not same_text(run):
        return *not_restated(), session_runs
    # a new object, not the old one changed: gradio tells a state's change by the object's identity
    swept = copy.copy(run)
    swept.sweep = view.payoff
    return swept, render.stats_html(swept), session_runs


def on_sweep_stop(previous_status, visitor: gr.Request) -> str:
    return record_stopped(visitor, "sweep", previous_status, "the chart shows the runs made so far.", "γ sweep")


# --- wiring -------------------------------------------------------------------------------------------------------


def sweep_tokens(section: SweepSection):
    """The most tokens a sweep may generate (ZeroGPU's budget): both lanes at each γ, each repeat, and a tree's
    runs beside the chain's."""
    def tokens_of(visitor, smallest_value, largest_value, repeats_value, run, session_runs, *values) -> int:
        named = dict(zip(section.names, values))
        num_gammas = zerogpu.count(largest_value, MAX_GAMMA) - zerogpu.count(smallest_value, 1) + 1
        shapes = 2 if zerogpu.count(named.get("tree"), 0) else 1
        new_tokens = zerogpu.count(named.get("max_new_tokens"), SETTING["max_new_tokens"].default)
        return 2 * shapes * max(num_gammas, 1) * zerogpu.count(repeats_value, 1) * new_tokens
    return tokens_of


def wire_sweep(section: SweepSection, inputs: list, run_state: gr.State, stats: gr.HTML, session_runs: gr.State,
               concurrency_id: str) -> None:
    """Run streams the sweep into its chart, then restates the last run's "which γ" where it swept that setup, and
    keeps its verdict in the visitor's runs so far (`session_runs`)."""
    outputs = [*section.outputs, run_state, stats, session_runs]  # keep_sweep's outputs last
    queued = section.run_button.click(on_section_queued, None, section.status, queue=False, api_visibility="private",
                                      show_progress="hidden")
    sweep_event = queued.then(
        zerogpu.on_gpu(MethodType(on_sweep_run, section), outputs, section.status, sweep_tokens(section)),
        [section.smallest, section.largest, section.repeats, run_state, session_runs, *inputs], outputs,
        api_visibility="private", concurrency_id=concurrency_id, show_progress="hidden",
    )
    section.stop_button.click(on_sweep_stop, [section.status], [section.status], cancels=[sweep_event], queue=False,
                              api_visibility="private")

# --- figure -------------------------------------------------------------------------------------------------------


def gamma_sweep(view: SweepView, max_gamma: int | None = None) -> go.Figure:
    """Measured median speedup per γ with its min–max spread, one series per tree budget, over the theory's curves
    for a chain."""
    figure = base_figure(sweep_title(view), "γ (tokens drafted per round)", "× the target alone's speed")
    if not view.results:
        return with_hint(figure, "press Run sweep")
    results = list(view.results)
    last_gamma = max_gamma or max(r.gamma for r in results)
    gammas = [g for g in view.theory_gammas if g <= last_gamma]
    chain = " for a chain" if view.has_trees else ""  # Leviathan's formula has no term for a tree
    figure.add_shape(type="line", xref="paper", yref="y", x0=0, x1=1, y0=1, y1=1, line={"color": "#444", "dash": "dot", "width": 1})
    figure.add_scatter(x=gammas, y=list(view.theory_speedups[: len(gammas)]), mode="lines", meta="theory",
                       name=f"theory{chain}, v = 1 (α̂ = {view.alpha:.2f}, c = {view.cost_ratio:.2f})",
                       line={"color": COLORS["bonus"], "width": 2}, hovertemplate="γ = %{x}: %{y:.2f}× predicted<extra></extra>")
    chains = view.results_of(0)
    figure.add_scatter(x=[r.gamma for r in chains], y=list(view.predicted_with_verify), mode="lines+markers",
                       meta="theory-with-verify", name=f"theory{chain} with each γ's measured verify cost v",
                       line={"color": COLORS["resample"], "dash": "dash", "width": 2}, marker={"size": 6},
                       customdata=[r.verify_cost for r in chains],
                       hovertemplate="γ = %{x}: %{y:.2f}× predicted (v = %{customdata:.2f})<extra></extra>")
    for tree in view.trees:
        add_measured(figure, view, tree)
    best = view.recommended_result
    if best is not None:
        # a ring round the measured point, named in the legend: a word beside it sat on the theory's curves
        figure.add_scatter(x=[best.gamma + nudge_of(view, best.tree)], y=[best.median_speedup], mode="markers",
                           name=f"recommended: {view.label_of(best)}", meta="recommended", hoverinfo="skip",
                           marker={"symbol": "circle-open", "size": 20, "color": COLORS["accepted"],
                                   "line": {"width": 3}})
    top = max([1.2, *(r.max_speedup for r in results), *view.theory_speedups[: len(gammas)]]) * 1.15
    figure.update_layout(height=SECTION_HEIGHT, xaxis={"dtick": 1, "range": [0.5, last_gamma + 0.5]}, yaxis={"range": [0, top]})
    legend_below(figure)  # four long names: above the plot on a phone they took a row each, over the title
    return figure


def sweep_title(view: SweepView) -> str:
    """The chart's verdict: the recommended setup, or that none beats the target alone."""
    best = view.recommended_result
    if best is not None:
        cheaper = "cheaper setup" if view.has_trees else "smaller γ"
        tie = f"; a tie goes to the {cheaper})" if len(view.payoff.ties) > 1 else ")"  # the status says what a tie is
        return two_line_title(f"γ sweep: recommended {view.label_of(best)}", f"(median {best.median_speedup:.2f}×{tie}")
    if view.payoff is not None:  # the one verdict: nothing beat the target alone beyond the noise
        return two_line_title(f"γ sweep: no {'γ or tree' if view.has_trees else 'γ'} beats the target alone",
                              "beyond the noise")
    return "γ sweep"


def nudge_of(view: SweepView, tree: int) -> float:
    return TREE_NUDGE * view.trees.index(tree)


def add_measured(figure: go.Figure, view: SweepView, tree: int) -> None:
    """One budget's measured medians with their min–max whiskers; the chain keeps the meta "measured"."""
    results = view.results_of(tree)
    index = view.trees.index(tree)
    colour, symbol = (INK, "circle") if tree == 0 else TREE_STYLES[(index - 1) % len(TREE_STYLES)]
    budget = (f"tree {tree}" if tree else "chain") + ": " if view.has_trees else ""
    figure.add_scatter(
        x=[r.gamma + nudge_of(view, tree) for r in results], y=[r.median_speedup for r in results], mode="markers",
        meta=f"measured-tree-{tree}" if tree else "measured", name=f"{budget}measured median (min–max)",
        marker={"size": 10, "color": colour, "symbol": symbol},
        error_y={"type": "data", "symmetric": False, "array": [r.max_speedup - r.median_speedup for r in results],
                 "arrayminus": [r.median_speedup - r.min_speedup for r in results], "color": "#555", "thickness": 1.5, "width": 5},
        customdata=[[r.min_speedup, r.max_speedup, r.num_runs, r.acceptance_rate, r.tokens_per_target_forward,
                     r.gamma, r.verify_cost] for r in results],
        hovertemplate=(f"γ = %{{customdata[5]}}{', tree ' + str(tree) if tree else ''}: median %{{y:.2f}}× "
                       "(%{customdata[0]:.2f}–%{customdata[1]:.2f}, %{customdata[2]} runs); α̂ = %{customdata[3]:.2f}, "
                       "τ = %{customdata[4]:.2f} tokens per target pass, v = %{customdata[6]:.2f}<extra></extra>"),
    )


def sweep_confidence(drafts: Sequence[JudgedDraft], labels: Mapping[int, str]) -> go.Figure:
    """Easy and hard tokens over every speculative run of the sweep (each point's hover names its run's γ)."""
    return acceptance_by_confidence(drafts, labels, two_line_title("Easy and hard tokens over the sweep's runs:",
                                                                   "acceptance against how sure the target was"),
                                    hint="press Run sweep")


# --- words --------------------------------------------------------------------------------------------------------


def sweep_status_html(num_done: int, num_total: int, elapsed_s: float, view=None, note: str = "") -> str:
    """Progress, then the sweep's answer to "which γ" (payoff.GammaAnswer, the one the whole page gives after it):
    the recommended γ (and tree budget) and why, the formula's best γ beside it as a prediction, and where the
    drafter's stop capped the rounds; or, when nothing beats the target alone beyond the noise, "none" and why."""
    done = num_done >= num_total
    # a repeat times the target alone once and then every setup: the count says so, or 12 reads as 12 speculative runs
    parts = [progress_html(num_done, num_total, "timed runs (the target alone's among them)", elapsed_s)]
    gamma = tree = ""
    if view is not None and view.payoff is not None:
        answer = sweep_answer(view.payoff)
        gamma, tree = ("none", "none") if answer.gamma is None else (str(answer.gamma), str(answer.tree))
        parts.append(sweep_recommended_html(view, answer, "" if done else " so far"))
        parts.append(sweep_prediction_html(view, answer))
        parts.append(capped_drafts_html(answer) if done else "")
    if note:
        parts.append(f"<p class='sweep-note'>{escape_text(note)}</p>")
    return (f'<div class="sweep-status" data-done="{"true" if done else "false"}" data-runs="{num_done}" '
            f'data-gamma="{gamma}" data-tree="{tree}">{"".join(parts)}</div>')


def capped_drafts_html(answer: GammaAnswer) -> str:
    """Where no chain round drafted as many tokens as the larger γ allow (the drafter stops once unsure), the answer's
    words that a larger γ changes nothing: a learner would read equal α̂ and τ across γ as a fault."""
    if not answer.is_capped:
        return ""
    return (f'<p class="sweep-capped" data-most-drafted="{answer.most_drafted}" style="margin:0 0 6px 0">'
            f"{escape_text(answer.capped_text())}</p>")


def sweep_recommended_html(view, answer: GammaAnswer, so_far: str) -> str:
    """The recommendation (#sweep-recommended, its γ and tree budget as data), and why that one; or "none" and why."""
    payoff, chosen = view.payoff, view.recommended_result
    if chosen is None:
        return (f'<p id="sweep-recommended" data-gamma="none" data-tree="none" style="margin:6px 0"><b>'
                f"{escape_text(answer.recommendation_text())}{so_far}.</b></p>{verdict_html(payoff)}")
    named = f": {view.label_of(chosen)}" if view.has_trees else f" {view.label_of(chosen)}"  # "Recommended: γ = 3, tree 8"
    html = (f'<p id="sweep-recommended" data-gamma="{chosen.gamma}" data-tree="{chosen.tree}" '
            f'data-edge="{payoff.at_range_edge or ""}" style="margin:6px 0"><b>Recommended{named}</b>{so_far}: '
            f"{escape_text(measured_text(payoff.chosen))}, above 1× beyond the noise.</p>")
    why = payoff.choice_text()
    if why:  # one γ measured is no choice among several
        html += (f"<p class='sweep-choice' style='margin:0 0 6px 0'>Why this {'setup' if view.has_trees else 'γ'}: "
                 f"{escape_text(why)}</p>")
    return html


def measured_text(measured) -> str:
    """A cell's median and spread: over its repeats, or one run's with the band one run has here."""
    if measured.num_runs == 1:
        return f"{measured.median:.2f}× in one run; {measured.band_text()}"
    return f"median {measured.median:.2f}× ({measured.low:.2f}–{measured.high:.2f}× over {measured.num_runs} runs)"


def sweep_prediction_html(view, answer: GammaAnswer) -> str:
    """The formula's best γ as a prediction (beside a recommendation: "none" gives it as its reason), τ and α̂ per
    cell, what a tree trades, and what the two curves are."""
    beside = f"Beside it, {escape_text(answer.prediction_text())}. " if view.payoff.pays else ""
    trade = f"{escape_text(tree_trade_text(view))} " if view.has_trees else ""
    cells = "the chain's γ cells" if view.has_trees else "the sweep"
    curves = (" Both curves are a chain's: the formula has no term for a tree, so the tree's points are measured only."
              if view.has_trees else "")
    return (f"<p class='sweep-prediction' style='margin:0;color:#555;font-size:13px'>{beside}"
            f"{escape_text(sweep_tau_text(view))} {trade}"
            f"The blue curve is the formula at α̂ = {view.alpha:.2f}, c = {view.cost_ratio:.2f} (medians over {cells}) "
            f"with v = 1; the orange one puts in each γ's measured verify cost, which grows with γ where a longer "
            f"verify costs more.{curves} The measured medians decide; the curves explain.</p>")


def tree_trade_text(view) -> str:
    """What a draft tree trades, in the τ and v of the cells the rule picks among the chain's γ and the tree's."""
    chain, tree = view.pick_of(0), view.pick_of(view.trees[-1])
    if chain is None or tree is None:
        return ""
    return (f"A tree trades more tokens per target pass (τ) for a costlier verify (v, in target steps), since one "
            f"pass checks every node: here the chain's pick, γ = {chain.gamma}, gave τ = "
            f"{chain.tokens_per_target_forward:.2f} at v = {chain.verify_cost:.2f}, and tree {tree.tree}'s, "
            f"γ = {tree.gamma}, τ = {tree.tokens_per_target_forward:.2f} at v = {tree.verify_cost:.2f}.")


def sweep_tau_text(view) -> str:
    """τ beside α̂ for each γ swept (and tree budget): a share of drafts kept against the tokens one target pass gave."""
    cells = ("; " if view.has_trees else ", ").join(
        f"{view.label_of(r)}: α̂ {r.acceptance_rate:.2f}, τ {r.tokens_per_target_forward:.2f}" for r in view.results)
    return (f"Per {'setup' if view.has_trees else 'γ'} ({cells}): α̂ is the share of examined drafts the target "
            "accepted, τ the tokens one target pass gave (its own correction or bonus included), so τ ≥ 1, and a "
            "larger γ raises τ only where the drafter keeps drafting and its drafts keep being accepted.")
