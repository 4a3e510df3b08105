"""plots.py figures on hand-made events: no models, milliseconds."""

from __future__ import annotations

import dataclasses

from specviz.app import plots
from specviz.app.render import rule
from specviz.decoding.events import FinishEvent, PrefillEvent
from specviz.analysis.trace import Trace
from tests.test_render import bonus_round, make_gamma1_run, make_run, rejection_round


def gamma1_trace() -> Trace:
    """γ = 1, rejections in rounds 1 and 3 (nothing accepted), a bonus in round 2."""
    events = [
        PrefillEvent("speculative", 1, 2, 0.012, 1, 1),
        rejection_round(0, 1), bonus_round(1, 2), rejection_round(2, 4),
        FinishEvent("speculative", "max_new_tokens", 5),
    ]
    return Trace.from_events(events)


def test_rounds_that_accept_nothing_are_marked():
    figure = plots.accepted_per_round(gamma1_trace(), 1)
    marks = [trace for trace in figure.data if trace.type == "scatter"]
    assert len(marks) == 1, "one trace of rejection marks"
    assert list(marks[0].x) == [1, 3] and list(marks[0].y) == [0, 0]
    assert marks[0].cliponaxis is False  # a mark on the axis line is drawn whole


def test_rejection_marks_sit_on_top_of_their_bars():
    figure = plots.accepted_per_round(make_run().speculative.trace, 3)
    marks = next(trace for trace in figure.data if trace.type == "scatter")
    assert list(marks.x) == [1] and list(marks.y) == [1]  # round 1 accepted one draft, then rejected


def test_bars_have_one_width():
    # Overlaid bar traces with different x spacings got different widths (rounds 1, 3 vs 2).
    figure = plots.accepted_per_round(gamma1_trace(), 1)
    bars = [trace for trace in figure.data if trace.type == "bar"]
    widths = {bar.width for bar in bars}
    assert len(bars) == 3 and len(widths) == 1 and None not in widths  # drafted, all accepted, rejection


def test_each_bar_stands_in_the_outline_of_the_drafts_proposed():
    """A bar of 2 under the γ = 3 line: the outline says whether 2 were drafted (the drafter stopped unsure) or 3
    with the third never examined after a rejection."""
    trace = make_run().speculative.trace  # round 1: 3 drafted, 1 accepted then a rejection; round 2: 3 of 3
    stopped = dataclasses.replace(trace.rounds[1], round_index=2, gamma=2, stopped_unsure=True)
    trace = Trace(lane="speculative", rounds=[*trace.rounds, stopped])
    drafted = plots.accepted_per_round(trace, 3).data[0]
    assert drafted.type == "bar" and drafted.name == "drafted"
    assert list(drafted.x) == [1, 2, 3] and list(drafted.y) == [3, 3, 2]
    assert [why for [why] in drafted.customdata] == ["", "", plots.DRAFTED_WHY]


def test_one_draft_bonus_title_is_singular():
    run = make_gamma1_run()
    title = plots.decision_title(run.speculative.trace.rounds[0], run.speculative.labels)
    assert "the 1 draft accepted" in title and "all 1" not in title


def title_bottom_px(layout) -> float:
    """Lowest pixel (from the figure's top) the title's text can reach."""
    size = layout.title.font.size or 14
    if layout.title.yref == "container" and layout.title.yanchor == "top":
        return (1 - layout.title.y) * layout.height + (layout.title.pad.t or 0) + 1.4 * size
    return layout.margin.t / 2 + 0.7 * size  # plotly's default: centred in the top margin


def legend_top_px(layout, rows: int) -> float:
    """Highest pixel a horizontal legend of `rows` rows, standing on the plot's top edge, reaches."""
    assert layout.legend.yanchor == "bottom" and layout.legend.y >= 1.0
    return layout.margin.t - (layout.legend.y - 1.0) * layout.height - rows * plots.LEGEND_ROW_PX


