"""Plotly figures of a run, built from traces only (never from models or the UI clock), and the page's
figure style (`base_figure`, `with_hint`, `separate_title_and_legend`) that every chart shares.

An empty trace gives an empty figure with a hint, so the page draws them from the first event on.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

import plotly.graph_objects as go

from specviz.catalogue import lane_info
from specviz.decoding.events import RoundEvent
from specviz.app.palette import COLORS
from specviz.app.render.rule import bonus_word, correction_word
from specviz.analysis.trace import Trace, speedup
from specviz.app.wording import every

HEIGHT = 280
SECTION_HEIGHT = 340  # the exactness lab's, the γ sweep's and the theory explorer's figures: more to read
MARGIN_TOP = 45
BAR_WIDTH = 0.8  # in rounds: fixed, else overlaid traces each size their bars by their own x spacing
# The run's four charts: a long title ("Tokens vs time — speculative is 1.23× …") gets its own band; one legend
# row fits each chart's width from 800 px up (one column there).
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


DRAFTED_WHY = " (drafting stopped: the drafter was unsure)"
# What a chart without rounds says: a live chart (charts.page.CHARTS) draws each round as it is decided; the others are
# drawn when a lane finishes, since redrawing them during a run would take the lanes' CPU
NO_ROUND_YET = "each drafting round appears here as the speculative lane decides it"
ROUNDS_AT_LANE_END = "the speculative lane's rounds are drawn here when a lane finishes"


def accepted_per_round(speculative: Trace, gamma: int) -> go.Figure:
    """Bars: drafts accepted in each round, coloured by how the round ended, each in the outline of the drafts
    proposed; a line at γ."""
    figure = base_figure("Accepted drafts per round", "round", "accepted, of drafted (outline)",
                         legend_rows=PAGE_LEGEND_ROWS)
    rounds = speculative_rounds(speculative)
    if not rounds:
        return with_hint(figure, NO_ROUND_YET)
    # behind each bar, how many the drafter proposed: below the γ line where it stopped unsure (or the text's
    # end was near), and above a rejection the drafts never examined
    figure.add_bar(
        x=[event.round_index + 1 for event in rounds], y=[event.gamma for event in rounds], width=BAR_WIDTH,
        name="drafted", marker={"color": "rgba(0,0,0,0)", "line": {"color": COLORS["unexamined"], "width": 1.5}},
        showlegend=False,  # the axis names the outline: a third legend entry crowds the title on a phone's width
        customdata=[[DRAFTED_WHY if event.stopped_unsure else ""] for event in rounds],
        hovertemplate="round %{x}: %{y} drafted%{customdata[0]}<extra></extra>",
    )
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
    """A ✕ where each round's rejection fell, on top of its bar: a round that accepted nothing has a zero-height
    bar, so without the mark at γ = 1 every rejection would be invisible."""
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
        return with_hint(figure, ROUNDS_AT_LANE_END)
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


def tokens_vs_time(baseline: Trace, speculative: Trace, *others: Trace, quote_speedup: bool = True) -> go.Figure:
    """Tokens generated against seconds of model work, every lane; the running speedup in the title, once both
    lanes have something to show and where it is one (`quote_speedup`: render.verdict.speedup_is_quoted)."""
    title = "Tokens vs time"
    if quote_speedup and baseline.tokens_per_s > 0 and speculative.rounds and speculative.tokens_per_s > 0:
        title += f" — speculative is {speedup(baseline, speculative):.2f}× the baseline's speed"
    figure = base_figure(title, "seconds of model work", "tokens", legend_rows=PAGE_LEGEND_ROWS)
    timelines = [(lane_info(trace.lane or "baseline"), trace.timeline()) for trace in (baseline, speculative, *others)]
    if not any(timeline for _, timeline in timelines):
        return with_hint(figure, "press Run")
    for lane, timeline in timelines:
        if timeline:
            figure.add_scatter(x=[0.0] + [s for s, _ in timeline], y=[0] + [n for _, n in timeline], mode="lines",
                               line={"shape": "hv", "color": lane.colour, "width": 2.5}, name=lane.label,
                               hovertemplate="%{x:.3f} s: %{y} tokens<extra>" + lane.label + "</extra>")
    return figure


UNREACHED = "no draft<br>examined here"  # drafting always stopped, or a draft before failed


def per_position_acceptance(speculative: Trace, gamma: int = 0) -> go.Figure:
    """Acceptance at draft position i among drafts the target examined, for positions 1 to γ (or as far as a
    round drafted); α̂ for comparison."""
    figure = base_figure("Acceptance by draft position", "draft position", "share accepted", legend_rows=PAGE_LEGEND_ROWS)
    counts = speculative.per_position_counts()
    if not counts:
        return with_hint(figure, ROUNDS_AT_LANE_END)
    # positions up to γ even where no round drafted that far (the confidence stop cut every round): a learner who
    # set γ = 3 asks where position 3 went
    counts += [(0, 0)] * (gamma - len(counts))
    # a position no draft reached (drafting stopped, or an earlier draft failed, every round) has no rate: no bar,
    # said in words, where a bar of 0 would read "every draft there was rejected"
    rates = [accepted / examined if examined else None for accepted, examined in counts]
    examined = [examined for _, examined in counts]
    positions = list(range(1, len(rates) + 1))
    figure.add_bar(
        x=positions, y=rates, name="per position", marker_color=COLORS["accepted"], customdata=examined,
        hovertemplate="position %{x}: %{y:.2f} of %{customdata} examined<extra></extra>",
    )
    for position, rate in zip(positions, rates):
        if rate is None:
            figure.add_annotation(x=position, y=0.04, yanchor="bottom", showarrow=False, text=UNREACHED,
                                  font={"size": 11, "color": "#777"})
    figure.add_scatter(
        x=positions, y=[speculative.acceptance_rate] * len(positions), mode="lines", name="α̂ (all)",
        line={"dash": "dash", "color": "#444"},
    )
    # each position's counts under its number, as the easy-and-hard chart does: a rate of 0 draws no bar and
    # "0 of 2" says the target did examine drafts there; on the bars the α̂ line crossed them
    ticks = [f"{position}<br>{accepted} of {seen}" if seen else str(position)
             for position, (accepted, seen) in zip(positions, counts)]
    figure.update_layout(yaxis={"range": [0, 1.05], "tickvals": [0, 0.2, 0.4, 0.6, 0.8, 1]},
                         xaxis={"tickmode": "array", "tickvals": positions, "ticktext": ticks})
    return figure


# The inspector's two distributions: the rule's q and p, or at temperature 0 (where those are one-hot on each
# model's pick) each model's softmax at temperature 1, the "… sure" the inspector's words quote.
RULE_SERIES = ("q (draft)", "p (target)")
SURE_SERIES = ("draft: how sure (softmax, T = 1)", "target: how sure (softmax, T = 1)")
DECISION_TOKENS = 10  # bars per series


def decision_distributions(event: RoundEvent, labels: Mapping[int, str], greedy: bool = False) -> go.Figure:
    """At the round's deciding position: q and p of the top tokens, and the residual if rejected.

    The deciding position is the first rejection (the correction comes from the residual
    norm(max(0, p − q))) or, for a fully accepted round, the bonus position (drawn from p). At temperature 0
    (`greedy`) the title names the target's own pick, as the words beside it do, and a run that recorded them
    (PositionDetail.temperature_one) draws how sure each model was instead of the rule's one-hot q and p.
    """
    position = event.num_accepted
    figure = base_figure(decision_title(event, labels, greedy), "token", "probability")
    if not event.details or position >= len(event.details):
        return with_hint(figure, "no distributions recorded for this round")
    detail = event.details[position]
    names = SURE_SERIES if detail.temperature_one else RULE_SERIES
    series = [(names[0], detail.draft_top, COLORS["draft"]), (names[1], detail.target_top, COLORS["target"]),
              ("residual norm(max(0, p−q))", detail.residual_top, COLORS["residual"])]
    series = [entry for entry in series if entry[1]]  # a bonus position has no q, a kept draft no residual
    # the drafted token and the target's own always get a bar, however unlikely
    must = [token.token_id for token in event.drafted[position : position + 1]] + [event.next_id]
    token_ids = list(dict.fromkeys(must + ordered_union([pairs for _, pairs, _ in series])))[:DECISION_TOKENS]
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
TITLE_LINE_PX = 18  # each further line of a title broken in two
TITLE_LINE_CHARS = 50  # what one title line holds at the width a phone's chart is laid out at (ui.PHONE_CHART_PX)
LEGEND_ROW_PX = 24  # one row of a horizontal legend


def two_line_title(head: str, tail: str) -> str:
    """`head tail` on one line where it fits a phone's chart, else broken before `tail`."""
    return f"{head} {tail}" if len(head) + len(tail) < TITLE_LINE_CHARS else f"{head}<br>{tail}"


