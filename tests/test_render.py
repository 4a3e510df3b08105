"""render.py and plots.py on hand-made events (no models, no server, milliseconds), and one real
greedy run of the tiny pair for the rival guesses it takes."""

from __future__ import annotations

import html as html_text
import json
import re
from html.parser import HTMLParser

import plotly.graph_objects as go
import pytest

from specviz.app import palette, plots, render
from specviz.app.inspector import words as inspector_words
from specviz.app.render import rule
from specviz.app.wording import as_sentence

from specviz.analysis import payoff
from specviz.decoding.events import FinishEvent, PositionDetail, PrefillEvent, RoundEvent
from specviz.analysis.trace import Trace
from tests.rounds import chain, draft, guess, rivals

VOCAB = ["<eos>", "def", " f", "(x", "):", "\n    ", "return", " x", " <b>", " & ${y}", "\t"]


def decode(ids):
    return "".join(VOCAB[i] for i in ids)




def detail(residual=()):
    return PositionDetail(((3, 0.6), (4, 0.2)), ((4, 0.5), (3, 0.3)), residual)


def make_run() -> render.RunView:
    run = render.RunView("x = 1\n", [1], gamma=3, settings={"temperature": 1.0})
    baseline = [
        PrefillEvent("baseline", 1, 2, 0.01, 1, 0),
        *(RoundEvent("baseline", i, i + 1, 0, (), 0, t, "target", (t,), 0.0, 0.02, 0, 1) for i, t in enumerate([3, 4, 5, 6, 7])),
        FinishEvent("baseline", "max_new_tokens", 6),
    ]
    speculative = [
        PrefillEvent("speculative", 1, 2, 0.012, 1, 1),
        RoundEvent(  # rejection at the second draft, third never examined, then a resample
            "speculative", 0, 1, 3,
            chain(draft(3, 0.6, 0.3, 0.2, "accepted"), draft(8, 0.5, 0.1, 0.9, "rejected"),
                  draft(9, 0.4, 0.2, 0.5, "unexamined"), then=(4, "resample")),
            1, 4, "resample", (3, 4), 0.006, 0.025, 3, 1,
            details=(detail(), detail(((4, 0.7), (5, 0.3))), detail(), detail()),
        ),
        RoundEvent(  # all accepted, plus a bonus
            "speculative", 1, 3, 3,
            chain(draft(5, 0.9, 0.95, 0.1, "accepted"), draft(6, 0.8, 0.9, 0.3, "accepted"),
                  draft(10, 0.5, 0.6, 0.2, "accepted"), then=(7, "bonus")),
            3, 7, "bonus", (5, 6, 10, 7), 0.006, 0.025, 3, 1,
            details=(detail(), detail(), detail(), detail()),
        ),
        FinishEvent("speculative", "max_new_tokens", 7),
    ]
    for event in baseline + speculative:
        run.add(event, decode)
    return run


def test_lanes_colour_every_kind_and_escape_text():
    run = make_run()
    baseline_html, speculative_html = render.lanes_html(run)
    assert baseline_html.count("tok-target") == 6
    for kind in ("accepted", "rejected", "unexamined", "resample", "bonus"):
        assert f"tok-{kind}" in speculative_html
    assert "&lt;b&gt;" in speculative_html and "<b>" not in speculative_html
    assert "&amp;" in speculative_html and "${" not in speculative_html and "&#36;&#123;y&#125;" in speculative_html
    assert "↵" in speculative_html  # newlines drawn
    assert 'data-done="true"' in speculative_html
    assert f"q(x) = 0.500 · p(x) = 0.100 · {rule.KEEP_CHANCE} = 0.200 · r = 0.900 → rejected" in speculative_html


def test_lane_text_joins_emitted_tokens_only():
    run = make_run()
    assert run.speculative.text == decode([2, 3, 4, 5, 6, 10, 7])
    assert run.baseline.text == decode([2, 3, 4, 5, 6, 7])


def test_stats_inspector_and_explainer():
    run = make_run()
    stats = render.stats_dict(run)
    assert stats["speculative"]["target_forward_passes"] == 3
    assert stats["baseline"]["target_forward_passes"] == 6
    assert abs(stats["acceptance_rate"] - 4 / 5) < 1e-9  # 1 of 2 examined, then 3 of 3
    json.dumps(stats)  # the API returns it as JSON
    html = render.stats_html(run)
    assert 'class="speedup"' in html and "×" in html
    assert inspector_words.default_round(run) == 0
    inspector = inspector_words.inspector_html(run, 0)
    assert inspector.count("inspect-row") == 4  # three drafts + the resample
    assert "not examined" in inspector
    explainer = render.explain_html(run)
    assert "In round 1" in explainer and "In round 2" in explainer
    assert [label for label, _ in inspector_words.round_choices(run)][0].startswith("round 1: 1/3 accepted, replacement")
    run.speculative.greedy = True  # at temperature 0 nothing is drawn: the correction is the target's own pick
    assert [label for label, _ in inspector_words.round_choices(run)][0].startswith("round 1: 1/3 accepted, replacement")


def test_figures_have_data():
    run = make_run()
    baseline, speculative = run.baseline.trace, run.speculative.trace
    figures = [
        plots.tokens_vs_time(baseline, speculative),
        plots.accepted_per_round(speculative, 3),
        plots.cumulative_acceptance(speculative),
        plots.per_position_acceptance(speculative),
        plots.decision_distributions(speculative.rounds[0], run.speculative.labels),
    ]
    for figure in figures:
        assert isinstance(figure, go.Figure) and len(figure.data) >= 1
    assert "×" in figures[0].layout.title.text
    residual = [trace for trace in figures[4].data if trace.name.startswith("residual")]
    assert residual and max(residual[0].y) == 0.7


def test_a_draft_position_no_round_reached_says_so_instead_of_a_zero_bar():
    """Round 1 of make_run drafted 3 but its second draft failed: its third was never examined, so position 3 has no
    rate (no bar, the words instead), not a rate of 0 that reads "rejected there"."""
    speculative = make_run().speculative.trace
    both = plots.per_position_acceptance(speculative)
    assert list(both.data[0].y) == [1.0, 0.5, 1.0] and not both.layout.annotations  # every position examined
    first = plots.per_position_acceptance(Trace(lane="speculative", rounds=speculative.rounds[:1]))
    assert list(first.data[0].y) == [1.0, 0.0, None]  # accepted, rejected, never examined
    assert list(first.layout.xaxis.ticktext) == ["1<br>1 of 1", "2<br>0 of 1", "3"]  # a rate of 0 draws no bar: its count says it
    [note] = first.layout.annotations
    assert note.text == plots.UNREACHED and note.x == 3
    # γ = 5 where no round drafted past 3 (the confidence stop): positions 4 and 5 are there, and say why empty
    wider = plots.per_position_acceptance(speculative, gamma=5)
    assert list(wider.data[0].y) == [1.0, 0.5, 1.0, None, None]
    assert [note.x for note in wider.layout.annotations] == [4, 5] and wider.layout.xaxis.ticktext[-1] == "5"


def test_empty_traces_give_hint_figures():
    empty = Trace(lane="speculative")
    for figure in (plots.accepted_per_round(empty, 4), plots.cumulative_acceptance(empty), plots.per_position_acceptance(empty)):
        assert len(figure.data) == 0 and figure.layout.annotations


# --- what a newcomer reads: hovers, plurals, whitespace and marks, an early end ------------------------------------


def bonus_round(index: int, position: int, gamma: int = 1) -> RoundEvent:
    """A round whose `gamma` drafts ("def" each) were all accepted, then the bonus " x"."""
    drafts = chain(*(draft(1, 0.9, 0.95, 0.1, "accepted") for _ in range(gamma)), then=(7, "bonus"))
    return RoundEvent("speculative", index, position, gamma, drafts, gamma, 7, "bonus", (1,) * gamma + (7,),
                      0.006, 0.025, gamma, 1, details=(detail(),) * (gamma + 1))


