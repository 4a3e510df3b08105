"""Plotly figures of the teaching sections (specviz.app.teach): the exactness lab's histogram, the
theory explorer and the γ sweep, in the page's figure style (specviz.app.plots). Step mode draws
with plots.decision_distributions, like the inspector.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

import plotly.graph_objects as go

from specviz.catalogue import lane_info
from specviz.app.palette import COLORS
from specviz.app.plots import base_figure, legend_below, separate_title_and_legend, two_line_title, with_hint
from specviz.app.plots_confidence import acceptance_by_confidence
from specviz.app.wording import p_equals

if TYPE_CHECKING:  # annotations only: the figures stay free of torch and the models
    from specviz.analysis.confidence import JudgedDraft
    from specviz.app.lab.exactness import LabTally
    from specviz.app.lab.explorer import TheoryView
    from specviz.app.lab.sweep import SweepView

TEACH_HEIGHT = 340
THEORY_LEGEND_PX = 80  # the theory explorer's legend, under its panels: up to three rows
EXACT_COLOR = "#222222"  # the exact distribution: ink, so both lanes' colours stay theirs
PAYS_FILL = "rgba(0, 158, 115, 0.13)"  # COLORS["accepted"], faint: where speculation pays
LOSES_FILL = "rgba(213, 94, 0, 0.08)"  # COLORS["rejected"], faint: slower than the target alone


def exactness_histogram(tally: LabTally, bin_labels: Sequence[str], wrong_rule: bool = False) -> go.Figure:
    """Share of draws per outcome in each lane, beside the exact distribution ± 2 standard errors.

    The whiskers are where a lane's bar lands about 95% of the time if its draws follow the
    target: bars that keep missing them are what a small p-value says in numbers.
    """
    num_draws = tally.num_draws("speculative")
    title = f"First two new tokens: {num_draws} of {tally.num_planned} draws per lane"
    figure = base_figure(title, "first two generated tokens (token 1 · token 2)", "share of draws")
    exact = list(tally.bins.probs)
    spread = [2 * (p * (1 - p) / num_draws) ** 0.5 for p in exact] if num_draws else None
    baseline, speculative = lane_info("baseline"), lane_info("speculative")
    lanes = ((baseline.name, baseline.label, baseline.colour),
             (speculative.name, f"{speculative.label}, WRONG rule" if wrong_rule else speculative.label,
              COLORS["rejected"] if wrong_rule else speculative.colour))
    for lane, name, color in lanes:
        if num_draws:
            p_value = tally.p_value(lane)
            label = f"{name} ({'too few draws to test yet' if p_value is None and tally.too_few(lane) else p_equals(p_value)})"
            figure.add_bar(x=list(bin_labels), y=tally.frequencies(lane), name=label, marker_color=color, meta=lane,
                           customdata=tally.counts[lane], hovertemplate="%{x}: %{y:.1%} (%{customdata} draws)<extra>" + name + "</extra>")
    figure.add_scatter(
        x=list(bin_labels), y=exact, mode="markers", name="exact, from the target's logits (± 2σ)", meta="exact",
        marker={"symbol": "line-ew-open", "size": 30, "color": EXACT_COLOR, "line": {"width": 3, "color": EXACT_COLOR}},
        error_y={"type": "data", "array": spread, "visible": spread is not None, "color": "#777", "thickness": 1.5, "width": 6},
        hovertemplate="%{x}: exact %{y:.1%}<extra></extra>",
    )
    figure.update_layout(barmode="group", height=TEACH_HEIGHT + 40, yaxis_tickformat=".0%",
                         xaxis={"type": "category", "tickangle": -30})
    separate_title_and_legend(figure)
    if not num_draws:
        figure.add_annotation(text="drawing…", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.9,
                              font={"color": "#888"})
    return figure


def theory_explorer(view: TheoryView) -> go.Figure:
    """Left: expected speedup against γ, Leviathan's (v = 1) and with the verify costing v target
    steps, with the last run's measured point. Right: the (c, α) plane, where speculation pays."""
    def best_text(best: int, speedups: Sequence[float]) -> str:  # "none" where no γ gains: one verdict
        return str(best) if speedups[best - 1] > 1.0 else "none"

    # Short enough for the width a phone's chart is laid out at, ui.PHONE_CHART_PX (the longer "Predicted speedup,
    # α = …" ran past it).
    title = (f"Predicted best γ = {best_text(view.best_gamma, view.speedups)} (v = 1), "
             f"{best_text(view.best_gamma_with_verify, view.speedups_with_verify)} (v = {view.verify_cost:.2f}) "
             f"at α = {view.alpha:.2f}, c = {view.cost_ratio:.2f}")
    figure = base_figure(title, "γ (tokens drafted per round)", "× the target alone's speed")
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
                           marker={"symbol": "diamond", "size": 12, "color": EXACT_COLOR},
                           hovertemplate="measured: %{y:.2f}× at γ = %{x}<extra></extra>")
    figure.add_annotation(text="slower than the target alone", x=gammas[-1], y=0.04, xref="x", yref="y",
                          xanchor="right", yanchor="bottom", showarrow=False, font={"color": COLORS["rejected"], "size": 11})
    add_pays_plane(figure, view)
    # The legend (five entries) sits under both panels: above them, it wrapped into more rows than its band on a
    # phone and ran over the title.
    figure.update_layout(
        height=TEACH_HEIGHT + THEORY_LEGEND_PX,
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
                       marker={"size": 11, "color": EXACT_COLOR, "symbol": "circle"}, showlegend=False,
                       hovertemplate="c = %{x:.2f}, α = %{y:.2f}<extra></extra>")
    figure.update_layout(
        xaxis2={"domain": [0.7, 1.0], "anchor": "y2", "range": [0, view.max_cost], "title": {"text": "c (draft step / target step)"}},
        yaxis2={"anchor": "x2", "range": [0, 1.0], "title": {"text": "α (acceptance rate)"}},
    )


