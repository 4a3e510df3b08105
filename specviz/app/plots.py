"""Plotly figures of a run, built from traces only (never from models or the UI clock).

Every function takes finished or partial traces and returns a `plotly.graph_objects.Figure`;
an empty trace gives an empty figure with a hint, so the app can draw them from the first
event on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

import plotly.graph_objects as go

from specviz.catalogue import lane_info
from specviz.decoding.events import RoundEvent
from specviz.app.palette import COLORS
from specviz.analysis.trace import Trace, speedup
from specviz.app.wording import every, p_equals

if TYPE_CHECKING:  # annotations only: plots stays free of torch and the models
    from specviz.app.lab.exactness import LabTally
    from specviz.app.lab.explorer import TheoryView
    from specviz.app.lab.sweep import SweepView

HEIGHT = 280
MARGIN_TOP = 45
BAR_WIDTH = 0.8  # in rounds: fixed, else overlaid traces each size their bars by their own x spacing
# The run's four charts: a title long enough ("Tokens vs time — speculative is 1.23× …") met the legend
# in one band on a narrow page; one legend row fits each chart's width from 800 px up (one column there).
PAGE_LEGEND_ROWS = 1


def base_figure(title: str, x_title: str, y_title: str, legend_rows: int = 0) -> go.Figure:
    """An empty figure in the page's style; `legend_rows` > 0 gives the title a band of its own above
    that many legend rows (see separate_title_and_legend)."""
    figure = go.Figure()
    figure.update_layout(
        title={"text": title, "font": {"size": 14}},
        template="plotly_white",
        height=HEIGHT,
        margin={"l": 50, "r": 15, "t": MARGIN_TOP, "b": 45},
        xaxis_title=x_title,
        yaxis_title=y_title,
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0},
        showlegend=True,
    )
    if legend_rows:
        separate_title_and_legend(figure, legend_rows)
    return figure


def with_hint(figure: go.Figure, hint: str) -> go.Figure:
    figure.add_annotation(text=hint, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5, font={"color": "#888"})
    figure.update_xaxes(showticklabels=False)
    figure.update_yaxes(showticklabels=False)
    return figure


def speculative_rounds(trace: Trace) -> list[RoundEvent]:
    """Rounds that drafted something (a round near the end may draft nothing)."""
    return [event for event in trace.rounds if event.gamma > 0]


def accepted_per_round(speculative: Trace, gamma: int) -> go.Figure:
    """Bars: drafts accepted in each round, coloured by how the round ended; a line at γ."""
    figure = base_figure("Accepted drafts per round", "round", "accepted tokens", legend_rows=PAGE_LEGEND_ROWS)
    rounds = speculative_rounds(speculative)
    if not rounds:
        return with_hint(figure, "drafting starts after the target-only lane")
    for kind, name in (("bonus", "all accepted (+ bonus)"), ("resample", "rejection ✕ (+ resample)")):
        chosen = [event for event in rounds if event.next_kind == kind]
        figure.add_bar(
            x=[event.round_index + 1 for event in chosen],
            y=[event.num_accepted for event in chosen],
            width=BAR_WIDTH,
            name=name,
            marker_color=COLORS[kind],
            customdata=[[event.gamma] for event in chosen],
            hovertemplate="round %{x}: %{y} of %{customdata[0]} accepted<extra></extra>",
        )
    add_rejection_marks(figure, rounds)
    figure.add_hline(y=gamma, line_dash="dash", line_color="#444", annotation_text=f"γ = {gamma}", annotation_position="top left")
    figure.update_layout(barmode="overlay", yaxis_range=[0, gamma + 0.6])
    return figure


def add_rejection_marks(figure: go.Figure, rounds: Sequence[RoundEvent]) -> None:
    """A ✕ where each round's rejection fell, on top of its bar.

    A round that accepted nothing has a zero-height bar: without the mark it is a blank gap,
    and at γ = 1 every rejection would be invisible.
    """
    rejected = [event for event in rounds if event.next_kind == "resample"]
    if not rejected:
        return
    figure.add_scatter(
        x=[event.round_index + 1 for event in rejected],
        y=[event.num_accepted for event in rejected],
        mode="markers",
        name="rejected draft",
        showlegend=False,  # the resample bars' entry names the ✕: a third entry would crowd the title
        marker={"symbol": "x-thin-open", "size": 11, "line": {"width": 2.5, "color": COLORS["rejected"]},
                "color": COLORS["rejected"]},
        cliponaxis=False,  # a mark at y = 0 sits on the axis line; keep all of it visible
        customdata=[[event.num_accepted + 1, event.gamma] for event in rejected],
        hovertemplate="round %{x}: draft %{customdata[0]} of %{customdata[1]} rejected<extra></extra>",
    )


def cumulative_acceptance(speculative: Trace) -> go.Figure:
    """α̂ after each round: accepted over examined drafts so far."""
    figure = base_figure("Acceptance rate α̂ so far", "round", "α̂", legend_rows=PAGE_LEGEND_ROWS)
    rounds = speculative_rounds(speculative)
    if not rounds:
        return with_hint(figure, "drafting starts after the target-only lane")
    xs, ys = [], []
    accepted = examined = 0
    for event in rounds:
        accepted += event.num_accepted
        examined += event.num_examined
        xs.append(event.round_index + 1)
        ys.append(accepted / examined if examined else 0.0)
    figure.add_scatter(
        x=xs, y=ys, mode="lines+markers", name="α̂", line_color=COLORS["accepted"],
        hovertemplate="after round %{x}: α̂ = %{y:.2f}<extra></extra>",
    )
    figure.update_layout(yaxis_range=[0, 1.05], showlegend=False)
    return figure


def tokens_vs_time(baseline: Trace, speculative: Trace, *others: Trace) -> go.Figure:
    """Tokens generated against seconds of model work, every lane; running speedup in the title."""
    title = "Tokens vs time"
    speedup = running_speedup(baseline, speculative)
    if speedup is not None:
        title += f" — speculative is {speedup:.2f}× the baseline's speed"
    figure = base_figure(title, "seconds of model work", "tokens", legend_rows=PAGE_LEGEND_ROWS)
    traces = (baseline, speculative, *others)
    if not any(trace.timeline() for trace in traces):
        return with_hint(figure, "press Run")
    for trace in traces:
        lane = lane_info(trace.lane or "baseline")
        name = lane.label
        timeline = trace.timeline()
        if timeline:
            figure.add_scatter(
                x=[0.0] + [s for s, _ in timeline],
                y=[0] + [n for _, n in timeline],
                mode="lines",
                line={"shape": "hv", "color": lane.colour, "width": 2.5},
                name=name,
                hovertemplate="%{x:.3f} s: %{y} tokens<extra>" + name + "</extra>",
            )
    return figure


def running_speedup(baseline: Trace, speculative: Trace) -> float | None:
    """Speculative tokens/s over baseline tokens/s, once both lanes have something to show."""
    if baseline.tokens_per_s > 0 and speculative.rounds and speculative.tokens_per_s > 0:
        return speedup(baseline, speculative)
    return None


def per_position_acceptance(speculative: Trace) -> go.Figure:
    """Acceptance at draft position i among drafts the target examined; α̂ for comparison."""
    figure = base_figure("Acceptance by draft position", "draft position", "share accepted", legend_rows=PAGE_LEGEND_ROWS)
    counts = speculative.per_position_counts()
    if not counts:
        return with_hint(figure, "drafting starts after the target-only lane")
    rates = [accepted / examined if examined else 0.0 for accepted, examined in counts]
    examined = [examined for _, examined in counts]
    positions = list(range(1, len(rates) + 1))
    figure.add_bar(
        x=positions, y=rates, name="per position", marker_color=COLORS["accepted"], customdata=examined,
        hovertemplate="position %{x}: %{y:.2f} of %{customdata} examined<extra></extra>",
    )
    figure.add_scatter(
        x=positions, y=[speculative.acceptance_rate] * len(positions), mode="lines", name="α̂ (all)",
        line={"dash": "dash", "color": "#444"},
    )
    figure.update_layout(yaxis_range=[0, 1.05], xaxis={"dtick": 1})
    return figure


def decision_distributions(
    event: RoundEvent, labels: Mapping[int, str], max_tokens: int = 10
) -> go.Figure:
    """At the round's deciding position: q and p of the top tokens, and the residual if rejected.

    The deciding position is the first rejection (the correction comes from the residual
    norm(max(0, p − q))) or, for a fully accepted round, the bonus position (drawn from p).
    """
    position = event.num_accepted
    figure = base_figure(decision_title(event, labels), "token", "probability")
    if not event.details or position >= len(event.details):
        return with_hint(figure, "no distributions recorded for this round")
    detail = event.details[position]
    series = [("q (draft)", detail.draft_top, COLORS["draft"]), ("p (target)", detail.target_top, COLORS["target"]),
              ("residual norm(max(0, p−q))", detail.residual_top, COLORS["residual"])]
    series = [entry for entry in series if entry[1]]  # a bonus position has no q, a kept draft no residual
    # the drafted token and the target's own always get a bar, however unlikely
    must = [token.token_id for token in event.drafted[position : position + 1]] + [event.next_id]
    token_ids = list(dict.fromkeys(must + ordered_union([pairs for _, pairs, _ in series], max_tokens)))[:max_tokens]
    names = unique_names([label_of(token_id, labels) for token_id in token_ids], token_ids)
    highest = 0.0
    for name, pairs, color in series:
        probs = dict(pairs)
        values = [probs.get(token_id, 0.0) for token_id in token_ids]
        highest = max([highest, *values])
        figure.add_bar(
            x=names, y=values, name=name, marker_color=color,
            hovertemplate="%{x}: %{y:.3g}<extra>" + name + "</extra>",
        )
    top = min(1.05, highest * 1.15) if highest > 0 else 1.05  # flat distributions stay readable
    figure.update_layout(barmode="group", yaxis_range=[0, top], xaxis={"type": "category"})
    separate_title_and_legend(figure)
    return figure


TITLE_ROW_PX = 30  # the title's band at the top of the figure
LEGEND_ROW_PX = 24  # one row of a horizontal legend


def separate_title_and_legend(figure: go.Figure, legend_rows: int = 2) -> None:
    """Title in its own top band, legend in the rows below it, just above the plot.

    The inspector's title names the tokens and runs long; a legend sharing its band covered it.
    Room is kept for the legend to wrap to `legend_rows` rows on a narrow page.
    """
    top = TITLE_ROW_PX + LEGEND_ROW_PX * legend_rows
    figure.update_layout(
        title={"yref": "container", "y": 1.0, "yanchor": "top", "pad": {"t": 8}, "x": 0.01, "xanchor": "left"},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "left", "x": 0.0},
        margin={"t": top},
        height=HEIGHT + top - MARGIN_TOP,  # the plot area keeps its height
    )


def decision_title(event: RoundEvent, labels: Mapping[int, str]) -> str:
    position = event.num_accepted
    if len(event.emitted_ids) == event.num_kept_drafts:  # an accepted end-of-text left no room for the target's token
        return f"Round {event.round_index + 1}: the run ended at an accepted end-of-text; the target's own token was not kept"
    if event.next_kind == "resample" and position < len(event.drafted):
        token = event.drafted[position]
        return (
            f"Round {event.round_index + 1}, draft {position + 1}: {label_of(token.token_id, labels)} rejected "
            f"→ resampled {label_of(event.next_id, labels)}"
        )
    return f"Round {event.round_index + 1}: {every(event.gamma, 'draft')} accepted → bonus {label_of(event.next_id, labels)} from p"


def ordered_union(groups: Sequence[Sequence[tuple[int, float]]], limit: int) -> list[int]:
    """Token ids in order of their best probability across the groups, at most `limit`."""
    best: dict[int, float] = {}
    for pairs in groups:
        for token_id, prob in pairs:
            best[token_id] = max(best.get(token_id, 0.0), prob)
    ranked = sorted((token_id for token_id in best if best[token_id] > 0), key=lambda t: -best[t])
    return ranked[:limit]


def unique_names(names: list[str], token_ids: list[int]) -> list[str]:
    """Category labels must differ: add the id where two tokens read the same."""
    return [f"{name} #{token_id}" if names.count(name) > 1 else name for name, token_id in zip(names, token_ids)]


def label_of(token_id: int, labels: Mapping[int, str]) -> str:
    """A short, visible label for a token: quotes, with whitespace spelled out."""
    text = labels.get(token_id)
    if text is None:
        return f"#{token_id}"
    shown = text.replace("\n", "↵").replace("\t", "⇥")
    if shown.strip() == "":
        shown = shown.replace(" ", "␣")
    return repr(shown) if len(shown) <= 24 else repr(shown[:22] + "…")


# --- the teaching sections (specviz.app.teach); step mode draws with decision_distributions above -------

TEACH_HEIGHT = 340
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
            label = f"{name} ({p_equals(tally.p_value(lane))})"
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

    title = (f"Predicted speedup, α = {view.alpha:.2f}, c = {view.cost_ratio:.2f}: best γ = "
             f"{best_text(view.best_gamma, view.speedups)} (v = 1), "
             f"{best_text(view.best_gamma_with_verify, view.speedups_with_verify)} (v = {view.verify_cost:.2f})")
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
    figure.update_layout(
        height=TEACH_HEIGHT,
        xaxis={"domain": [0, 0.6], "dtick": 1 if len(gammas) <= 16 else 2, "range": [0.5, gammas[-1] + 0.5]},
        yaxis={"range": [0, top]},
    )
    separate_title_and_legend(figure)
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


def gamma_sweep(view: SweepView, max_gamma: int | None = None) -> go.Figure:
    """Measured median speedup per γ with its min–max spread, over the theory's curves."""
    if not view.results:
        figure = base_figure("γ sweep", "γ (tokens drafted per round)", "× the target alone's speed")
        return with_hint(figure, "press Run sweep")
    results = list(view.results)
    best = next((r for r in results if r.gamma == view.recommended_gamma), None)
    title = "γ sweep"
    if best is not None:
        title += f": recommended γ = {best.gamma} (median {best.median_speedup:.2f}×)"
    elif view.payoff is not None:  # the one verdict: no γ beat the target alone beyond the noise
        title += ": no γ beats the target alone"
    figure = base_figure(title, "γ (tokens drafted per round)", "× the target alone's speed")
    last_gamma = max_gamma or max(r.gamma for r in results)
    gammas = [g for g in view.theory_gammas if g <= last_gamma]
    figure.add_shape(type="line", xref="paper", yref="y", x0=0, x1=1, y0=1, y1=1, line={"color": "#444", "dash": "dot", "width": 1})
    figure.add_scatter(x=gammas, y=list(view.theory_speedups[: len(gammas)]), mode="lines", meta="theory",
                       name=f"theory, v = 1 (α̂ = {view.alpha:.2f}, c = {view.cost_ratio:.2f})",
                       line={"color": COLORS["bonus"], "width": 2}, hovertemplate="γ = %{x}: %{y:.2f}× predicted<extra></extra>")
    figure.add_scatter(x=[r.gamma for r in results], y=list(view.predicted_with_verify), mode="lines+markers",
                       meta="theory-with-verify", name="theory with each γ's measured verify cost v",
                       line={"color": COLORS["resample"], "dash": "dash", "width": 2}, marker={"size": 6},
                       customdata=[r.verify_cost for r in results],
                       hovertemplate="γ = %{x}: %{y:.2f}× predicted (v = %{customdata:.2f})<extra></extra>")
    figure.add_scatter(
        x=[r.gamma for r in results], y=[r.median_speedup for r in results], mode="markers", meta="measured",
        name="measured median (min–max)",
        marker={"size": 10, "color": EXACT_COLOR},
        error_y={"type": "data", "symmetric": False, "array": [r.max_speedup - r.median_speedup for r in results],
                 "arrayminus": [r.median_speedup - r.min_speedup for r in results], "color": "#555", "thickness": 1.5, "width": 5},
        customdata=[[r.min_speedup, r.max_speedup, r.num_runs] for r in results],
        hovertemplate="γ = %{x}: median %{y:.2f}× (%{customdata[0]:.2f}–%{customdata[1]:.2f}, %{customdata[2]} runs)<extra></extra>",
    )
    if best is not None:
        figure.add_scatter(x=[best.gamma], y=[best.max_speedup], mode="markers+text", text=["recommended"],
                           textposition="top center", showlegend=False, hoverinfo="skip",
                           marker={"symbol": "triangle-down", "size": 12, "color": COLORS["accepted"]})
    top = max([1.2, *(r.max_speedup for r in results), *view.theory_speedups[: len(gammas)]]) * 1.15
    figure.update_layout(height=TEACH_HEIGHT, xaxis={"dtick": 1, "range": [0.5, last_gamma + 0.5]}, yaxis={"range": [0, top]})
    separate_title_and_legend(figure)
    return figure