def separate_title_and_legend(figure: go.Figure, legend_rows: int = 2) -> None:
    """Title in its own top band (the inspector's names tokens and runs long), legend in the `legend_rows` rows
    below it (room to wrap on a narrow page), just above the plot."""
    title_lines = 1 + (figure.layout.title.text or "").count("<br>")
    shift = TITLE_LINE_PX * (title_lines - 1)  # see the title's pad below
    top = TITLE_ROW_PX + 2 * shift + LEGEND_ROW_PX * legend_rows
    figure.update_layout(
        # plotly sets a title's first line where a one-line title's would be and the rest below it, so anchored at the
        # top, each further line moves it down by one, or its first line is cut
        title={"yref": "container", "y": 1.0, "yanchor": "top", "pad": {"t": 8 + shift},
               "x": 0.01, "xanchor": "left"},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "left", "x": 0.0},
        margin={"t": top},
        height=HEIGHT + top - MARGIN_TOP,  # the plot area keeps its height
    )


def legend_below(figure: go.Figure) -> None:
    """The legend at the figure's foot, under the axis title, as many rows as it needs: plotly grows the bottom
    margin to fit it, so a legend that wraps (a phone) never reaches the title."""
    figure.update_layout(legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "xanchor": "left",
                                 "x": 0.0})


