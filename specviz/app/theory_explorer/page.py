"""The theory explorer's page: Leviathan et al.'s expected speedup against γ and where in the (c, α) plane
speculation pays, at the sliders' values or the last run's measured ones; its layout, handlers, wiring, figure
and words (what the figure draws: `view`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import gradio as gr
import plotly.graph_objects as go

from specviz.analysis import theory
from specviz.analysis.payoff import Payoff, judge_run
from specviz.analysis.trace import Comparison, compare
from specviz.app.theory_explorer.view import TheoryView, theory_view
from specviz.app.palette import COLORS, INK
from specviz.app.plots import SECTION_HEIGHT, base_figure
from specviz.app.render.tokens import escape_text
from specviz.app.render.verdict import UNFINISHED, no_verdict_text, run_payoff, speedup_is_quoted, verdict_html

THEORY_START = {"alpha": 0.7, "cost_ratio": 0.1, "verify_cost": 1.5}  # the explorer's sliders before any run
THEORY_LEGEND_PX = 80  # the theory explorer's legend, under its panels: up to three rows
PAYS_FILL = "rgba(0, 158, 115, 0.13)"  # COLORS["accepted"], faint: where speculation pays
LOSES_FILL = "rgba(213, 94, 0, 0.08)"  # COLORS["rejected"], faint: slower than the target alone


# --- layout, and the chart and note for given values --------------------------------------------------------------


@dataclass
class TheorySection:
    sliders: list[gr.Slider]  # α, c, v: theory_values' arguments, in its order
    chart: gr.Plot
    note: gr.HTML
    from_run: gr.Button


def measured_of(run) -> tuple[Comparison | None, int | None]:
    """(comparison, γ) of the page's last run, or (None, None) before one with both lanes."""
    if run is None or not (run.baseline.trace.rounds and run.speculative.trace.rounds):
        return None, None
    return compare(run.baseline.trace, run.speculative.trace, run.gamma), run.gamma


def theory_values(alpha, cost_ratio, verify_cost, run) -> tuple:
    """The explorer's chart and note for the sliders' values, with the last run's point if there is one."""
    comparison, gamma = measured_of(run)
    # where the page quotes no speedup (texts that differ, a sampled run cut short) the chart draws none either
    on_chart = comparison is not None and speedup_is_quoted(run)
    view = theory_view(float(alpha), float(cost_ratio), float(verify_cost), gamma,
                       comparison.speedup if on_chart else None)
    verdict = None  # the run's one verdict, as its result card gives it; a run still under way has none yet
    if comparison is not None:
        verdict = (run_payoff(run, comparison) or no_verdict_text(run)) if run.done else UNFINISHED
    note = theory_note_html(view.alpha, view.cost_ratio, view.verify_cost, comparison, gamma, view.paying_alpha,
                            verdict, on_chart)
    return theory_explorer(view), note


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


# --- handlers -----------------------------------------------------------------------------------------------------


def on_measured_run(run) -> tuple:
    """The sliders at the last run's α̂, c and v (each within its slider's range) with the chart and note drawn
    for those same values (see wire_theory), or all unchanged before a run. The sliders show them to 2 decimals,
    as the note does; the chart and note take them whole, so the formula's best γ is the one the run's statistics
    predict (a c of 0.054 taken as 0.05 would change that prediction in its second decimal)."""
    comparison, _ = measured_of(run)
    if comparison is None:
        return gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
    values = (comparison.acceptance_rate, min(comparison.cost_ratio, 2.0), min(max(comparison.verify_cost, 0.5), 4.0))
    return (*(round(value, 2) for value in values), *theory_values(*values, run))


# --- wiring -------------------------------------------------------------------------------------------------------


def wire_theory(section: TheorySection, run_state: gr.State) -> None:
    """Each slider redraws the chart and note; a finished run (or the button) moves the sliders to its values."""
    sliders = section.sliders
    # One listener for all three sliders: "always_last" holds back a redraw only while the same listener's last
    # one is in flight, so with one each an older slider's reply could land after a newer one's.
    # A visitor's own moves only (input, not change): a run's values come with their chart (on_measured_run), as
    # change events for values set in a closed accordion fire for some sliders and not others.
    gr.on([slider.input for slider in sliders], theory_values, [*sliders, run_state], [section.chart, section.note],
          api_visibility="private", queue=False, show_progress="hidden", trigger_mode="always_last")
    measured = [*sliders, section.chart, section.note]
    run_state.change(on_measured_run, [run_state], measured, api_visibility="private", queue=False,
                     show_progress="hidden")
    section.from_run.click(on_measured_run, [run_state], measured, api_visibility="private", queue=False,
                           show_progress="hidden")

# --- figure -------------------------------------------------------------------------------------------------------