# Each tree budget's measured points: its own colour and marker, nudged right of the chain's so their min–max
# whiskers at one γ stay apart (the hover still says the γ).
TREE_STYLES = ((COLORS["draft"], "diamond"), (COLORS["accepted"], "square"), (COLORS["resample"], "triangle-up"))
TREE_NUDGE = 0.18


def gamma_sweep(view: SweepView, max_gamma: int | None = None) -> go.Figure:
    """Measured median speedup per γ with its min–max spread, one series per tree budget (the chain, and
    "tree N" where the page drafts one), over the theory's curves for a chain."""
    if not view.results:
        figure = base_figure("γ sweep", "γ (tokens drafted per round)", "× the target alone's speed")
        return with_hint(figure, "press Run sweep")
    results = list(view.results)
    figure = base_figure(sweep_title(view), "γ (tokens drafted per round)", "× the target alone's speed")
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
        figure.add_scatter(x=[best.gamma + nudge_of(view, best.tree)], y=[best.max_speedup], mode="markers+text",
                           text=["recommended"], textposition="top center", showlegend=False, hoverinfo="skip",
                           marker={"symbol": "triangle-down", "size": 12, "color": COLORS["accepted"]})
    top = max([1.2, *(r.max_speedup for r in results), *view.theory_speedups[: len(gammas)]]) * 1.15
    figure.update_layout(height=TEACH_HEIGHT, xaxis={"dtick": 1, "range": [0.5, last_gamma + 0.5]}, yaxis={"range": [0, top]})
    legend_below(figure)  # four long names: above the plot on a phone they took a row each, over the title
    return figure


def sweep_title(view: SweepView) -> str:
    """The chart's verdict: the recommended setup, or that none beats the target alone."""
    best = view.recommended_result
    if best is not None:
        cheaper = "cheaper setup" if view.has_trees else "smaller γ"
        tie = f"; a tie within the noise goes to the {cheaper})" if len(view.payoff.ties) > 1 else ")"
        return f"γ sweep: recommended {view.label_of(best)} (median {best.median_speedup:.2f}×{tie}"
    if view.payoff is not None:  # the one verdict: nothing beat the target alone beyond the noise
        return f"γ sweep: no {'γ or tree' if view.has_trees else 'γ'} beats the target alone beyond the noise"
    return "γ sweep"


def nudge_of(view: SweepView, tree: int) -> float:
    return TREE_NUDGE * view.trees.index(tree) if tree in view.trees else 0.0


def add_measured(figure: go.Figure, view: SweepView, tree: int) -> None:
    """One budget's measured medians with their min–max whiskers; the chain keeps the meta "measured"."""
    results = view.results_of(tree)
    index = view.trees.index(tree)
    colour, symbol = (EXACT_COLOR, "circle") if tree == 0 else TREE_STYLES[(index - 1) % len(TREE_STYLES)]
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