def rejection_round(index: int, position: int) -> RoundEvent:
    """A γ = 1 round whose only draft was rejected, then the resample "(x"."""
    return RoundEvent("speculative", index, position, 1, chain(draft(8, 0.5, 0.1, 0.9, "rejected"), then=(3, "resample")),
                      0, 3, "resample", (3,), 0.006, 0.025, 1, 1, details=(detail(((3, 1.0),)), detail()))


def make_gamma1_run(max_new_tokens: int = 8) -> render.RunView:
    """γ = 1: round 1 accepts its draft (bonus), round 2 rejects it, then the text ends (EOS) early."""
    run = render.RunView("x", [1], gamma=1, settings={"temperature": 1.0, "max_new_tokens": max_new_tokens})
    events = [
        PrefillEvent("baseline", 1, 2, 0.01, 1, 0),
        RoundEvent("baseline", 0, 1, 0, (), 0, 0, "target", (0,), 0.0, 0.02, 0, 1),
        FinishEvent("baseline", "eos", 2),
        PrefillEvent("speculative", 1, 2, 0.012, 1, 1),
        bonus_round(0, 1),
        rejection_round(1, 3),
        RoundEvent("speculative", 2, 4, 0, (), 0, 0, "target", (0,), 0.0, 0.02, 0, 1),
        FinishEvent("speculative", "eos", 5),
    ]
    for event in events:
        run.add(event, decode)
    return run


def test_unexamined_draft_tooltip_says_its_r_was_unused():
    _, speculative_html = render.lanes_html(make_run())
    assert "r = 0.500 (unused) → not examined" in speculative_html
    assert "r = 0.900 → rejected" in speculative_html  # a decided draft's r was used


def test_counts_of_one_are_singular():
    run = make_gamma1_run()
    _, speculative_html = render.lanes_html(run)
    assert "all 1 drafts" not in speculative_html and rule.bonus_reason("the 1 draft", False) in speculative_html
    inspector = inspector_words.inspector_html(run, 0)
    assert "proposed 1 token;" in inspector and "checked it" in inspector and "(1 draft pass)" in inspector
    explainer = render.explain_html(run)
    texts = run.speculative.round_texts[0]
    story = rule.bonus_story("the 1 draft", True, render.tokens.inline_token(texts.drafted[0], "accepted"),
                             render.tokens.inline_token(texts.next_text, "bonus"))
    assert f"{story}: 2 tokens for one target pass" in explainer and "1 token for one target pass" in explainer
    assert "1 tokens" not in explainer + inspector + speculative_html
    lone = render.LaneView("baseline", [1], "x")
    lone.add(PrefillEvent("baseline", 1, 2, 0.01, 1, 0), decode)
    assert "1 token ·" in lone.html("t")


def test_a_run_whose_drafts_saved_no_pass_is_not_told_it_made_fewer():
    """Every draft rejected (a French answer with the default pair's head, 2026-12-05): "3 passes instead of 3.
    Fewer passes are not yet a speedup" said nothing true; the explainer says none were saved."""
    run = render.RunView("x", [1], gamma=1, settings={"temperature": 0.0, "max_new_tokens": 8})
    events = [PrefillEvent("baseline", 1, 2, 0.01, 1, 0),
              RoundEvent("baseline", 0, 1, 0, (), 0, 0, "target", (0,), 0.0, 0.02, 0, 1),
              RoundEvent("baseline", 1, 2, 0, (), 0, 0, "target", (3,), 0.0, 0.02, 0, 1),
              FinishEvent("baseline", "eos", 3),
              PrefillEvent("speculative", 1, 2, 0.012, 1, 1), rejection_round(0, 1), rejection_round(1, 2),
              FinishEvent("speculative", "eos", 3)]
    for event in events:
        run.add(event, decode)
    explainer = render.explain_html(run)
    assert "made 3 passes, no fewer than the target alone's 3: the drafter's steps" in explainer
    assert "instead of 3" not in explainer and "Fewer passes" not in explainer
    sampled = render.explain_html(make_gamma1_run())  # lanes of 5 and 2 tokens: each lane's own count
    assert "made 4 passes for 5 tokens (the target alone: 2 for 2). Fewer passes are not yet a speedup" in sampled


def test_explainer_cites_rounds_in_order():
    run = make_gamma1_run()  # the bonus example is round 1, the rejection example round 2
    explainer = render.explain_html(run)
    assert 0 <= explainer.index("In round 1") < explainer.index("In round 2")


def test_whitespace_only_tokens_are_drawn_visibly():
    space = render.token_span("  ", "accepted", "t")
    assert "␣␣" in space and 'class="ws"' in space
    assert "⇥" in render.token_span("\t", "target", "t")
    indented = render.token_span("\n    ", "accepted", "t")
    assert "↵" in indented and "\n    " in indented and "␣" not in indented  # code keeps its shape
    assert "␣" not in render.token_span(" x", "accepted", "t")


def test_an_end_of_text_token_is_drawn_as_a_mark_with_its_name_in_the_hover():
    for name in ("<|im_end|>", "<|endoftext|>", "</s>"):
        span = render.token_span(name, "bonus", "the bonus")
        shown = span[span.index(">", span.index("title=")) + 1:]  # after the opening tag: what the reader sees
        assert "‹end›" in shown and "&lt;" not in shown, span
        assert f'title="{render.tokens.escape_text(name)}: the end-of-text token' in span and "the bonus" in span
    assert "‹end›" not in render.token_span("<|im_start|>", "target", "t") + render.token_span(" end", "target", "t")


def test_a_chat_templates_start_marker_is_drawn_as_a_mark_not_raw():
    """A sampled draft may propose <|im_start|>: the lane draws a short mark, the raw name only in its hover."""
    span = render.token_span("<|im_start|>", "rejected", "the draft")
    shown = span[span.index(">", span.index("title=")) + 1:]
    assert "‹start›" in shown and "&lt;" not in shown and "im_start" not in shown, span
    assert "a marker of the chat template" in span and "the draft" in span
    assert "‹" not in render.token_span("<b>", "accepted", "t") + render.token_span(" start", "accepted", "t")


def test_whitespace_marks_leave_the_text_unchanged():
    run = render.RunView("x", [1], gamma=0, settings={})
    run.add(PrefillEvent("baseline", 1, 10, 0.01, 1, 0), decode)  # "\t"
    assert run.baseline.text == "\t" and "⇥" in render.lanes_html(run)[0]


def test_struck_punctuation_stays_legible():
    for kind in ("rejected", "unexamined"):
        assert "font-weight:700" in render.token_span(",", kind, "t")
        assert "font-weight:700" not in render.token_span(" word", kind, "t")
    assert "font-weight:700" not in render.token_span(",", "accepted", "t")
    assert "text-decoration-color:rgba(" in palette.TOKEN_STYLES["rejected"]


def test_early_end_of_text_is_said_in_the_lane_and_the_stats():
    run = make_gamma1_run(max_new_tokens=8)
    _, speculative_html = render.lanes_html(run)
    assert 'data-done="true"' in speculative_html
    assert "stopped at end of text before the 8-token limit" in speculative_html
    stats = render.stats_html(run)
    assert "why it stopped" in stats and "stopped at end of text before the 8-token limit" in stats
    assert "done (token limit)" in render.stats_html(make_run())  # the other ending, said too


# --- claims the page checks rather than asserts -----------------------------------------


def greedy_pair_of_lanes(speculative_ids: list[int]) -> render.RunView:
    """Baseline [2, 3, 4, 5]; the speculative lane emits `speculative_ids` after the same first token."""
    run = render.RunView("x", [1], gamma=3, settings={"temperature": 0.0, "max_new_tokens": 4})
    events = [
        PrefillEvent("baseline", 1, 2, 0.01, 1, 0),
        *(RoundEvent("baseline", i, i + 1, 0, (), 0, t, "target", (t,), 0.0, 0.02, 0, 1) for i, t in enumerate([3, 4, 5])),
        FinishEvent("baseline", "max_new_tokens", 4),
        PrefillEvent("speculative", 1, 2, 0.01, 1, 1),
        RoundEvent("speculative", 0, 1, 2,
                   chain(*(draft(t, 1.0, 1.0, 0.5, "accepted") for t in speculative_ids[:2]), then=(speculative_ids[2], "bonus")),
                   2, speculative_ids[2], "bonus", tuple(speculative_ids), 0.004, 0.03, 2, 1),
        FinishEvent("speculative", "max_new_tokens", 4),
    ]
    for event in events:
        run.add(event, decode)
    return run