def theory_title(view: TheoryView) -> str:
    """The formula's best γ at the sliders (with those that print alike), with a free verify and with v, worded as a
    prediction (the page's recommended γ is measured: GammaAnswer, in the run's arithmetic). The sliders' α and c
    are the note's, beside it: with them the title ran to 72 characters and past the chart's edge at 400 px
    ("… no gain (v = 1.44) at α = 0.89, c = 0.66")."""
    def best_text(verify_cost: float, speedups: Sequence[float]) -> str:  # no γ named where none gains
        if max(speedups) <= 1.0:
            return "no gain"
        ties = theory.best_gammas(view.alpha, view.cost_ratio, len(view.gammas), verify_cost)
        return f"γ = {ties[0]}" if len(ties) == 1 else f"γ = {ties[0]}–{ties[-1]}"  # those the note names in words

    return (f"Formula predicts {best_text(1.0, view.speedups)} (v = 1), "
            f"{best_text(view.verify_cost, view.speedups_with_verify)} (v = {view.verify_cost:.2f})")


def theory_explorer(view: TheoryView) -> go.Figure:
    """Left: expected speedup against γ, Leviathan's (v = 1) and with the verify costing v target
    steps, with the last run's measured point. Right: the (c, α) plane, where speculation pays."""
    figure = base_figure(theory_title(view), "γ (tokens drafted per round)", "× the target alone's speed")
    gammas = list(view.gammas)
    top = max([1.2, *view.speedups, *view.speedups_with_verify, view.measured_speedup or 0.0]) * 1.08
    figure.add_shape(type="rect", xref="x", yref="y", x0=0.5, x1=gammas[-1] + 0.5, y0=0, y1=1, fillcolor=LOSES_FILL,
                     line_width=0, layer="below")
    figure.add_shape(type="line", xref="x", yref="y", x0=0.5, x1=gammas[-1] + 0.5, y0=1, y1=1,
                     line={"color": "#444", "dash": "dot", "width": 1})
    curves = (("Leviathan, v = 1", view.speedups, COLORS["bonus"], "solid", view.best_gamma, "leviathan"),
              (f"with verify cost v = {view.verify_cost:.2f}", view.speedups_with_verify, COLORS["resample"], "dash",
               view.best_gamma_with_verify, "with-verify"))
    for name, speedups, color, dash, best, uid in curves:
        figure.add_scatter(x=gammas, y=list(speedups), mode="lines+markers", name=name, meta=uid,
                           line={"color": color, "dash": dash, "width": 2.5}, marker={"size": 5},
                           hovertemplate="γ = %{x}: %{y:.2f}×<extra>" + name + "</extra>")
        if speedups[best - 1] <= 1.0:
            continue  # no γ gains on this curve: no star for a "best" that loses
        figure.add_scatter(x=[best], y=[speedups[best - 1]], mode="markers", showlegend=False, hoverinfo="skip",
                           marker={"symbol": "star", "size": 14, "color": color, "line": {"color": "#fff", "width": 1}})
    if view.measured_gamma is not None and view.measured_speedup is not None:
        figure.add_scatter(x=[view.measured_gamma], y=[view.measured_speedup], mode="markers", meta="measured",
                           name=f"last run: {view.measured_speedup:.2f}× at γ = {view.measured_gamma}",
                           marker={"symbol": "diamond", "size": 12, "color": INK},
                           hovertemplate="measured: %{y:.2f}× at γ = %{x}<extra></extra>")
    figure.add_annotation(text="slower than the target alone", x=gammas[-1], y=0.04, xref="x", yref="y",
                          xanchor="right", yanchor="bottom", showarrow=False, font={"color": COLORS["rejected"], "size": 11})
    add_pays_plane(figure, view)
    # the legend (five entries) under both panels: above them, on a phone it would wrap over the title
    figure.update_layout(
        height=SECTION_HEIGHT + THEORY_LEGEND_PX,
        xaxis={"domain": [0, 0.6], "dtick": 1 if len(gammas) <= 16 else 2, "range": [0.5, gammas[-1] + 0.5]},
        yaxis={"range": [0, top]},
        legend={"orientation": "h", "yref": "container", "yanchor": "bottom", "y": 0.0, "xanchor": "left", "x": 0.0},
        margin={"t": 40, "b": 45 + THEORY_LEGEND_PX},
    )
    return figure