def test_inspector_title_and_legend_do_not_overlap():
    run = make_run()
    figure = plots.decision_distributions(run.speculative.trace.rounds[0], run.speculative.labels)
    assert len(figure.data) == 3  # q, p and the residual: the widest legend
    for rows in (1, 2):  # the legend wraps on a narrow page
        assert title_bottom_px(figure.layout) <= legend_top_px(figure.layout, rows)


def test_a_bonus_round_chart_has_no_empty_draft_series():
    from specviz.decoding.events import PositionDetail, RoundEvent
    from tests.rounds import chain, draft

    detail = PositionDetail(((3, 0.9),), ((3, 0.95),), ())
    bonus = PositionDetail((), ((7, 0.6), (8, 0.4)), ())
    event = RoundEvent("speculative", 0, 1, 1, chain(draft(3, 0.9, 0.95, 0.2, "accepted"), then=(7, "bonus")), 1, 7,
                       "bonus", (3, 7), 0.001, 0.01, 1, 1, details=(detail, bonus))
    figure = plots.decision_distributions(event, {})
    assert [bar.name for bar in figure.data] == ["p (target)"]


def test_the_decision_chart_names_the_targets_own_pick_at_temperature_0():
    """Beside step mode's "no coin is drawn", the chart's title said "→ resampled ' Edinburgh'"."""
    from specviz.decoding.events import PositionDetail, RoundEvent
    from tests.rounds import chain, draft

    rejected = RoundEvent("speculative", 0, 1, 1, chain(draft(3, 1.0, 0.0, 0.6, "rejected"), then=(7, "resample")), 0, 7,
                          "resample", (7,), 0.001, 0.01, 1, 1,
                          details=(PositionDetail(((3, 1.0),), ((7, 1.0),), ((7, 1.0),)),))
    labels = {3: " Scotland", 7: " Edinburgh"}
    # too long for one line of a phone's chart: broken before the arrow, and the figure keeps room for two lines
    pick, resampled = rule.correction_word(greedy=True), rule.correction_word(greedy=False)
    assert pick == rule.OWN_PICK  # at temperature 0 the chart names the target's own pick, as the words beside it do
    assert plots.decision_title(rejected, labels, greedy=True) == (
        f"Round 1, draft 1: ' Scotland' rejected<br>→ {pick} ' Edinburgh'")
    assert plots.decision_title(dataclasses.replace(rejected, round_index=0), {3: "a", 7: "b"}) == (
        f"Round 1, draft 1: 'a' rejected → {resampled} 'b'")
    assert f"→ {resampled} ' Edinburgh'" in plots.decision_title(rejected, labels)
    two_lines = plots.decision_distributions(rejected, labels, greedy=True)
    assert two_lines.layout.title.text.endswith(f"{pick} ' Edinburgh'")
    one_line = plots.decision_distributions(rejected, {3: "a", 7: "b"})
    assert two_lines.layout.margin.t == one_line.layout.margin.t + 2 * plots.TITLE_LINE_PX
    # a run that recorded how sure each model was (temperature 1) draws that, named so, and no residual
    sure = dataclasses.replace(rejected, details=(PositionDetail(((3, 0.11), (7, 0.05)), ((7, 0.71), (3, 0.2)), (), True),))
    figure = plots.decision_distributions(sure, labels, greedy=True)
    assert [bar.name for bar in figure.data] == list(plots.SURE_SERIES)
    assert dict(zip(figure.data[0].x, figure.data[0].y))["' Scotland'"] == 0.11


def test_a_round_cut_by_end_of_text_does_not_claim_a_bonus():
    run = make_gamma1_run()
    event = run.speculative.trace.rounds[0]
    cut = dataclasses.replace(event, emitted_ids=event.emitted_ids[: event.num_accepted])  # EOS was the last kept draft
    title = plots.decision_title(cut, run.speculative.labels)
    assert "bonus" not in title and "not kept" in title
    assert "bonus" in plots.decision_title(event, run.speculative.labels)