def test_the_card_says_a_stopped_greedy_lane_agrees_so_far_not_that_it_drew_another_sample():
    run = render.RunView("x", [1], gamma=3, settings={"temperature": 0.0, "max_new_tokens": 4})
    for event in (
        PrefillEvent("baseline", 1, 2, 0.01, 1, 0),
        *(RoundEvent("baseline", i, i + 1, 0, (), 0, t, "target", (t,), 0.0, 0.02, 0, 1) for i, t in enumerate([3, 4, 5])),
        FinishEvent("baseline", "max_new_tokens", 4),
        PrefillEvent("speculative", 1, 2, 0.01, 1, 1),
        RoundEvent("speculative", 0, 1, 1, chain(draft(3, 1.0, 1.0, 0.5, "accepted"), then=(4, "bonus")), 1, 4, "bonus", (3, 4),
                   0.004, 0.03, 1, 1),
        FinishEvent("speculative", "stopped", 3),
    ):
        run.add(event, decode)
    card = render.stats_html(run).split('class="arithmetic"')[0]
    assert "✓ so far" in card and "agrees wherever both have tokens (speculative 3, the target alone 4)" in card
    assert "stopped: the lanes did unequal work" in card and "the run did not finish" in card
    assert "different samples" not in card and "parted" not in card


def test_identity_is_checked_token_by_token_not_assumed():
    same = render.stats_html(greedy_pair_of_lanes([3, 4, 5]))
    assert 'class="agree"' in same and "checked token by token (4 tokens)" in same
    parted = greedy_pair_of_lanes([3, 6, 5])
    html = render.stats_html(parted, divergence_gap=0.0123)
    assert 'class="agree"' not in html and 'data-index="2"' in html
    assert "parts from the target alone at token 3" in html and "top-2 logit gap there is 0.0123" in html
    assert render.stats_dict(parted)["identical_tokens"] == {"speculative": False}


def test_sampled_lanes_say_same_distribution_not_same_sample():
    run = make_run()  # temperature 1, lanes differ
    stats = render.stats_html(run)
    assert 'class="differ"' in stats and "the same distribution, not the same text" in stats
    assert "each lane draws its own random sample, so their texts can differ" in render.explain_html(run)
    assert "identical" not in stats
    same = greedy_pair_of_lanes([3, 4, 5])  # both samples came out the same (as top-k 1 always makes them)
    same.settings["temperature"] = 0.7
    explained = render.explain_html(same)
    assert "each lane draws its own random sample, here both came out the same text" in explained
    assert "texts can differ" not in explained and "both drew the same text" in render.stats_html(same)


def test_a_sampled_run_whose_texts_differ_is_never_quoted_as_a_speedup():
    """The card says "No verdict" there, so nothing else may call its tokens/s ratio a speedup: not the card's
    speed tile, the status line, the race chart's title or the arithmetic."""
    from specviz.app.run_section.words import done_summary
    from specviz.app.render.stats import arithmetic_html, comparison_of
    from specviz.app.render.verdict import speedup_is_quoted

    run = make_run()  # temperature 1: the lanes drew different texts
    ratio = render.stats_dict(run)["speedup"]
    card = visible_text(render.stats_html(run))
    assert "No verdict from this run" in card and f"{ratio:.2f}×" not in card.split("No verdict")[0]
    assert "not a speedup: two samples of different texts" in card
    assert "×" not in done_summary(run)
    title = plots.tokens_vs_time(run.baseline.trace, run.speculative.trace,
                                 quote_speedup=speedup_is_quoted(run)).layout.title.text
    assert "×" not in title
    arithmetic = visible_text(arithmetic_html(run, comparison_of(run)))
    assert "measures no speedup" in arithmetic and "the clock measured" not in arithmetic
    same = timed_run(0.02, temperature=0.8)  # sampled lanes that happened to write one text: a speedup
    assert speedup_is_quoted(same) and f"{render.stats_dict(same)['speedup']:.2f}×" in visible_text(render.stats_html(same))
    assert "×" not in done_summary(same)  # the card says it, once


def test_a_verify_cheaper_than_a_step_is_called_the_clocks_noise(capsys):
    """v < 1 reads as if checking three tokens cost less than writing one: the gap paragraph says what it measured,
    and the command line's figures say it in the same words."""
    from specviz.app.render.stats import comparison_of, gap_text
    from specviz.cli.terminal import print_figures

    faster = timed_run(0.016)  # a verify of 16 ms against steps of 20 ms
    assert comparison_of(faster).verify_cost == pytest.approx(0.8)
    assert "A verify cost below 1 (v = 0.80) is the clock's" in gap_text(faster, comparison_of(faster))
    assert "took 20 % less time than the target alone's steps" in gap_text(faster, comparison_of(faster))
    slower = timed_run(0.025)
    assert "below 1" not in gap_text(slower, comparison_of(slower))
    print_figures(faster)
    assert "A verify cost below 1 (v = 0.80) is the clock's" in capsys.readouterr().out
    print_figures(slower)
    assert "below 1" not in capsys.readouterr().out


def test_the_prediction_uses_the_measured_verify_cost_and_one_run_is_called_noisy():
    from specviz.app.render.stats import arithmetic_html, comparison_of

    run = make_run()
    stats = render.stats_dict(run)
    # verify rounds took 0.025 s against 0.02 s baseline steps
    assert stats["verify_cost"] == 0.025 / 0.02
    assert stats["predicted_with_verify"] < stats["predicted_speedup"]
    html = render.stats_html(run)
    assert "v = 1.25" in html and 'class="predicted-with-verify"' in html
    # where to watch one run move is said once, inside the verdict's noise detail, not again in the arithmetic;
    # these lanes wrote different texts, so no speedup is quoted and no noise pointed at
    assert 'class="noise-note"' not in html and 'class="noise-note"' not in arithmetic_html(run, comparison_of(run))
    same = render.stats_html(timed_run(0.02, temperature=0.8))
    verdict_detail = same.split('<details class="verdict-detail"')[1].split("</details>")[0]
    assert same.count('class="noise-note"') == 1 and 'class="noise-note"' in verdict_detail and "γ sweep" in verdict_detail
    # the prediction is the arithmetic's, said once: How it works tells the rounds' counts and points there
    explainer = render.explain_html(run)
    assert "v = 1.25" not in explainer and "Show the arithmetic" in explainer
    assert visible_text(html).count("Leviathan") == 1  # the arithmetic's sentence; its table has no second copy


def test_stopped_lanes_say_so():
    run = render.RunView("x", [1], gamma=3, settings={"temperature": 1.0})
    run.add(PrefillEvent("baseline", 1, 2, 0.01, 1, 0), decode)
    assert "generating…" in render.lanes_html(run, active="baseline")[0]
    # The lane about to run first reads the prompt, which takes long for a long one: it says so.
    assert "reading the prompt…" in render.lanes_html(run, active="speculative")[1]
    going = re.search(r"why it stopped</td>(.*?)</tr>", render.stats_html(run)).group(1)
    assert re.findall(r">([^<]*)</td>", going) == ["—", "—"]  # a run still going says nothing yet
    run.cut_short = True  # as the page marks a run it shows stopped (ui_handlers.stopped_values)
    baseline_html, speculative_html = render.lanes_html(run, active="baseline")
    assert "generating" not in baseline_html + speculative_html
    assert "stopped" in baseline_html and "not run (stopped)" in speculative_html
    # The stats' "why it stopped" row gives the reason beside a lane saying "stopped", never "—".
    stats = render.stats_html(run)
    row = re.search(r"why it stopped</td>(.*?)</tr>", stats).group(1)
    assert re.findall(r">([^<]*)</td>", row) == ["stopped", "not run (stopped)"], row