def decision_title(event: RoundEvent, labels: Mapping[int, str], greedy: bool = False) -> str:
    position = event.num_accepted
    if len(event.emitted_ids) == event.num_kept_drafts:  # an accepted end-of-text left no room for the target's token
        return two_line_title(f"Round {event.round_index + 1}: the run ended at an accepted end-of-text;",
                              "the target's own token was not kept")
    if event.next_kind == "resample" and position < len(event.drafted):
        token = event.drafted[position]
        return two_line_title(f"Round {event.round_index + 1}, draft {position + 1}: {label_of(token.token_id, labels)} rejected",
                              f"→ {correction_word(greedy)} {label_of(event.next_id, labels)}")
    return two_line_title(f"Round {event.round_index + 1}: {every(event.gamma, 'draft')} accepted",
                          f"→ bonus {label_of(event.next_id, labels)}, {bonus_word(greedy)}")


def ordered_union(groups: Sequence[Sequence[tuple[int, float]]]) -> list[int]:
    """Token ids in order of their best probability across the groups."""
    best: dict[int, float] = {}
    for pairs in groups:
        for token_id, prob in pairs:
            best[token_id] = max(best.get(token_id, 0.0), prob)
    return sorted((token_id for token_id in best if best[token_id] > 0), key=lambda t: -best[t])


def unique_names(names: list[str], token_ids: list[int]) -> list[str]:
    """Category labels must differ: add the id where two tokens read the same."""
    return [f"{name} #{token_id}" if names.count(name) > 1 else name for name, token_id in zip(names, token_ids)]


def label_of(token_id: int, labels: Mapping[int, str]) -> str:
    """A token's label (quoted), or its id where it has no text."""
    text = labels.get(token_id)
    return f"#{token_id}" if text is None else quoted(text)


def quoted(text: str, limit: int = 23) -> str:
    """A token's text as a short, visible label: quotes, whitespace spelled out, a run of 3 or more spaces
    counted (␣×8: indented code would make endless labels)."""
    shown = re.sub(r" {3,}", lambda run: f"␣×{len(run.group())}", text.replace("\n", "↵").replace("\t", "⇥"))
    if shown.strip() == "":
        shown = shown.replace(" ", "␣")
    return repr(shown if len(shown) <= limit else shown[: limit - 1] + "…")
