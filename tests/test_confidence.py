"""Easy and hard tokens: acceptance against the target's confidence, from the engine's events to
the chart and its sentence. Hand-made events (milliseconds), and one tiny-pair run checked against the
target's own forward."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from specviz.analysis import confidence
from specviz.analysis.trace import Trace
from specviz.app import plots, plots_confidence, render
from specviz.app.gamma_sweep import measure as sweep, page as sweep_page
from specviz.app.charts.page import chart_values
from specviz.decoding.events import (
    FinishEvent, PrefillEvent, RoundEvent, RoundShape, TokenKind, TreeNode, event_from_dict, event_to_dict,
)
from tests.rounds import chain, draft, guess, rivals
from tests.test_render import decode


def judged(token_id: int, sure: float, verdict: TokenKind) -> TreeNode:
    """A greedy draft (q one-hot, p one-hot on the target's pick) the drafter was 50% sure of, the target `sure`."""
    accepted = verdict == "accepted"
    return draft(token_id, 1.0, float(accepted), 0.0, verdict, draft_confidence=0.5, target_confidence=sure)


def spec_round(index: int, drafts: tuple[TreeNode, ...], shape: RoundShape = "chain") -> RoundEvent:
    """A round of these drafts: a chain, or rival guesses for its first position (shape "rivals"); the target's 7
    after the accepted ones."""
    taken = tuple(node.token_id for node in drafts if node.verdict == "accepted")
    gamma = len(drafts) if shape == "chain" else 1
    kind = "bonus" if len(taken) == gamma else "resample"
    nodes = (chain if shape == "chain" else rivals)(*drafts, then=(7, kind))
    return RoundEvent("speculative", index, 1 + 3 * index, gamma, nodes, len(taken), 7, kind, taken + (7,),
                      0.004, 0.02, gamma, 1, shape=shape)


def confidence_trace() -> Trace:
    """Round 1: ' f' (90% sure) accepted, '(x' (30%) rejected, '):' never examined. Round 2: a first
    position with a rival (taken: counted once; a rival round drafts one position, as the engine's do). Round 3:
    ' x' (100%) accepted. Round 4: 'return' (15%) rejected."""
    return Trace.from_events([
        PrefillEvent("speculative", 1, 1, 0.01, 1, 1),
        spec_round(0, (judged(2, 0.9, "accepted"), judged(3, 0.3, "rejected"), judged(4, 0.2, "unexamined"))),
        spec_round(1, (guess(5, 0.5, 1.0, "accepted", r=0.0, target_confidence=0.85),
                       guess(8, 0.5, 0.0, "unexamined", target_confidence=0.85)), shape="rivals"),
        spec_round(2, (judged(7, 1.0, "accepted"),)),
        spec_round(3, (judged(6, 0.15, "rejected"),)),
        FinishEvent("speculative", "max_new_tokens", 9),
    ])


def test_judged_drafts_are_the_examined_ones_and_a_rival_position_counts_once():
    drafts = confidence.judged_drafts(confidence_trace())
    assert [(d.token_id, d.accepted) for d in drafts] == [(2, True), (3, False), (5, True), (7, True), (6, False)]
    assert len(drafts) == confidence_trace().num_examined  # the same drafts α̂ counts
    assert [(d.round_index, d.draft_index) for d in drafts] == [(0, 0), (0, 1), (1, 0), (2, 0), (3, 0)]
    older = Trace.from_events([spec_round(0, (dataclasses.replace(judged(2, 0.9, "accepted"), target_confidence=None),))])
    assert confidence.judged_drafts(older) == []  # a run recorded before the confidence was kept: no points
    hint = plots_confidence.run_chart(older, {}).layout.annotations[0].text
    assert "this recording predates the target's confidence" in hint
    assert plots_confidence.run_chart(Trace(), {}).layout.annotations[0].text == plots.ROUNDS_AT_LANE_END


def test_buckets_count_every_draft_once_and_one_lands_in_the_last():
    buckets = confidence.bucket_drafts(confidence.judged_drafts(confidence_trace()))
    assert [b.label for b in buckets] == ["0.0–0.2", "0.2–0.4", "0.4–0.6", "0.6–0.8", "0.8–1.0"]
    assert [(b.num_accepted, b.num_drafts) for b in buckets] == [(0, 1), (0, 1), (0, 0), (0, 0), (3, 3)]
    assert buckets[-1].rate == 1.0 and buckets[2].rate is None
    assert confidence.bucket_of(0.2) == 1 and confidence.bucket_of(0.0) == 0 and confidence.bucket_of(0.7999) == 3


def test_the_sentence_states_this_runs_numbers():
    drafts = confidence.judged_drafts(confidence_trace())
    assert confidence.confidence_sentence(drafts) == (
        "In this run, where the target was at least 80% sure, 3 of 3 drafts were accepted (100%); "
        "where it was under 40% sure, 0 of 2 drafts were accepted (0%). These counts are too few to tell the two "
        "apart.")  # Fisher's p = 0.1: five drafts cannot show that sure positions are easier
    assert confidence.confidence_sentence(drafts * 3).endswith("(0%).")  # 9 of 9 against 0 of 6: p < 0.001
    only_sure = [d for d in drafts if d.target_confidence >= 0.8][:1]
    assert confidence.confidence_sentence(only_sure, "the sweep's runs") == (
        "In the sweep's runs, where the target was at least 80% sure, 1 of 1 draft was accepted (100%). "
        "The target was never under 40% sure at a judged draft.")
    middling = [dataclasses.replace(d, target_confidence=0.5) for d in drafts]
    assert "between 40% and 80% sure at every judged draft: 3 of 5 drafts were accepted (60%)" in (
        confidence.confidence_sentence(middling))
    assert "No judged drafts" in confidence.confidence_sentence([])
    assert "fared worse" not in confidence.confidence_sentence(drafts)
    # A sampled run with a drafter that often picks another token can reverse the lesson; the sentence says why,
    # once the counts show it beyond chance.
    reversed_run = [dataclasses.replace(d, accepted=d.target_confidence < 0.4) for d in drafts]
    assert "Here the sure positions fared worse: a position is easy only when the drafter guesses the target's " \
           "clear pick" in confidence.confidence_sentence(reversed_run * 3)
    few = confidence.confidence_sentence(reversed_run)  # 0 of 3 against 2 of 2: p = 0.1
    assert "fared worse" not in few and few.endswith(confidence.TOO_FEW)


def test_a_sweeps_share_a_little_lower_where_the_target_was_sure_is_called_chance_not_a_lesson():
    """What the page said after a γ sweep: 3 of 5 drafts accepted where the target was sure against 8 of 13
    where it was not, "the sure positions fared worse" — a gap that chance makes more often than not."""
    def drafts(accepted: int, judged: int, sure: float) -> list:
        return [confidence.JudgedDraft(1, sure, i < accepted, i, 0) for i in range(judged)]
    sentence = confidence.confidence_sentence(drafts(3, 5, 0.9) + drafts(8, 13, 0.2), "the sweep's runs")
    assert "fared worse" not in sentence and sentence.endswith(confidence.TOO_FEW)
    sentence = confidence.confidence_sentence(drafts(40, 80, 0.9) + drafts(13, 24, 0.2))  # 50 % against 54 %
    assert "fared worse" not in sentence and sentence.endswith(confidence.TOO_FEW)
    assert "fared worse" in confidence.confidence_sentence(drafts(20, 80, 0.9) + drafts(18, 24, 0.2))


def test_fisher_p_value_matches_scipy():
    from scipy.stats import fisher_exact
    for hits_first, num_first, hits_second, num_second in [(3, 5, 8, 13), (0, 3, 2, 2), (40, 80, 13, 24),
                                                           (20, 80, 18, 24), (5, 5, 0, 7), (0, 1, 0, 1), (12, 40, 30, 41)]:
        expected = fisher_exact([[hits_first, num_first - hits_first], [hits_second, num_second - hits_second]]).pvalue
        ours = confidence.fisher_p_value(hits_first, num_first, hits_first + hits_second, num_first + num_second)
        assert abs(ours - expected) < 1e-9, (hits_first, num_first, hits_second, num_second, ours, expected)


def test_the_chart_draws_a_point_per_judged_draft_with_its_token_and_the_buckets_rates():
    drafts = confidence.judged_drafts(confidence_trace())
    figure = plots_confidence.acceptance_by_confidence(drafts, {2: " f", 3: "(x", 5: " x", 7: " x", 6: "return"})
    points = {trace.meta: trace for trace in figure.data if trace.type == "scatter"}
    assert sorted(points) == ["accepted", "rejected"]
    assert list(points["accepted"].hovertext) == ["' f'", "' x'", "' x'"] and list(points["rejected"].hovertext) == ["'(x'", "'return'"]
    assert list(points["accepted"].x) == [0.9, 0.85, 1.0]
    assert all(0.9 <= y <= 1.1 for y in points["accepted"].y) and all(-0.1 <= y <= 0.1 for y in points["rejected"].y)
    bars = next(trace for trace in figure.data if trace.type == "bar")
    assert list(bars.y) == [0.0, 0.0, 1.0] and list(bars.x) == pytest.approx([0.1, 0.3, 0.9])
    assert "rejected" in points["rejected"].hovertemplate and "sure" in points["rejected"].hovertemplate
    assert list(figure.layout.xaxis.ticktext) == ["0%–20%<br>0/1", "20%–40%<br>0/1", "40%–60%<br>0/0", "60%–80%<br>0/0",
                                                  "80%–100%<br>3/3"]  # a band with nothing accepted still says so
    assert figure.layout.xaxis.tickangle == 0  # level, on two lines: tilted, a phone's chart lost the last band's
    empty = plots_confidence.acceptance_by_confidence([], {})
    assert not empty.data and empty.layout.annotations[0].text == plots.ROUNDS_AT_LANE_END
    note = plots_confidence.confidence_note_html(drafts)
    assert 'data-drafts="5"' in note and "3 of 3 drafts were accepted" in note


def test_the_page_draws_it_with_the_runs_other_charts():
    run = render.RunView("x", [1], gamma=3, settings={"temperature": 0.0})
    for event in [PrefillEvent("baseline", 1, 1, 0.01, 1, 0), *confidence_trace().events()]:
        run.add(event, decode)
    values = chart_values(run)
    figure, note = values[4], values[5]
    assert figure.layout.title.text.startswith("Easy and hard tokens")
    assert sum(len(trace.x) for trace in figure.data if trace.type == "scatter") == 5
    assert "' f'" in next(trace for trace in figure.data if trace.meta == "accepted").hovertext  # the lane's own labels
    assert "at least 80% sure, 3 of 3 drafts were accepted" in note
    assert len(chart_values(None)) == len(values)  # the empty page has the same outputs


def test_a_chart_without_rounds_says_when_they_will_come_by_whether_it_is_live():
    """A live chart draws each round as it is decided; the others wait for a lane's end (their hint says so, where
    "as decided" would be wrong while the lanes take turns)."""
    from specviz.app.charts.page import CHARTS

    hints = {chart.elem_id: [a.text for a in figure.layout.annotations]
             for chart, figure in zip(CHARTS, chart_values(None)) if not chart.html}
    for chart in CHARTS:
        if chart.html:
            continue
        wrong = plots.ROUNDS_AT_LANE_END if chart.live else plots.NO_ROUND_YET
        assert wrong not in hints[chart.elem_id], chart.elem_id
    assert plots.NO_ROUND_YET in hints["chart-accepted"] and plots.ROUNDS_AT_LANE_END in hints["chart-alpha"]


def test_the_sweeps_chart_pools_its_runs_and_names_each_points_gamma():
    progress = sweep.SweepProgress(2, 2, {(2, 0): [(Trace(), confidence_trace())], (4, 0): [(Trace(), confidence_trace())]})
    drafts = progress.judged_drafts()
    assert len(drafts) == 10 and {d.gamma for d in drafts} == {2, 4}
    figure = sweep_page.sweep_confidence(drafts, {})
    accepted = next(trace for trace in figure.data if trace.meta == "accepted")
    assert " of a run at γ = 4" in [row[2] for row in accepted.customdata]
    assert "#2" in accepted.hovertext[0]  # no tokenizer: the id stands in for the text
    assert sweep_page.sweep_confidence([], {}).layout.annotations[0].text == "press Run sweep"


def test_a_confidence_survives_a_saved_run():
    for event in confidence_trace().rounds[1:3]:  # a rival round's taken guess, a chain's draft
        again = event_from_dict(event_to_dict(event))
        assert again == event and again.drafted[0].target_confidence == event.drafted[0].target_confidence
    assert confidence_trace().rounds[2].drafted[0].target_confidence == 1.0


def test_the_engine_records_the_targets_own_top_probability_at_each_draft():
    from specviz.decoding.config import DecodeConfig
    from specviz.decoding.engine import speculative_decode
    from tests.tiny_models import tiny_pair

    pair = tiny_pair("gpt2")
    prompt = [5, 6, 7]
    trace = Trace.from_events(speculative_decode(pair, prompt, DecodeConfig(temperature=0.0, max_new_tokens=16,
                                                                          gamma=3, draft_confidence=0.0)))
    ids = prompt + trace.token_ids
    with torch.inference_mode():
        probs = torch.softmax(pair.target(torch.tensor([ids])).logits[0].float(), dim=-1)  # (n, vocab)
    for event in trace.rounds:
        for index, token in enumerate(event.drafted):
            if index >= event.num_examined:
                continue
            at = len(prompt) + event.position + index - 1  # the row that predicts this draft's position
            assert token.target_confidence == pytest.approx(float(probs[at].max()), abs=1e-4)
    assert confidence.judged_drafts(trace) and len(confidence.judged_drafts(trace)) == trace.num_examined