def test_the_resampled_token_always_has_its_bar_and_its_probabilities():
    """A correction drawn from the residual's tail (outside its top 8) is still shown with q, p and
    its residual probability, and the chart has a bar for it."""
    import torch

    from specviz.decoding.rounds import describe_positions
    from specviz.decoding.sampling import Verdict

    vocab = 40
    target = torch.full((2, vocab), 0.5 / (vocab - 10))  # (γ+1, vocab)
    target[:, :10] = 0.05
    draft_probs = torch.zeros(1, vocab)  # (γ, vocab)
    draft_probs[0, 0] = 1.0
    residual = (target[0] - draft_probs[0]).clamp_min(0)
    residual /= residual.sum()
    tail_id = 33  # not in the residual's top 8 (ids 1..9 are likelier)
    verdict = Verdict(0, tail_id, False, *(torch.zeros(1) for _ in range(4)), residual)
    details = describe_positions([0], draft_probs, target, verdict.num_accepted, verdict.next_id, verdict.residual)
    assert tail_id in dict(details[0].residual_top) and tail_id in dict(details[0].target_top)
    assert dict(details[0].residual_top)[tail_id] == pytest.approx(float(residual[tail_id]))
    event = RoundEvent("speculative", 0, 1, 1, chain(draft(0, 1.0, 0.05, 0.9, "rejected"), then=(tail_id, "resample")), 0,
                       tail_id, "resample", (tail_id,), 0.001, 0.01, 1, 1, details=details)
    figure = plots.decision_distributions(event, {tail_id: "tail"})
    assert all(any("tail" in name for name in bar.x) for bar in figure.data)  # q, p and the residual
    run = render.RunView("x", [1], gamma=1, settings={"temperature": 1.0})
    run.add(PrefillEvent("speculative", 1, 2, 0.01, 1, 1), decode_any)
    run.add(event, decode_any)
    row = inspector_words.inspector_html(run, 0).split('inspect-resample')[1]
    assert f"residual probability {float(residual[tail_id]):.3f}" in row
    assert row.count(">—<") == 2  # only min(1, p/q) and r stay empty


def decode_any(ids):
    return "".join(f"<{i}>" for i in ids)


# --- one verdict on whether speculation pays ----------------------------------------------------


def timed_run(speculative_verify_s: float, temperature: float = 0.0, num_prompt: int = 1, **settings) -> render.RunView:
    """Greedy, identical lanes of 4 tokens after a prompt of `num_prompt` ids; the speculative lane's one round
    takes `speculative_verify_s`."""
    run = render.RunView("x", [1] * num_prompt, gamma=2, settings={"temperature": temperature, "max_new_tokens": 4, **settings})
    events = [
        PrefillEvent("baseline", num_prompt, 2, 0.01, 1, 0),
        *(RoundEvent("baseline", i, i + 1, 0, (), 0, t, "target", (t,), 0.0, 0.02, 0, 1) for i, t in enumerate([3, 4, 5])),
        FinishEvent("baseline", "max_new_tokens", 4),
        PrefillEvent("speculative", num_prompt, 2, 0.01, 1, 1),
        RoundEvent("speculative", 0, 1, 2, chain(draft(3, 1.0, 1.0, 0.5, "accepted"), draft(4, 1.0, 1.0, 0.5, "accepted"),
                                                 then=(5, "bonus")),
                   2, 5, "bonus", (3, 4, 5), 0.004, speculative_verify_s, 2, 1),
        FinishEvent("speculative", "max_new_tokens", 4),
    ]
    for event in events:
        run.add(event, decode)
    return run


@pytest.mark.parametrize("num_prompt, said", [(40, "the bench on held-out prompts of 7–64 tokens"),
                                               (2000, "the bench on long prompts of 292–2,501 tokens")])
def test_the_arithmetic_compares_with_plain_transformers_on_prompts_as_long_as_the_runs(monkeypatch, tmp_path,
                                                                                          num_prompt, said):
    """The run's own prompt length picks the record its line against plain transformers reads."""
    from specviz.analysis.expectations import expect
    from specviz.app.render import stats
    from tests.test_expectations import timed_record, write_records

    records = write_records(tmp_path, timed_record("held-out", 1.45, 1.99, (7, 64)),
                            timed_record("long", 1.19, 1.33, (292, 2501)))
    monkeypatch.setattr(stats, "expect_here", lambda **_: expect("cpu-amx", "float32", records))
    run = timed_run(0.03, num_prompt=num_prompt, precision="float32")
    arithmetic = visible_text(stats.arithmetic_html(run, stats.comparison_of(run)))
    assert said in arithmetic and ("1.33×" in arithmetic) == (num_prompt == 2000)