def add_pays_plane(figure: go.Figure, view: TheoryView) -> None:
    """The (c, α) plane on the right: α > c shaded (v = 1), the boundary for v, and the point (c, α)."""
    edge = min(view.max_cost, 1.0)  # the line α = c leaves the plane at α = 1
    figure.add_scatter(
        x=[0, edge, view.max_cost, view.max_cost, 0] if view.max_cost <= 1 else [0, edge, 0],
        y=[0, edge, edge, 1, 1] if view.max_cost <= 1 else [0, 1, 1],
        fill="toself", fillcolor=PAYS_FILL, mode="lines", line={"color": COLORS["accepted"], "width": 1.5},
        name="gain predicted with v = 1: α > c", xaxis="x2", yaxis="y2", hoverinfo="skip", meta="pays-region",
    )
    costs = [c for c, a in zip(view.boundary_costs, view.boundary_alphas) if a is not None]
    alphas = [a for a in view.boundary_alphas if a is not None]
    figure.add_scatter(x=costs, y=alphas, mode="lines", name=f"gain predicted above this with v = {view.verify_cost:.2f}",
                       line={"color": COLORS["resample"], "dash": "dash", "width": 2}, xaxis="x2", yaxis="y2",
                       hovertemplate="c = %{x:.2f}: a gain predicted when α > %{y:.2f}<extra></extra>", meta="pays-boundary")
    figure.add_scatter(x=[view.cost_ratio], y=[view.alpha], mode="markers", name="(c, α) now", xaxis="x2", yaxis="y2",
                       marker={"size": 11, "color": INK, "symbol": "circle"}, showlegend=False,
                       hovertemplate="c = %{x:.2f}, α = %{y:.2f}<extra></extra>")
    figure.update_layout(
        xaxis2={"domain": [0.7, 1.0], "anchor": "y2", "range": [0, view.max_cost], "title": {"text": "c (draft step / target step)"}},
        yaxis2={"anchor": "x2", "range": [0, 1.0], "title": {"text": "α (acceptance rate)"}},
    )


# --- words --------------------------------------------------------------------------------------------------------


def theory_note_html(alpha: float, cost_ratio: float, verify_cost: float, comparison: Comparison | None,
                     gamma: int | None, paying_alpha: float | None, verdict: Payoff | str | None = None,
                     on_chart: bool = True) -> str:
    """The sliders' prediction, worded as one; then the last run's measured verdict (the result card's, beside
    the prediction it may contradict) and how to read its point against the curves. The run's own figures against
    the formula, and which γ to pick, are said once, in the run's arithmetic. `verdict`: the run's one verdict
    (render.verdict.run_payoff), or the sentence saying why it has none; None: judged here as one run with no
    measured spread. `on_chart`: the run is drawn as the diamond (not where its texts differ: no speedup)."""
    if alpha > cost_ratio:
        free = "with a free verify (v = 1) the point lies in the green area (α &gt; c), where the formula predicts a gain"
    else:
        free = ("even with a free verify (v = 1) the point lies outside the green area (α ≤ c), where the formula "
                "predicts no gain")
    if paying_alpha is None:
        with_v = f"with v = {verify_cost:.2f} no α is enough at c = {cost_ratio:.2f}"
    elif paying_alpha == 0.0:  # c + v < 1: "needs α above 0.00" would read as a threshold; it is none
        with_v = (f"with v = {verify_cost:.2f} the formula predicts a gain at any α, even 0: at γ = 1 a round costs "
                  f"c + v = {cost_ratio + verify_cost:.2f} target steps, under one, and always yields a token")
    else:
        side = "above" if alpha > paying_alpha else "below"
        with_v = (f"with v = {verify_cost:.2f} a gain needs α above {paying_alpha:.2f} (the orange line), and "
                  f"α = {alpha:.2f} is {side} it")
    prediction = Payoff(alpha, cost_ratio, verify_cost).prediction_text()
    lines = [f"<b>Predicted</b> at α = {alpha:.2f}, c = {cost_ratio:.2f}, v = {verify_cost:.2f} (the sliders): {free}; "
             f"{with_v}. {escape_text(prediction[0].upper() + prediction[1:])}."]
    measured = ""
    if comparison is not None and gamma is not None:
        payoff = verdict if verdict is not None else judge_run(
            comparison.acceptance_rate, comparison.cost_ratio, comparison.verify_cost, gamma, comparison.speedup)
        where = "the diamond" if on_chart else "not on the chart: its lanes wrote different texts"
        measured = (f"<p style='margin:0'><b>Measured</b>, the last run (γ = {gamma}, {where}):</p>"
                    # the verdict's sentence; its detail (the noise, what would change it) has one home, the card's
                    + (verdict_html(None, payoff) if isinstance(payoff, str) else verdict_html(payoff, detail=False)))
        if on_chart:
            lines.append(
                f"Read the diamond against the curves at γ = {gamma}: the solid blue curve takes a (γ+1)-token verify "
                "to cost one target step, the dashed orange one v steps (the slider's v; after a run, the run's own), "
                "and what is left between the dashed curve and the diamond is what the formula leaves out: rounds the "
                "drafter cut short, the prefills, the host's work between forwards. The run's arithmetic, under the "
                "result card, gives each figure and which γ to pick; the γ sweep below repeats runs.")
        else:
            # why there is no point is said above ("not on the chart") and in the verdict: here only where to look
            lines.append("The γ sweep below times repeated runs at this temperature and puts their median on its chart.")
    else:
        lines.append("Press Run above: the last run's measured α̂, c and v then fill these sliders, and its measured "
                     "speedup appears on the chart with the measured verdict.")
    paragraphs = [f"<p style='margin:0 0 6px 0'>{line}</p>" for line in lines]
    return paragraphs[0] + measured + "".join(paragraphs[1:])  # the verdict under the prediction, as before