def visible_text(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


def test_a_gain_inside_the_noise_is_not_shown_rather_than_refuted():
    """The walk of 2026-11-26: one run of 1.27× read "Here speculation does not pay … within the noise" beside
    a status of 1.27×. Faster on the clock but not beyond the noise is unproven, not disproved."""
    spread = payoff.Spread(low_ratio=0.77, high_ratio=1.31, source="the bench's 33 greedy runs")
    inside = payoff.judge_run(0.78, 0.06, 1.32, 3, 1.27, spread).verdict_text()
    assert inside.startswith("Not shown to pay here: this run measured 1.27×") and "does not pay" not in inside
    assert "within the noise" in inside
    slower = payoff.judge_run(0.78, 0.06, 1.32, 3, 0.93, spread).verdict_text()
    assert slower.startswith("Here speculation does not pay: this run measured 0.93×")


def test_a_measured_slowdown_never_says_pays_and_names_none_as_the_gamma():
    run = timed_run(speculative_verify_s=0.2)  # a verify of 10 target steps: far slower than the target alone
    stats = render.stats_dict(run)
    assert stats["speedup"] < 1 and stats["speculation_pays"] is False and stats["recommended_gamma"] is None
    html = render.stats_html(run)
    assert "pays" not in visible_text(html)
    assert "Here speculation does not pay: this run measured" in html and "slower than the target alone" in html
    assert 'class="which-gamma" data-gamma="none"' in html  # no record for this made-up setup: no γ named
    assert "What would change it" in html and "prompt lookup" in html
    assert "(slower)" in html and "as fast as" not in html
    assert "one noisy sample" in html and "Where the prediction and the clock part" in html


def test_a_measured_gain_beyond_one_runs_measured_noise_pays_and_recommends_the_runs_gamma(monkeypatch):
    spread = payoff.Spread(0.77, 1.31, "the bench's 33 greedy runs")
    monkeypatch.setattr("specviz.app.render.verdict.spread_here", lambda *args: spread)
    run = timed_run(speculative_verify_s=0.02)  # 4 tokens in 0.034 s against 0.07 s: about 2×
    stats = render.stats_dict(run)
    assert stats["speedup"] * spread.low_ratio > 1
    # one run judges only its own γ: which γ to use is the bench record's (none for this made-up setup) or a sweep's
    assert stats["speculation_pays"] is True and stats["recommended_gamma"] is None
    assert render.stats_html(run).count("Speculation pays here: this run measured") == 1  # said once: on the card
    assert "one run moves from 77% to 131% of the median here (the bench&#x27;s 33 greedy runs)" in render.stats_html(run)


def test_a_small_gain_inside_one_runs_noise_does_not_pay():
    verdict = payoff.judge_run(0.8, 0.1, 1.3, gamma=3, speedup=1.05)
    assert not verdict.pays and verdict.recommended_gamma is None
    assert "has not been measured" in verdict.verdict_text() and "pays" not in verdict.verdict_text()
    inside = payoff.judge_run(0.8, 0.1, 1.3, gamma=3, speedup=1.18, spread=payoff.Spread(0.77, 1.31, "the bench"))
    assert not inside.pays and "within the noise" in inside.verdict_text()
    assert "one run moves from 77% to 131%" in inside.verdict_detail_text()  # where it was measured: one click away
    # a bench's band is a quiet machine's: its detail says a busy one moves a run further, and why
    assert payoff.BUSY_MACHINE in inside.verdict_detail_text() and "take turns" in payoff.BUSY_MACHINE
    assert payoff.BUSY_MACHINE not in verdict.verdict_detail_text()  # no band measured: nothing to qualify


def test_the_one_rule_reads_a_sweeps_spread():
    def verdict(*cells):
        return payoff.Payoff(0.5, 0.2, 1.6, tuple(payoff.Measurement(*cell, num_runs=3) for cell in cells))

    spans_one = verdict((2, 1.08, 0.95, 1.20), (4, 0.90, 0.85, 0.97))
    assert not spans_one.pays and spans_one.best.gamma == 2
    assert "spread that reaches 1×" in spans_one.verdict_text()
    assert spans_one.recommendation_text() == "none beyond the noise: γ = 2's median is 1.08×, but it reaches down to 0.95×"
    slower = verdict((2, 0.93, 0.85, 1.05))
    assert slower.recommendation_text() == "none: the target alone is faster here"
    clear = verdict((2, 1.30, 1.10, 1.40), (4, 1.10, 1.02, 1.20))
    assert clear.pays and clear.recommended_gamma == 2 and clear.recommendation_text() == "γ = 2"
    predicted = payoff.Payoff(0.3, 0.5, 1.5)  # no measurement: the formula alone, said to be a prediction
    assert not predicted.pays and "a prediction, not a measurement" in predicted.verdict_text()


def test_a_sampled_run_says_once_whether_its_speedup_compares_like_for_like():
    """Two samples that came out the same text are like for like, and said so (the note called them "different
    samples (4 tokens each)" until 2026-12-05); two that differ are said once, in the verdict's place, not again."""
    html = visible_text(render.stats_html(timed_run(0.02, temperature=0.8)))
    assert "both drew the same text (4 tokens)" in html and "different samples" not in html
    differ = visible_text(render.stats_html(make_run()))  # T = 1: 6 and 7 tokens
    assert differ.count("different texts (6 and 7 tokens)") == 1 and "both drew the same text" not in differ
    assert "different samples of different lengths" not in differ
    # a sampled run's no-verdict, both lanes at the token limit
    assert "different texts (64 tokens each)" in payoff.unequal_texts_text(64, 64, 0.7)
    assert "different samples" not in render.stats_html(timed_run(0.02))


def test_why_the_text_is_the_targets_is_said_once_in_how_it_works_and_the_stats_point_there():
    """Q5 in one line (2026-11-23), said once (2026-12-05): How it works gives the proof, before any run; the stats,
    beside their token-by-token check, say where it is."""
    html = render.stats_html(timed_run(0.02))
    assert "How it works" in visible_text(html) and "add back to exactly" in visible_text(html)
    assert "min(p(x), q(x))" not in html and "norm(max(0, p − q))" not in html
    how = render.explain_html(None)
    assert "min(p(x), q(x))" in how and "norm(max(0, p − q))" in how and "add back to exactly p(x)" in how


def test_a_round_the_confidence_stop_ended_is_marked_and_explained():
    run = render.RunView("x", [1], gamma=4, settings={"temperature": 0.0, "draft_confidence": 0.5})
    sure = draft(3, 1.0, 1.0, 0.3, "accepted", draft_confidence=0.91)
    unsure = draft(8, 1.0, 0.0, 0.6, "rejected", draft_confidence=0.34)
    for event in (
        PrefillEvent("speculative", 1, 2, 0.01, 1, 1),
        RoundEvent("speculative", 0, 1, 2, chain(sure, unsure, then=(4, "resample")), 1, 4, "resample", (3, 4), 0.004,
                   0.03, 2, 1, stopped_unsure=True),
        RoundEvent("speculative", 1, 3, 1, chain(sure, then=(5, "bonus")), 1, 5, "bonus", (3, 5), 0.002, 0.03, 1, 1),
        FinishEvent("speculative", "max_new_tokens", 5),
    ):
        run.add(event, decode)
    lane = render.lanes_html(run, names=("speculative",))[0]
    assert lane.count(render.tokens.STOP_MARK) == 1  # only the round that stopped early
    assert "drafting stopped after 2 tokens: at the last one the drafter's likeliest guess had only 34%" in html_text.unescape(lane)
    assert "(the drafter was 91% sure)" in html_text.unescape(lane)  # every draft's hover says how sure the draft was
    # greedy: the one-hot q(x) = 1 beside "34% sure" read as a contradiction, and r decides nothing: neither is shown
    assert "(the drafter was 34% sure)" in html_text.unescape(lane) and "q(x)" not in lane and "r = " not in lane
    inspector = inspector_words.inspector_html(run, 0)
    assert "Drafting stopped after 2 tokens" in inspector and "34%" in inspector and "q(x)" not in inspector
    assert "stopped" not in inspector_words.inspector_html(run, 1)


def test_the_rules_words_leave_room_for_drawn_tokens():
    """render.rule's sentences put the caller's tokens in as given, and step mode and How it works pass tokens
    drawn as HTML: the words around them must hold no <, > or & (coin_test's "r < …" aside, escaped whole by its
    one caller), else a rewording there would break the page's HTML."""
    import inspect
    from itertools import product

    samples = {"str": ["X"], "str | None": ["X", None], "int": [2], "int | None": [0, 2, None], "bool": [True, False],
               "bool | None": [True, False, None]}
    verdicts = ["accepted", "rejected", "unexamined"]
    checked = 0
    for name, function in vars(rule).items():
        if not inspect.isfunction(function) or function.__module__ != rule.__name__ or name == "coin_test":
            continue
        parameters = inspect.signature(function).parameters.values()
        for values in product(*(verdicts if parameter.name == "verdict" else samples[parameter.annotation]
                                for parameter in parameters)):
            said = function(**{parameter.name: value for parameter, value in zip(parameters, values)})
            assert not set("<>&") & set(said), (name, said)
            checked += 1
    assert checked > 20


def test_a_sampled_draft_says_its_coin_first_then_q_p_and_r():
    """At temperature > 0 q is the draft's tempered softmax, not one-hot, and r decides: the hover gives the
    coin in a plain line first, then the rule's numbers."""
    sampled = draft(8, 0.41, 0.2, 0.6, "rejected", accept_prob=0.49, draft_confidence=0.34)
    event = RoundEvent("speculative", 0, 1, 1, chain(sampled, then=(4, "resample")), 0, 4, "resample", (4,), 0.001, 0.01,
                       1, 1)
    reason = render.tokens.draft_reason(event, 0, False, " <b>", " x")
    assert reason == rule.coin_reason("0.49", "0.60", accepted=False)
    title = render.tokens.drafted_title(0, 1, event.drafted[0], "rejected", reason)
    assert title.index("the coin r = 0.60") < title.index("q(x) = 0.410") < title.index("r = 0.600")


def test_a_lanes_head_sits_outside_its_scrolling_text():
    """The text box scrolls, not the lane: a scrolled lane's title never covers its tokens, and long
    indentation wraps inside the box instead of hanging past its border."""
    html = make_run().baseline.html("Target only", "done")
    head_end, text_start = html.index("</div>", html.index('class="lane-head"')), html.index('class="lane-text"')
    assert head_end < text_start
    text_style = re.search(r'class="lane-text" style="([^"]*)"', html).group(1)
    assert "overflow-y:auto" in text_style and f"max-height:{render.lanes.LANE_TEXT_MAX_PX}px" in text_style
    assert "white-space:break-spaces" in text_style and "overflow-wrap:anywhere" in text_style
    assert "sticky" not in html


def test_the_runs_charts_keep_their_titles_clear_of_their_legends():
    run = make_run()
    figures = [plots.tokens_vs_time(run.baseline.trace, run.speculative.trace), plots.accepted_per_round(run.speculative.trace, 3),
               plots.cumulative_acceptance(run.speculative.trace), plots.per_position_acceptance(run.speculative.trace)]
    for figure in figures:
        layout = figure.layout
        assert layout.title.yref == "container" and layout.legend.yanchor == "bottom"
        title_bottom = layout.title.pad.t + 1.4 * layout.title.font.size
        assert title_bottom <= layout.margin.t - plots.PAGE_LEGEND_ROWS * plots.LEGEND_ROW_PX, layout.title.text
    assert len({figure.layout.height for figure in figures}) == 1  # charts side by side line up


def test_the_stats_say_where_the_run_was_measured():
    run = make_run()
    assert "Measured with" not in render.stats_html(run)  # a run saved before the device was recorded
    run.settings.update(pair="smollm2-135m", device="cpu", precision="float32")
    assert "Measured with the smollm2-135m pair on cpu in float32." in render.stats_html(run)
    run.settings.update(precision="bfloat16", int8_drafters=True)
    assert "on cpu in bfloat16, the drafters in int8" in render.stats_html(run)
    assert "never the output" in render.stats_html(run)


def test_lane_titles_name_the_drafter_and_what_transformers_ran_instead():
    from specviz.app.render.lanes import lane_title

    head_run = render.RunView("x", [1], 3, {"drafter": "head"}, lanes=("baseline", "speculative", "reference"))
    assert lane_title(head_run, "speculative") == "Speculative decoding · EAGLE-style head"
    assert lane_title(head_run, "reference") == "transformers generate() (reference) · draft model: transformers has no head drafter"
    assert lane_title(head_run, "baseline") == "Target only (baseline)"
    lookup_run = render.RunView("x", [1], 3, {"drafter": "prompt-lookup"})
    assert lane_title(lookup_run, "reference") == "transformers generate() (reference) · prompt lookup"


def rival_rounds() -> tuple[render.RunView, RoundEvent]:
    """A greedy run of two rounds that stopped unsure with rival guesses: in the first the target took the rival
    "(x" over the drafter's first pick " <b>" (" & ${y}" left over), in the second none ("):" its own)."""
    run = render.RunView("x", [1], gamma=3, settings={"temperature": 0.0, "draft_confidence": 0.5, "rivals": 2})
    # greedy: the target takes the guess that is its own pick (p = 1), trying them surest first
    took_a_rival = RoundEvent("speculative", 0, 1, 1,
                              rivals(guess(8, 0.41, 0.0, "rejected"), guess(3, 0.27, 1.0, "accepted", r=0.2),
                                     guess(9, 0.12, 0.0, "unexamined"), then=(5, "bonus")),
                              1, 5, "bonus", (3, 5), 0.002, 0.03, 1, 1, stopped_unsure=True, shape="rivals")
    # "(x" not accepted here (had it been, it would be the round's kept path, drawn where " <b>" belongs)
    none_taken = RoundEvent("speculative", 1, 3, 1,
                            rivals(guess(8, 0.41, 0.0, "rejected", r=0.0), guess(3, 0.27, 1.0, "rejected"),
                                   guess(9, 0.12, 0.0, "rejected"), then=(4, "resample")),
                            0, 4, "resample", (4,), 0.002, 0.03, 1, 1, stopped_unsure=True, shape="rivals")
    for event in (PrefillEvent("speculative", 1, 2, 0.01, 1, 1), took_a_rival, none_taken,
                  FinishEvent("speculative", "max_new_tokens", 4)):
        run.add(event, decode)
    return run, took_a_rival


def test_rival_guesses_are_shown_beside_the_first_draft_and_the_round_says_which_the_target_took():
    from specviz.decoding.events import event_from_dict, event_to_dict

    run, took_a_rival = rival_rounds()
    assert event_from_dict(json.loads(json.dumps(event_to_dict(took_a_rival)))) == took_a_rival  # saved runs keep them
    lane = html_text.unescape(render.lanes_html(run, names=("speculative",))[0])
    assert lane.count('class="rivals on-demand"') == 2  # drawn, for the page to show on demand
    # each guess with how sure the drafter was; the first round took the rival "(x", the second none of them
    listed = "' <b>' (41%), '(x' (27%), ' & ${y}' (12%)"
    took, none = (rule.rivals_reason(listed, 3, "' <b>'", 1, "'(x'"), rule.rivals_reason(listed, 3, "' <b>'", None))
    assert took in lane and none in lane
    inspector = html_text.unescape(inspector_words.inspector_html(run, 0))
    assert f"{took[:1].upper()}{took[1:]}" in inspector
    # the one pass checked three guesses, not "1 token … it"
    assert ("the drafter proposed 1 token and 2 rival guesses for its first position; the target checked all 3 in one "
            "forward pass and kept 1") in " ".join(visible_text(inspector).split())
    assert "rival guesses" in render.tokens.legend_html()
    inline = render.tokens.inline_token
    offered = f"{inline('(x', 'accepted')} and {inline(' & ${y}', 'rejected')}"
    story = rule.rival_story(inline(" <b>", "rejected"), "41%", offered, inline("(x", "accepted"),
                             inline(run.speculative.round_texts[0].next_text, "bonus"), "2 tokens")
    assert f"In round 1 {story}" in render.explain_html(run)  # How it works cites the round a rival won
    assert run.speculative.trace.acceptance_rate == 0.5  # a position with rivals counts once, as α does


class LaneReading(HTMLParser):
    """A lane's text as it reads by default: the text box's characters, without the marks drawn on demand
    (render.tokens.ON_DEMAND), which the page hides until asked."""

    def __init__(self):
        super().__init__()
        self.depth, self.hidden_at, self.in_text_at, self.parts = 0, None, None, []

    def handle_starttag(self, tag, attrs):
        self.depth += 1
        classes = (dict(attrs).get("class") or "").split()
        if self.in_text_at is None and "lane-text" in classes:
            self.in_text_at = self.depth
        if self.hidden_at is None and render.tokens.ON_DEMAND in classes:
            self.hidden_at = self.depth

    def handle_endtag(self, tag):
        if self.hidden_at == self.depth:
            self.hidden_at = None
        if self.in_text_at == self.depth:
            self.in_text_at = None
        self.depth -= 1

    def handle_data(self, data):
        if self.in_text_at is not None and self.hidden_at is None:
            self.parts.append(data)


def lane_reading(lane_html: str) -> str:
    reader = LaneReading()
    reader.feed(lane_html)
    return "".join(reader.parts)


def test_a_lane_reads_as_its_text_and_its_struck_drafts_without_rival_guesses_or_stop_marks():
    """The lane reads as text, not "… is London Scotland Dublin‖ Edinburgh": the rival guesses and the unsure
    stop's ‖ are not drawn inline. They are marked ON_DEMAND (page.css hides them until the switch above the lanes is ticked):
    left out, the lane reads as the prompt, the kept tokens in order and the rejected drafts (struck) where they
    were guessed, nothing else."""
    run, _ = rival_rounds()
    lane = render.lanes_html(run, names=("speculative",))[0]
    # " f" the first token; round 1: the first pick " <b>" struck, the rival "(x" taken, the bonus "\n    " (↵);
    # round 2: " <b>" struck, the target's own "):"
    assert lane_reading(lane) == "x f <b>(x↵\n     <b>):"
    assert run.speculative.text == " f(x\n    ):"  # the kept text, what a copy of the lane gives
    shown = html_text.unescape(lane)
    assert shown.count(render.tokens.STOP_MARK) == 2 and " & ${y}" in shown  # still drawn, to show on demand


def test_greedy_lanes_that_part_are_said_first_and_get_no_verdict():
    """Never a verdict on unequal work: a parted greedy run says so before the speed, in plain
    words, withholds 'pays', and qualifies why the text is the target's."""
    parted = greedy_pair_of_lanes([3, 6, 5])
    html = render.stats_html(parted, divergence_gap=0.0123)
    assert html.index('class="parted"') < html.index('class="speedup"')
    words = visible_text(html)
    assert "The two lanes wrote different texts from token 3" in words and "a near-tie" in words
    assert "compares different texts (4 tokens each) and gives no verdict" in words
    assert 'class="verdict"' not in html and "pays" not in words.split("gives no verdict")[1].split("Why the text")[0]
    assert "parted because their arithmetic was not the same" in words
    tied = visible_text(render.stats_html(parted, divergence_gap=0.0))
    assert "the very same score: an exact tie" in tied and "only 0 apart" not in tied
    assert render.stats_dict(parted)["speculation_pays"] is None and "No verdict" in render.stats_dict(parted)["verdict"]
    same = render.stats_html(greedy_pair_of_lanes([3, 4, 5]))
    assert 'class="parted"' not in same and 'class="verdict"' in same
    assert "parted because" not in visible_text(same)


def test_a_parting_is_marked_in_both_lanes_and_named_in_the_status_line_without_a_speedup():
    """Greedy lanes that parted at token 3: that very token is marked in the target alone's lane and in the
    speculative lane (where it is a drafted token the round kept), nowhere else; the status line names the
    parting and gives no speedup. Lanes that agree are marked nowhere and get their speedup."""
    from specviz.app.run_section.words import done_summary
    from specviz.app.render.stats import arithmetic_html, comparison_of
    from specviz.app.render.verdict import speedup_is_quoted

    parted = greedy_pair_of_lanes([3, 6, 5])
    baseline, speculative, *_ = render.lanes_html(parted)
    for lane in (baseline, speculative):
        assert lane.count('data-parting="true"') == 1 and lane.count("parting-mark") == 1
    assert re.search(r'class="tok tok-target" data-i="2" data-parting="true"[^>]*>\):<', baseline)
    assert re.search(r'class="tok tok-accepted" data-i="2" data-parting="true"[^>]*>return<', speculative)
    summary = done_summary(parted)
    assert "the two lanes wrote different texts from token 3 (marked ▾ in both lanes)" in summary
    assert "×" not in summary and "no speedup is given" in summary
    same = greedy_pair_of_lanes([3, 4, 5])
    assert all("data-parting" not in lane for lane in render.lanes_html(same))
    assert "different texts" not in done_summary(same) and "×" not in done_summary(same)  # the card says the speedup


def test_the_exactness_this_machine_gives_comes_before_any_speed_figure():
    run = greedy_pair_of_lanes([3, 4, 5])
    run.settings.update(bitwise_verify=True, exactness="the target computes every token it checks with the same arithmetic")
    html = render.stats_html(run)
    assert 'class="exactness" data-bitwise="true"' in html and "Exact here:" in html  # in full, behind the arithmetic
    card = html[html.index('class="result-card"'):html.index('class="arithmetic"')]
    assert card.index("exact by construction here") < card.index('class="speedup"')  # on the card, before the speed
    run.settings.update(bitwise_verify=False, exactness="not guaranteed here: this model's soft-capped attention")
    html = render.stats_html(run)
    assert "Not guaranteed here:" in html and "Exact here" not in html and "by construction" not in html
    assert "· not guaranteed here" in html


# --- a rival the target took, and the inspector's questions in plain words --------------------------------------------


@pytest.fixture(scope="module")
def run_with_a_rival_taken() -> tuple[render.RunView, RoundEvent]:
    """A real greedy run on the tiny pair with rival guesses on (the default 2), and its first round whose
    rival the target took instead of the drafter's first pick."""
    from specviz.analysis.bench import load_prompts
    from specviz.decoding.engine import DecodeConfig, speculative_decode
    from specviz.models.loading import load_pair
    from specviz.models.presets import PRESETS

    pair = load_pair("tiny-code")
    config = DecodeConfig(max_new_tokens=32, inspect=True)
    assert config.rivals == 2 and config.temperature == 0
    for prompt in load_prompts(PRESETS["tiny-code"].prompts_file):
        prompt_ids = pair.encode(prompt.text, False)
        run = render.RunView(prompt.text, prompt_ids, config.gamma, {"temperature": 0.0, "rivals": config.rivals})
        for event in speculative_decode(pair, prompt_ids, config):
            run.add(event, pair.decode)
        taken = [event for event in run.speculative.trace.rounds if event.took_rival]
        if taken:
            return run, taken[0]
    pytest.fail("no prompt of the tiny pair had a rival taken: the test checks nothing")


def round_spans(lane_html: str, event: RoundEvent) -> list[tuple[str, str, str]]:
    """(class, title, text) of each span the lane drew for a round, in order."""
    body = lane_html.split(f'data-round="{event.round_index + 1}">')[1].split('<span class="round-sep"')[0]
    return [(html_text.unescape(cls), html_text.unescape(title), html_text.unescape(re.sub(r"<[^>]+>", "", text)))
            for cls, title, text in re.findall(r'<span class="([^"]*)"[^>]*?title="([^"]*)"[^>]*>(.*?)</span>', body, re.S)]


def test_a_rival_the_target_took_is_drawn_after_the_drafters_first_pick_which_is_rejected(run_with_a_rival_taken):
    run, event = run_with_a_rival_taken
    first_pick = event.guesses[0]
    assert first_pick.draft_confidence > event.drafted[0].draft_confidence  # the drafter liked its own pick better
    texts = run.speculative.round_texts[event.round_index]
    first_text = texts.guesses[0]
    spans = round_spans(render.lanes_html(run, names=("speculative",))[0], event)
    (pick_class, pick_title, pick_shown), (taken_class, taken_title, taken_shown) = spans[:2]
    # the drafter's own first pick is the round's first draft, struck through as rejected by the target's own pick
    taken = event.taken_guess
    assert "tok-rejected" in pick_class and pick_title.startswith(rule.rival_rejected_reason(
        f"'{texts.guesses[taken]}'", render.tokens.target_sure_text(event.guesses[taken]), taken + 1, f"'{first_text}'",
        f" (the drafter was {first_pick.draft_confidence:.0%} sure)"))
    assert "draft 1/1, the drafter's first pick" in pick_title
    # the rival the target took follows it, kept, and says so, with the drafter's own probability for it
    assert "tok-accepted" in taken_class and "tok-rival-taken" in taken_class
    share = f"{event.drafted[0].draft_confidence:.0%}"
    assert taken_title.startswith(rule.rival_taken_reason(taken + 1, f"'{texts.drafted[0]}'", share, f"'{first_text}'"))
    assert "q(x)" not in taken_title
    assert "draft 1/1 ·" not in taken_title
    # the small struck rivals after it are the guesses left over, never the first pick again
    markers = [shown for cls, _, shown in spans if "rivals" in cls.split()]
    assert markers or len(event.guesses) == 2  # drawn, unless the taken rival and the first pick were all
    assert all(first_text not in shown.split(" ") for shown in markers)
    # the inspector says it first, in words, and lists the first pick before the rival it lost to
    inspector = html_text.unescape(inspector_words.inspector_html(run, event.round_index))
    why = rule.rival_kept_sentence(f"'{texts.drafted[0]}'", render.tokens.target_sure_text(event.drafted[0]), taken + 1,
                                   f"'{first_text}'", render.tokens.sure_text(first_pick))
    assert f"Why was '{first_text}' thrown away? {why}" in inspector
    assert inspector.index(rule.RIVAL_VERDICT_TEXT["rejected"]) < inspector.index(rule.RIVAL_VERDICT_TEXT["taken"])
    # what the lane keeps is still the round's emitted tokens, the taken rival first; only the first pick is struck
    kept = [cls for cls, _, _ in spans if re.search(r"tok-(accepted|resample|bonus)\b", cls)]
    assert len(kept) == len(event.emitted_ids) and "tok-rival-taken" in kept[0]
    assert [cls for cls, _, _ in spans if "tok-rejected" in cls] == [pick_class]


def greedy_rejection_run(temperature: float) -> render.RunView:
    """One round: " f" kept, " <b>" rejected where the target's own pick was " x", then " x" written."""
    run = render.RunView("x", [1], gamma=2, settings={"temperature": temperature})
    if temperature == 0:
        kept = draft(2, 1.0, 1.0, 0.55, "accepted", draft_confidence=0.81, target_confidence=0.9)
        wrong = draft(8, 1.0, 0.0, 0.768, "rejected", draft_confidence=0.43, target_confidence=0.62)
    else:
        kept = draft(2, 0.8, 0.9, 0.55, "accepted", draft_confidence=0.81, target_confidence=0.9)
        wrong = draft(8, 0.5, 0.205, 0.77, "rejected", draft_confidence=0.43, target_confidence=0.62)
    for event in (PrefillEvent("speculative", 1, 1, 0.01, 1, 1),
                  RoundEvent("speculative", 0, 1, 2, chain(kept, wrong, then=(7, "resample")), 1, 7, "resample", (2, 7),
                             0.004, 0.03, 2, 1),
                  FinishEvent("speculative", "max_new_tokens", 3)):
        run.add(event, decode)
    return run


def test_at_temperature_0_a_rejection_is_answered_in_plain_words_without_q_or_r():
    run = greedy_rejection_run(0.0)
    event = run.speculative.trace.rounds[0]
    spans = round_spans(render.lanes_html(run, names=("speculative",))[0], event)
    (_, kept_title, _), (_, rejected_title, _), (own_class, own_title, _) = spans[:3]
    # Each figure names whose it is: a bare "(it was 81% sure)" after "the target's own top pick" read as the target's.
    target_sure, draft_sure = " (the target was 62% sure)", " (the drafter was 43% sure)"
    assert kept_title.startswith(rule.kept_reason("' f'", " (the target was 90% sure, the drafter 81%)"))
    assert rejected_title.startswith(rule.rejected_reason("' x'", "' <b>'", target_sure, draft_sure))
    assert "(it was" not in kept_title + rejected_title
    assert "tok-resample" in own_class and own_title.startswith(rule.replacement_reason(True, "' <b>'"))
    for title in (kept_title, rejected_title, own_title):  # nothing that decides nothing at temperature 0
        assert "q(x)" not in title and "r = " not in title and rule.KEEP_CHANCE not in title and "1.000" not in title
    inspector = html_text.unescape(inspector_words.inspector_html(run, 0))
    words = html_text.unescape(visible_text(inspector_words.inspector_html(run, 0)))
    said = as_sentence(rule.rejected_reason("' x'", "' <b>'", target_sure, draft_sure))
    assert words.strip().startswith(f"Why was ' <b>' rejected? {said}")
    where = rule.replacement_reason(True, "' <b>'")
    assert f"Where did ' x' come from? It is {where}." in words
    assert rule.COIN not in inspector and rule.KEEP_CHANCE not in inspector and "0.768" not in inspector
    assert "43%" in words and f"{rule.OWN_PICK} here" in words
    explained = render.explain_html(run)  # How it works tells it the same way
    inline, escape = render.tokens.inline_token, render.tokens.escape_text
    assert rule.rejection_story(1, inline(" <b>", "rejected"), inline(" x", "resample"), True,
                                target_sure=escape(target_sure), draft_sure=escape(draft_sure)) in explained
    assert "r = 0.768" not in html_text.unescape(visible_text(explained))


def test_above_temperature_0_a_rejection_says_its_coin_first_and_the_leftover_it_was_replaced_from():
    run = greedy_rejection_run(0.7)
    event = run.speculative.trace.rounds[0]
    spans = round_spans(render.lanes_html(run, names=("speculative",))[0], event)
    rejected_title, own_title = spans[1][1], spans[2][1]
    assert rejected_title.startswith(rule.coin_reason("0.41", "0.77", accepted=False) + "\n")
    assert f"q(x) = 0.500 · p(x) = 0.205 · {rule.KEEP_CHANCE} = 0.410 · r = 0.770" in rejected_title  # kept, after the line
    assert own_title.startswith(rule.replacement_reason(False, "' <b>'"))
    words = html_text.unescape(visible_text(inspector_words.inspector_html(run, 0)))
    said = as_sentence(rule.coin_reason("0.41", "0.77", accepted=False))
    assert words.strip().startswith(f"Why was ' <b>' rejected? {said}")
    where = rule.replacement_reason(False, "' <b>'")
    assert f"Where did ' x' come from? It is {where}." in words
    assert rule.COIN in html_text.unescape(inspector_words.inspector_html(run, 0))


def test_about_the_drafters_shows_sizes_computed_from_the_shipped_configs_and_the_cards_figures():
    from pathlib import Path

    from specviz.app.drafters_about import words as drafters_about
    from specviz.models.presets import EMBEDDED_DRAFT_DIR, EMBEDDED_HEAD_DIR

    figures = drafters_about.read_drafter_figures()
    # computed from config.json, and equal to what training counted in the model itself
    assert figures.draft_params == json.loads((EMBEDDED_DRAFT_DIR / "training.json").read_text())["num_params"]
    assert figures.head_params == json.loads((EMBEDDED_HEAD_DIR / "training.json").read_text())["num_params"]
    assert figures.agreement and all(head > draft for _, draft, head in figures.agreement)  # as the card measured
    page = html_text.unescape(drafters_about.drafters_about_html(figures))
    words = html_text.unescape(visible_text(drafters_about.drafters_about_html(figures)))
    assert f"{figures.draft_params / 1e6:.1f} M parameters" in words and f"{figures.head_params / 1e6:.1f} M parameters" in words
    for text, draft, head in figures.agreement:
        assert f"on {text}, the head {head:.2f} and the draft model {draft:.2f}" in words
    assert "the target's last hidden state" in words and "the last token's embedding" in words
    assert "the target's own output head" in words and "n-grams" not in words  # words, not jargon, for prompt lookup
    assert "Li et al. 2024" in words and "arxiv.org/abs/2401.15077" in page and "feature level" in words
    assert "Rival guesses." in words and 'class="drafters-diagram"' in page and page.count('class="drafter-path"') == 3
    # without a converted target the section still renders, and says the target's size by its name
    bare = drafters_about.read_drafter_figures(target_dir=Path("/nonexistent"))
    assert bare.target_params is None and "about 135 M parameters" in drafters_about.drafters_about_html(bare)


def test_an_example_button_shows_the_start_of_its_prompt_cut_at_a_word():
    from specviz.app.run_section.words import EXAMPLE_CHARS, example_label, example_prompts

    for prompt in example_prompts():
        label = example_label(prompt)
        assert label.startswith("completion: ") == (prompt.chat is False)  # chat off, said on the button
        shown = label.removeprefix("completion: ")
        whole = " ".join(prompt.text.split())
        kept = shown.removesuffix("…")
        assert whole.startswith(kept) and len(kept) <= EXAMPLE_CHARS
        assert shown == whole or (shown.endswith("…") and whole[len(kept)] in " :,."), (shown, whole)


def test_the_first_view_says_what_to_do_before_any_notation():
    """The intro says what the two lanes are and that the text is the target's own, in a few words and no notation;
    what to do is said where it is done: the status line under Run, the empty lanes, the switch above them."""
    from specviz.app.run_section.words import MARKS_SWITCH_INFO, READY_TEXT, header_markdown

    header = header_markdown()
    for notation in ("q(", "p(", "min(1", "p/q", " r ", "γ", "left lane", "right lane"):
        assert notation not in header, notation
    assert "**Target only**" in header and "**Speculative decoding**" in header  # the lanes by name: they stack when narrow
    assert "exactly the target's" in header
    intro = header.split("\n", 1)[1]
    assert len(intro.split()) <= 60, intro  # one short paragraph: the legend says what the colours mean
    assert "press Run" in READY_TEXT and "click" in MARKS_SWITCH_INFO  # after a run the lanes' own hint is gone
    baseline, speculative = (html_text.unescape(html) for html in render.lanes_html(None))
    assert "press Run" not in baseline + speculative
    assert "The target alone will write here, one token per forward pass" in baseline
    assert "Speculative decoding will write here" in speculative and rule.PLAIN_KEY["accepted"] in speculative
    assert "tok-rejected" in speculative and "click a coloured token" in speculative


def test_a_words_leading_space_sits_outside_its_coloured_box():
    """Where a line wraps after the leading space of " Edinburgh", the space must not stay on the first line as
    an empty coloured chip. The space is drawn before the box, so a wrap there leaves plain space."""
    span = render.tokens.token_span(" Edinburgh", "accepted", "kept")
    assert span.startswith(' <span class="tok tok-accepted"') and ">Edinburgh</span>" in span
    assert re.sub(r"<[^>]+>", "", span) == " Edinburgh"  # the text itself is unchanged
    # A token of spaces only keeps its visible marks inside its box, and a newline stays in the box.
    assert "␣␣" in render.tokens.token_span("  ", "accepted", "kept").split("<span", 1)[1]
    assert render.tokens.token_span("\n", "target", "t").startswith("<span")


def test_a_punctuation_rival_is_drawn_large_enough_to_see():
    """A rival that is a symbol (".") gets a class of its own: as a struck superscript it was nearly invisible."""
    assert 'class="rival-symbol"' in render.tokens.rival_text(".")
    assert 'class="rival-symbol"' not in render.tokens.rival_text(" the")
