"""The sections below the run (specviz.app.step_mode, exactness_lab, theory_explorer, gamma_sweep): the exactness
lab's statistics, step mode, the theory explorer's curves and the γ sweep, on tiny random models (no downloads,
seconds).

The lab's test must be able to fail: the deliberately wrong rule (resample from p) is caught
at the N used, on a draft that is over-confident where the target is not (a target whose
output head is scaled up), the setting where that mistake matters most.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from html import unescape

import pytest
import gradio as gr
import torch
from scipy.stats import chi2

from specviz.app import render, ui
from specviz.app.render import rule
from specviz.app.wording import as_sentence, count
from specviz.app.inspector import words as inspector_words
from specviz.app.step_mode import session as step_mode, words as step_words
from specviz.app.exactness_lab import draws as exactness, page as lab_page
from specviz.app.gamma_sweep import measure as sweep, page as sweep_page
from specviz.app.theory_explorer import page as theory_page, view as explorer

from specviz.analysis import bench, theory
from specviz.analysis.bench import BenchResult
from specviz.analysis.payoff import PREDICTION_ONLY, Payoff, Spread
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import speculative_decode
from specviz.decoding.events import FinishEvent, PrefillEvent, RoundEvent
from specviz.app.live import StopPresses
from specviz.models.pairs import ModelPair
from specviz.decoding.sampling import accept_or_resample
from specviz.analysis.trace import Comparison, Trace
from tests.rounds import chain, draft, guess, rivals
from tests.test_render import bonus_round, decode
from tests.tiny_models import make_model, tiny_pair

LAB_PROMPT = [67, 20, 13, 9, 73, 45]
LAB_DRAWS = 400


@pytest.fixture(scope="module")
def overconfident_pair() -> ModelPair:
    """A tiny target and, as draft, the same model with its output head scaled ×3 (q sharper than p)."""
    target = make_model("gpt2", seed=0)
    draft = copy.deepcopy(target)
    draft.lm_head.weight = torch.nn.Parameter(target.lm_head.weight.detach() * 3.0)  # unties it from the embeddings
    return ModelPair.from_models(target, draft)


def final_tally(pair: ModelPair, wrong_rule: bool, top_p: float = 1.0) -> exactness.LabTally:
    config = DecodeConfig(gamma=2, temperature=1.0, top_p=top_p, seed=0)
    for tally in exactness.run_lab(pair, LAB_PROMPT, config, LAB_DRAWS, wrong_rule):
        pass
    return tally


# --- the exactness lab ----------------------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_the_tree_rule_passes_and_typical_acceptance_is_caught(overconfident_pair):
    """With a draft tree the lab runs the exact walk (sampling.accept_tree) and, as its wrong rule, Medusa's
    typical acceptance, which keeps the drafter's first plausible guess with no coin: caught."""
    config = DecodeConfig(gamma=2, tree=4, temperature=1.0, seed=0)
    tallies = {}
    for wrong in (False, True):
        for tally in exactness.run_lab(overconfident_pair, LAB_PROMPT, config, LAB_DRAWS, wrong):
            pass
        tallies[wrong] = tally
    assert tallies[True].wrong_words == "Medusa's typical acceptance on the tree"
    assert tallies[False].p_value("speculative") > 0.01
    assert tallies[True].p_value("baseline") == tallies[False].p_value("baseline")
    assert tallies[True].p_value("speculative") < 0.01


@pytest.mark.timeout(60)
def test_real_rule_passes_and_wrong_rule_is_caught(overconfident_pair):
    real = final_tally(overconfident_pair, wrong_rule=False)
    wrong = final_tally(overconfident_pair, wrong_rule=True)
    assert real.num_draws("baseline") == real.num_draws("speculative") == LAB_DRAWS
    assert real.bins.num_bins >= 5
    assert real.p_value("baseline") > 0.01
    assert real.p_value("speculative") > 0.01
    assert wrong.p_value("baseline") == real.p_value("baseline")  # same seeds, and the target alone has no rule
    assert wrong.p_value("speculative") < 0.01


@pytest.mark.timeout(60)
def test_at_temperature_1_with_top_p_the_lab_finds_the_targets_own_distribution(overconfident_pair):
    """The lab's answer to "still exact at T = 1 with top-p?" (rule.SETTINGS_EXACT, its intro): top-p cuts both
    models' distributions before the rule, and the speculative draws follow the target's cut distribution."""
    real = final_tally(overconfident_pair, wrong_rule=False, top_p=0.8)
    wrong = final_tally(overconfident_pair, wrong_rule=True, top_p=0.8)
    assert real.p_value("baseline") > 0.01 and real.p_value("speculative") > 0.01
    assert wrong.p_value("speculative") < 0.01  # the lab can still tell: a wrong rule is caught at these settings
    page = ui.build_app(preload=False)
    lab_words = [block.value for block in page.blocks.values() if isinstance(block, gr.Markdown)]
    assert any(rule.SETTINGS_EXACT in words for words in lab_words)


def test_exact_distribution_sums_to_one(overconfident_pair):
    config = DecodeConfig(temperature=1.0)
    first_ids, joint = exactness.exact_first_two(overconfident_pair, LAB_PROMPT, config, max_first=overconfident_pair.vocab_size)
    assert joint.shape == (overconfident_pair.vocab_size, overconfident_pair.vocab_size)
    assert float(joint.sum()) == pytest.approx(1.0, abs=1e-9)
    # With fewer first tokens spelled out, the bins (with "other") still cover everything.
    first_ids, joint = exactness.exact_first_two(overconfident_pair, LAB_PROMPT, config, max_first=8)
    bins = exactness.choose_bins(first_ids, joint, LAB_DRAWS)
    assert sum(bins.probs) == pytest.approx(1.0, abs=1e-9)
    assert all(prob * LAB_DRAWS >= exactness.MIN_EXPECTED for prob in bins.probs)  # chi-square's rule of thumb
    assert bins.num_bins <= exactness.MAX_BINS + 1


def test_exact_distribution_matches_the_engines_sampling_with_top_k(overconfident_pair):
    """Top-k cuts both tokens' distributions the same way in the engine and in the exact one."""
    config = DecodeConfig(temperature=1.0, top_k=3)
    first_ids, joint = exactness.exact_first_two(overconfident_pair, LAB_PROMPT, config)
    assert int((joint > 0).sum()) <= 9
    outcome = exactness.draw_outcome(overconfident_pair, LAB_PROMPT, exactness.lab_config(config, 0), "speculative")
    row = first_ids.tolist().index(outcome[0])
    assert joint[row, outcome[1]] > 0


def test_chi_square_survival_matches_scipy():
    for statistic, dof in ((0.5, 1), (3.0, 2), (12.0, 5), (40.0, 12), (200.0, 12)):
        assert exactness.chi_square_survival(statistic, dof) == pytest.approx(chi2.sf(statistic, dof), rel=1e-6, abs=1e-300)
    assert exactness.chi_square_p_value([50, 50], [0.5, 0.5]) == pytest.approx(1.0)
    assert exactness.chi_square_p_value([10], [1.0]) is None  # one bin: nothing to test
    assert exactness.chi_square_p_value([5, 1], [1.0, 0.0]) == 0.0  # an impossible outcome was drawn


def test_wrong_rule_keeps_the_accept_test_and_draws_from_p():
    draft_probs = torch.tensor([[0.1, 0.8, 0.1]])  # (γ, vocab)
    target_probs = torch.tensor([[0.6, 0.2, 0.2], [0.3, 0.3, 0.4]])  # (γ+1, vocab)
    draft_ids = torch.tensor([1])
    for seed in range(20):
        real = accept_or_resample(draft_ids, draft_probs, target_probs, torch.Generator().manual_seed(seed))
        wrong = exactness.resample_from_target(draft_ids, draft_probs, target_probs, torch.Generator().manual_seed(seed))
        assert (wrong.num_accepted, wrong.is_bonus) == (real.num_accepted, real.is_bonus)
        if not real.is_bonus:
            assert torch.equal(wrong.residual, target_probs[0])  # p itself, not norm(max(0, p − q))
            assert real.next_id != 1  # the residual never gives back the over-proposed token …
    wrong_ids = {exactness.resample_from_target(draft_ids, draft_probs, target_probs, torch.Generator().manual_seed(s)).next_id
                 for s in range(200)}
    assert 1 in wrong_ids  # … which is exactly what the wrong rule does


def test_lab_refuses_what_it_cannot_test():
    with pytest.raises(ValueError, match="from 100 to 5000"):
        exactness.check_lab(DecodeConfig(temperature=1.0), 50)
    with pytest.raises(ValueError, match="temperature"):
        exactness.check_lab(DecodeConfig(temperature=0.0), 500)


# --- step mode ----------------------------------------------------------------------------------------------------


def room_of(gamma: int, position: int = 1, limit: int = 64, threshold: float = 0.5) -> step_mode.DraftRoom:
    """The room of a constant-γ round at `position` of a run that may write `limit` new tokens."""
    return step_mode.DraftRoom(gamma, gamma, limit - position - 1, limit, False, threshold)


@pytest.mark.parametrize("drafter", ["model", "prompt-lookup"])
def test_step_run_is_one_round_per_press_and_ends_like_a_full_run(drafter):
    pair = tiny_pair("gpt2")
    prompt = [5, 6, 7, 5, 6, 7, 5, 6]  # repeats, so prompt lookup finds something to copy
    config = DecodeConfig(gamma=3, temperature=1.0, max_new_tokens=20, seed=4, drafter=drafter, inspect=True,
                          stop_at_eos=False)
    full = Trace.from_events(speculative_decode(pair, prompt, config))
    step = step_mode.StepRun(pair, prompt, config)
    step.start()
    presses = 0
    while not step.done:
        events = step.advance()
        presses += 1
        assert sum(isinstance(event, RoundEvent) for event in events) == 1
    assert isinstance(events[-1], FinishEvent)  # the last round brought the finish with it: no wasted press
    assert presses == len(full.rounds)
    assert step.trace.token_ids == full.token_ids
    assert step.advance() == []
    if drafter == "prompt-lookup":  # it copied some rounds and found nothing to copy in others
        assert {event.gamma > 0 for event in full.rounds} == {True, False}


def test_a_round_with_nothing_drafted_says_why():
    pair = tiny_pair("gpt2")
    config = DecodeConfig(gamma=3, temperature=1.0, max_new_tokens=20, seed=4, drafter="prompt-lookup", inspect=True,
                          stop_at_eos=False)
    view = render.RunView("prompt", [5, 6, 7, 5, 6, 7, 5, 6], 3, {}, lanes=("speculative",))
    for event in speculative_decode(pair, [5, 6, 7, 5, 6, 7, 5, 6], config):
        view.add(event, lambda ids: "".join(f" t{token_id}" for token_id in ids))
    lane = view.speculative
    plain = next(event for event in lane.trace.rounds if event.gamma == 0)
    html = step_words.round_html(plain, lane.round_texts[plain.round_index], lane.labels, 1, "prompt-lookup", room_of(3),
                                   greedy=False)
    assert "prompt lookup found no earlier occurrence" in html
    assert f"t{plain.next_id}" in html


def test_round_stages_name_the_rounds_tokens():
    pair = tiny_pair("gpt2")
    config = DecodeConfig(gamma=3, temperature=1.0, max_new_tokens=24, seed=1, inspect=True, stop_at_eos=False)
    view = render.RunView("prompt", [5, 6, 7], 3, {}, lanes=("speculative",))
    decode = lambda ids: "".join(f" t{token_id}" for token_id in ids)  # noqa: E731 — a tokenizer-free stand-in
    for event in speculative_decode(pair, [5, 6, 7], config):
        view.add(event, decode)
    lane = view.speculative
    rejected = next(event for event in lane.trace.rounds if event.next_kind == "resample")
    html = step_words.round_html(rejected, lane.round_texts[rejected.round_index], lane.labels, 1, "model", room_of(3),
                                   greedy=False)
    for stage in ("draft", "verify", "accept", "verdict", "correction", "rollback"):
        assert f'data-stage="{stage}"' in html
    assert f"t{rejected.drafted[rejected.num_accepted].token_id}" in html
    assert f"r = {rejected.drafted[rejected.num_accepted].r:.3f}" in html
    assert "norm(max(0, p − q))" in html


def test_drafts_after_an_accepted_end_of_text_are_said_to_be_dropped():
    full = bonus_round(0, 1, gamma=3)
    cut = dataclasses.replace(full, emitted_ids=full.emitted_ids[:2])  # the second draft was the end of text
    view = render.RunView("x", [1], gamma=3, settings={}, lanes=("speculative",))
    for event in (PrefillEvent("speculative", 1, 2, 0.012, 1, 1), cut):
        view.add(event, decode)
    lane = view.speculative
    html = step_words.round_html(cut, lane.round_texts[0], lane.labels, 1, "model", room_of(3), greedy=False)
    assert rule.dropped_sentence("All 3 drafts", "1 draft", one=True) in html
    assert html.count(rule.DROPPED_TEXT) == 1
    assert "Nothing to crop" not in html and "drops 1 position" in html
    assert "dropped" not in step_words.round_html(full, lane.round_texts[0], lane.labels, 1, "model", room_of(3),
                                                  greedy=False)


# --- theory explorer ------------------------------------------------------------------------------------------------


def test_speedup_falls_as_the_verify_gets_dearer():
    speedups = [theory.expected_speedup(0.7, 4, 0.1, verify_cost) for verify_cost in (0.8, 1.0, 1.5, 2.0, 3.0)]
    assert speedups == sorted(speedups, reverse=True)
    view = explorer.theory_view(0.7, 0.1, 1.8, measured_gamma=3, measured_speedup=1.1)
    assert all(with_v < v1 for with_v, v1 in zip(view.speedups_with_verify, view.speedups))
    assert view.speedups[0] == pytest.approx((1 + 0.7) / (0.1 + 1))
    assert view.best_gamma_with_verify >= view.best_gamma  # a fixed cost per round favours longer drafts


def test_pays_region_is_alpha_above_c_when_verify_is_free():
    for cost_ratio in (0.05, 0.3, 0.8):
        assert theory.min_paying_alpha(cost_ratio) == pytest.approx(cost_ratio, abs=1e-6)
        assert theory.min_paying_alpha(cost_ratio, verify_cost=1.5) > cost_ratio
    assert theory.min_paying_alpha(0.9, verify_cost=3.0) is None  # no α makes it pay
    assert theory.min_paying_alpha(0.0, verify_cost=0.8) == 0.0  # a verify cheaper than a step pays at once
    view = explorer.theory_view(0.5, 1.5, 1.0)
    assert view.max_cost >= 1.5  # the (c, α) plane reaches the point
    assert view.paying_alpha is None  # c > 1: a draft step dearer than a target step never pays


# --- γ sweep ------------------------------------------------------------------------------------------------------------


def bench_result(gamma: int, median: float, low: float, high: float) -> BenchResult:
    return BenchResult(gamma=gamma, temperature=0.0, median_speedup=median, min_speedup=low, max_speedup=high,
                       acceptance_rate=0.7, tokens_per_target_forward=2.0, c=0.1, verify_cost=1.0 + 0.1 * gamma,
                       median_baseline_tokens_per_s=10.0, median_speculative_tokens_per_s=10.0 * median,
                       predicted_speedup=1.5, num_runs=3)


def test_sweep_view_names_the_ties_and_gives_a_tie_to_the_smaller_gamma():
    view = sweep.sweep_view([bench_result(3, 1.40, 1.30, 1.50), bench_result(1, 1.10, 1.00, 1.20),
                           bench_result(2, 1.35, 1.25, 1.45), bench_result(4, 1.20, 1.10, 1.30)])
    assert [r.gamma for r in view.results] == [1, 2, 3, 4]
    assert view.best_gamma == 3 and view.tied_gammas == (2, 3)  # γ = 2's median lies inside γ = 3's spread
    assert view.recommended_gamma == 2
    assert view.predicted_with_verify[0] == pytest.approx(theory.expected_speedup(0.7, 1, 0.1, 1.1))


def test_sweep_runs_the_bench_loop_with_progress():
    pair = tiny_pair("gpt2")
    config = sweep.sweep_config(DecodeConfig(temperature=0.0, max_new_tokens=8), (1, 2), repeats=2)
    num_done = []
    for progress in sweep.sweep_gammas(pair, [5, 6, 7], config):  # one progress object, updated after every run
        num_done.append(progress.num_done)
    assert num_done == list(range(0, 7))
    results = progress.results(0.0)
    assert [r.gamma for r in results] == [1, 2] and all(r.num_runs == 2 for r in results)
    with pytest.raises(ValueError, match="smallest first"):
        sweep.sweep_gamma_range(5, 2)
    with pytest.raises(ValueError, match="repeats"):
        sweep.sweep_config(DecodeConfig(), (1,), repeats=9)


def test_a_sweep_with_a_tree_budget_times_a_chain_and_that_tree_at_every_gamma():
    """The sweep keeps the page's tree budget: dropped, the sweep would time chains only and its pick ignore trees."""
    pair = tiny_pair("gpt2")
    config = sweep.sweep_config(DecodeConfig(temperature=0.0, max_new_tokens=8, tree=4), (1, 2), repeats=1)
    assert config.trees == (0, 4)
    for progress in sweep.sweep_gammas(pair, [5, 6, 7], config):
        pass
    assert progress.num_done == progress.num_total == 1 + 2 * 2  # a baseline, then each γ as a chain and as tree 4
    results = progress.results(0.0)
    assert [(r.gamma, r.tree) for r in results] == [(1, 0), (2, 0), (1, 4), (2, 4)]
    view = sweep.sweep_view(results)
    assert view.trees == (0, 4) and [(m.gamma, m.tree) for m in view.payoff.measured] == [(1, 0), (2, 0), (1, 4), (2, 4)]
    assert len(view.predicted_with_verify) == len(view.results_of(0)) == 2  # the formula is a chain's
    assert 'data-tree="' in sweep_page.sweep_status_html(progress.num_done, progress.num_total, 3.0, view)
    chain_only = sweep.sweep_config(DecodeConfig(temperature=0.0, max_new_tokens=8), (1, 2), repeats=2)
    assert chain_only.trees == (0,) and chain_only.num_timed_runs(1) == 2 * (1 + 2)  # a chain only, as before trees


def test_the_sweep_times_what_the_page_runs():
    page = DecodeConfig(tree=6, rivals=1, draft_confidence=0.3, gamma_schedule="heuristic", drafter="ngram", ngram=2)
    config = sweep.sweep_config(page, (2, 3), repeats=1)
    assert config.trees == (0, 6) and config.engine.rivals == 1 and config.engine.draft_confidence == 0.3
    assert config.engine.gamma_schedule == "heuristic" and config.engine.drafter == "ngram" and config.engine.ngram == 2
    # every other setting too: a timed run is the page's own config with the run's γ, tree and seed
    assert config.decode_config(page.temperature, 7, 3, 6) == dataclasses.replace(page, gamma=3, seed=7)


def tree_cell(gamma: int, tree: int, median: float, low: float, high: float, tau: float, verify: float) -> BenchResult:
    return dataclasses.replace(bench_result(gamma, median, low, high), tree=tree, tokens_per_target_forward=tau,
                               verify_cost=verify)


def test_the_rule_picks_the_tree_budget_as_it_picks_gamma_and_says_what_a_tree_trades():
    chains = [tree_cell(1, 0, 1.10, 1.05, 1.15, 1.6, 1.05), tree_cell(2, 0, 1.25, 1.20, 1.30, 2.1, 1.12),
              tree_cell(3, 0, 1.15, 1.10, 1.20, 2.3, 1.20)]
    trees = [tree_cell(1, 8, 1.20, 1.15, 1.25, 1.9, 1.30), tree_cell(2, 8, 1.60, 1.55, 1.65, 2.8, 1.45),
             tree_cell(3, 8, 1.40, 1.35, 1.45, 3.0, 1.60)]
    view = sweep.sweep_view(trees + chains)
    assert (view.recommended_gamma, view.recommended_tree) == (2, 8) and view.best_gamma == 2
    assert view.alpha == 0.7 and view.predicted_with_verify[1] == pytest.approx(theory.expected_speedup(0.7, 2, 0.1, 1.12))
    html = sweep_page.sweep_status_html(7, 7, 30.0, view)
    assert 'data-gamma="2" data-tree="8"' in html and "<b>Recommended: γ = 2, tree 8</b>: median 1.60×" in html
    assert "Why this setup:" in html
    assert ("A tree trades more tokens per target pass (τ) for a costlier verify (v, in target steps), since one pass "
            "checks every node: here the chain&#x27;s pick, γ = 2, gave τ = 2.10 at v = 1.12, and tree 8&#x27;s, "
            "γ = 2, τ = 2.80 at v = 1.45.") in html
    assert "Both curves are a chain's" in html and "γ = 2, tree 8: α̂ 0.70, τ 2.80" in html
    figure = sweep_page.gamma_sweep(view)
    measured = {trace.meta: trace for trace in figure.data if str(trace.meta).startswith("measured")}
    assert set(measured) == {"measured", "measured-tree-8"}
    assert list(measured["measured"].x) == [1, 2, 3] and measured["measured-tree-8"].x[1] > 2  # nudged apart
    assert measured["measured"].name.startswith("chain") and measured["measured-tree-8"].name.startswith("tree 8")
    assert measured["measured"].marker.symbol != measured["measured-tree-8"].marker.symbol
    assert list(measured["measured-tree-8"].error_y.array) == pytest.approx([0.05, 0.05, 0.05])
    assert "recommended γ = 2, tree 8" in figure.layout.title.text
    # A tree within the noise of the chain's best: the tie goes to the chain, which verifies less.
    tied = sweep.sweep_view(chains + [tree_cell(2, 8, 1.27, 1.22, 1.32, 2.8, 1.45)])
    assert (tied.recommended_gamma, tied.recommended_tree) == (2, 0)
    tied_html = sweep_page.sweep_status_html(7, 7, 30.0, tied)
    assert 'data-tree="0"' in tied_html and "<b>Recommended: γ = 2, a chain</b>" in tied_html
    # Chains alone read as before: no tree named, no trade, one measured series.
    alone = sweep.sweep_view(chains)
    alone_html = sweep_page.sweep_status_html(4, 4, 9.0, alone)
    assert "<b>Recommended γ = 2</b>" in alone_html and 'data-tree="0"' in alone_html and alone.recommended_tree == 0
    assert not any(words in alone_html for words in ("tree ", "a chain", "A tree trades", "Why this setup"))
    assert [t.meta for t in sweep_page.gamma_sweep(alone).data if str(t.meta).startswith("measured")] == ["measured"]


def test_a_stopped_sections_progress_line_keeps_its_count_but_no_time_left():
    """After Stop the sweep's and the lab's progress line still said "about 28 s left" above "Stopped: …"."""
    from types import SimpleNamespace

    from specviz.app.section_jobs import going, progress_html, record_stopped

    status = progress_html(4, 14, "timed runs", 11.0)
    assert "about 28 s left" in status
    stopped = record_stopped(SimpleNamespace(session_hash="progress-line"), "sweep", going(status),
                             "the runs made so far.", "γ sweep")
    assert "4 of 14 timed runs · 11 s" in stopped and "left" not in stopped, stopped
    assert stopped.count("Stopped: the runs made so far.") == 1


# the tiny pair, a small lab and sweep; every other control at the page's own default
SMALL_JOBS = {"prompt": "def add(a, b):\n    return a + b\n\n\ndef add(", "chat": False, "pair": "tiny-code",
              "drafter": "model", "gamma": 2, "temperature": 1.0, "max-new-tokens": 8, "lab-n": 100, "sweep-from": 1,
              "sweep-to": 2, "sweep-repeats": 1}


@pytest.mark.parametrize("name, section, job", [("on_lab_run", "lab", "lab"), ("on_sweep_run", "sweep", "γ sweep")])
def test_a_sections_stop_ends_a_job_that_goes_on_and_says_when_none_does(name, section, job):
    """The lab's and the sweep's Stop, pressed with no job going (before any, or after one ended), added
    "Stopped: the chart shows the runs made so far." under a finished result; now it says nothing is going. Every
    status a job shows before its last says it goes on (from the queued line at Run), so a Stop then ends it."""
    from types import SimpleNamespace

    from specviz.app.section_jobs import GOING, going, on_section_queued, record_stopped

    demo = ui.build_app(preload=False)
    block_fn = next(block_fn for block_fn in demo.fns.values() if getattr(block_fn.fn, "__name__", "") == name)
    visitor = SimpleNamespace(session_hash=f"idle-{section}")
    arguments = [SMALL_JOBS.get(component.elem_id, component.value) for component in block_fn.inputs]
    statuses = [on_section_queued()] + [values[0] for values in block_fn.fn(visitor, *arguments)]
    assert len(statuses) >= 3 and "status-error" not in statuses[-1], statuses[-1]
    assert all(GOING in status for status in statuses[:-1]) and GOING not in statuses[-1]
    for status in ("", statuses[-1]):  # before any job, and after one ended
        said = record_stopped(visitor, section, status, "the results so far.", job)
        assert f"Nothing to stop: no {job} is going." in unescape(said) and "Stopped:" not in said
        assert record_stopped(visitor, section, said, "the results so far.", job) == said  # once, however often
    for status in statuses[:-1]:
        assert "Stopped: the results so far." in record_stopped(visitor, section, status, "the results so far.", job)


def test_a_stop_press_ends_only_the_jobs_it_came_after():
    presses = StopPresses()
    started = 100.0
    assert not presses.since("visitor", "lab", started)
    presses.press("visitor", "lab")
    assert presses.since("visitor", "lab", 0.0)  # a job that began before the press stops
    assert not presses.since("visitor", "lab", float("inf"))  # a job started after it runs on
    assert not presses.since("visitor", "sweep", 0.0) and not presses.since("someone else", "lab", 0.0)
    for number in range(StopPresses.KEPT + 10):
        presses.press(f"visitor {number}", "lab")
    assert len(presses.pressed) == StopPresses.KEPT


def test_a_sweep_of_one_repeat_is_judged_with_the_band_one_run_has_here_as_the_statistics_judge_one_run():
    """One repeat per γ measured 1.59–1.72× and the chart said "no γ beats the target alone beyond the noise"
    while the run's statistics, with the bench record's band for one run, said it pays (an Intel Xeon with AMX)."""
    once = [dataclasses.replace(bench_result(gamma, median, median, median), num_runs=1)
            for gamma, median in ((1, 1.59), (2, 1.72), (3, 1.70))]
    assert sweep.sweep_view(once).recommended_gamma is None  # no band measured: one run cannot say
    band = Spread(0.71, 1.39, "the bench's 24 greedy runs")
    view = sweep.sweep_view(once, spread=band)
    assert view.recommended_gamma == 1 and view.tied_gammas == (1, 2, 3)  # 1.59× ≥ 1.72 × 0.71: all within the noise
    html = sweep_page.sweep_status_html(4, 4, 5.0, view)
    assert 'data-gamma="1"' in html and "the bench&#x27;s 24 greedy runs" in html
    figure = sweep_page.gamma_sweep(view)
    ring = next(trace for trace in figure.data if trace.meta == "recommended")
    assert list(ring.x) == [1] and list(ring.y) == [1.59] and ring.name == "recommended: γ = 1" and ring.text is None
    three = sweep.sweep_view([bench_result(2, 1.35, 1.25, 1.45)], spread=Spread(0.1, 9.0, "wide"))
    assert three.payoff.measured[0].spread is None  # repeats give their own spread: the band is for one run


# --- the sweep and the theory explorer give the one verdict ----------------------------------------


def test_a_sweep_where_nothing_beats_the_target_recommends_none():
    view = sweep.sweep_view([bench_result(1, 0.95, 0.90, 1.02), bench_result(2, 1.04, 0.96, 1.12),
                           bench_result(3, 0.80, 0.70, 0.90)])
    assert view.best_gamma == 2 and view.recommended_gamma is None and not view.payoff.pays
    html = sweep_page.sweep_status_html(9, 9, 12.0, view)
    # γ = 2 is faster at the median but its runs reach 0.96×: no gain beyond the noise, said with its figures
    assert 'data-gamma="none"' in html and "none beyond the noise: γ = 2&#x27;s median is 1.04×, but it reaches down to 0.96×" in html
    assert "Not shown to pay here: γ = 2 measured a median 1.04×" in html
    assert "What would change it" in html
    assert "Recommended γ = " not in html
    assert html.count("The formula predicts") + html.count("the formula predicts") == 1  # said once, as the reason
    assert "no γ beats the target alone" in sweep_page.gamma_sweep(view).layout.title.text
    slower = sweep.sweep_view([bench_result(1, 0.95, 0.90, 1.02), bench_result(2, 0.91, 0.85, 0.99)])
    assert 'data-gamma="none"' in sweep_page.sweep_status_html(6, 6, 8.0, slower)
    assert "none: the target alone is faster here" in sweep_page.sweep_status_html(6, 6, 8.0, slower)


def test_the_theory_explorer_words_a_prediction_as_one_and_never_garbles_alpha_below_c():
    view = explorer.theory_view(0.3, 0.5, 1.5)
    note = theory_page.theory_note_html(view.alpha, view.cost_ratio, view.verify_cost, None, None, view.paying_alpha)
    assert "outside the green area (α ≤ c)" in note and "(α &gt; c, the green area)" not in note
    assert PREDICTION_ONLY in note and "pays" not in note and "Recommended" not in note
    assert "Formula predicts no gain (v = 1), no gain (v = 1.50)" in theory_page.theory_explorer(view).layout.title.text
    # the longest titles (no γ gains; the largest γ on both curves) well inside one line of the chart at 400 px,
    # where 70 characters fitted and 72 ran past its edge
    longest = [explorer.theory_view(0.3, 0.5, 2.5), explorer.theory_view(0.99, 0.01, 1.0),
               explorer.theory_view(0.8, 0.01, 1.0)]  # γ 13 to 15 print alike on both curves
    assert all(len(theory_page.theory_title(each)) <= 60 for each in longest), \
        [theory_page.theory_title(each) for each in longest]
    flat = explorer.theory_view(0.50, 0.086, 1.02)  # γ = 2 and 3 both print 1.47×: the title names both
    assert "Formula predicts γ = 2–3 (v = 1), γ = 2–3 (v = 1.02)" in theory_page.theory_title(flat)
    good = explorer.theory_view(0.8, 0.05, 1.0)
    note = theory_page.theory_note_html(good.alpha, good.cost_ratio, good.verify_cost, None, None, good.paying_alpha)
    assert "in the green area (α &gt; c)" in note  # and the formula's best γ, worded as a prediction
    assert Payoff(good.alpha, good.cost_ratio, good.verify_cost).formula_text()[1:] in note
    # c + v under one (a run measured v = 0.88): every α gains by the formula, which is said, not "α above 0.00"
    cheap = explorer.theory_view(0.67, 0.06, 0.88)
    note = theory_page.theory_note_html(cheap.alpha, cheap.cost_ratio, cheap.verify_cost, None, None,
                                        cheap.paying_alpha)
    assert "above 0.00" not in note and "a gain at any α, even 0: at γ = 1 a round costs c + v = 0.94" in note


def test_the_theory_explorer_gives_the_last_runs_measured_verdict():
    slow = Comparison(speedup=0.46, acceptance_rate=0.35, cost_ratio=0.3, verify_cost=1.8, predicted_speedup=1.1,
                      predicted_with_verify=0.6, best_gamma=1, pays=False)
    note = theory_page.theory_note_html(0.35, 0.3, 1.8, slow, 16, theory.min_paying_alpha(0.3, 1.8))
    assert "Here speculation does not pay: this run measured 0.46× at γ = 16" in note
    assert "pays" not in note.replace('data-pays="false"', "")
    # its detail (the noise, what would change it) has one home, under the result card: here only where it is
    assert "verdict-detail" not in note and "noise-note" not in note and "under the result card" in note


def test_step_mode_names_the_targets_favourite_after_a_rejection_by_its_text():
    from specviz.decoding.events import PositionDetail
    from tests.test_render import detail

    favourite = PositionDetail(((6, 0.9),), ((6, 0.9),), ())  # "return": no other position's top token
    event = RoundEvent("speculative", 0, 1, 3,
                       chain(draft(3, 0.6, 0.3, 0.2, "accepted"), draft(8, 0.5, 0.1, 0.9, "rejected"),
                             draft(9, 0.4, 0.2, 0.5, "unexamined"), then=(4, "resample")),
                       1, 4, "resample", (3, 4), 0.006, 0.025, 3, 1,
                       details=(detail(), detail(((4, 0.7), (5, 0.3))), detail(), favourite))
    view = render.RunView("x", [1], gamma=3, settings={"temperature": 1.0}, lanes=("speculative",))
    view.add(PrefillEvent("speculative", 1, 2, 0.01, 1, 1), decode)
    view.add(event, decode)
    lane = view.speculative
    html = step_words.round_html(event, lane.round_texts[0], lane.labels, 1, "model", room_of(3), greedy=False)
    assert "the target's favourite would be" in html and ">return<" in html and "#6" not in html


def test_a_round_cut_by_an_accepted_end_of_text_is_worded_one_way_everywhere():
    full = bonus_round(0, 1, gamma=3)
    cut = dataclasses.replace(full, emitted_ids=full.emitted_ids[:2])  # the second draft was the end of text
    view = render.RunView("x", [1], gamma=3, settings={"temperature": 0.0})
    for lane in ("baseline", "speculative"):
        view.add(PrefillEvent(lane, 1, 2, 0.012, 1, int(lane == "speculative")), decode)
    view.add(RoundEvent("baseline", 0, 1, 0, (), 0, 1, "target", (1,), 0.0, 0.02, 0, 1), decode)
    view.add(cut, decode)
    lane_html = render.lanes_html(view)[1]
    inspector = inspector_words.inspector_html(view, 0)
    label = inspector_words.round_choices(view)[0][0]
    explainer = render.explain_html(view)
    assert rule.DROPPED_TEXT in lane_html and rule.DROPPED_TEXT in inspector
    assert rule.VERDICT_TEXT["unexamined"] not in lane_html + inspector
    assert label == f"round 1: 2/3 kept, {rule.END_OF_TEXT}"
    drafted = view.speculative.round_texts[0].drafted
    kept = " ".join(render.tokens.inline_token(text, "accepted") for text in drafted[:2])
    assert rule.ended_story(kept, "2 tokens") in explainer
    assert render.tokens.escape_text(rule.ended_sentence("2 of the drafts")) in inspector


def test_the_labs_status_says_p_value_and_how_long_is_left():
    """On this page p is the target's probability: the lab names its statistic "p-value", never a bare p,
    and a long lab says how long it has left from its pace so far."""
    halfway = lab_page.lab_status_html(250, 500, {"baseline": 0.42, "speculative": 3e-7}, 8, False, 120.0)
    assert "p-value = 0.42" in halfway and "p-value = 3e-07" in halfway
    assert re.search(r"\bp = ", halfway) is None and "p is the chance" not in halfway
    assert 'data-left-s="120"' in halfway and "about 2 min left" in halfway
    done = lab_page.lab_status_html(500, 500, {"baseline": 0.42, "speculative": 0.3}, 8, False, 240.0)
    assert "left" not in done
    # before the first draw there is no pace yet: the line says when the estimate comes, not a guess
    first = lab_page.lab_status_html(0, 500, {}, 8, False, 1.0)
    assert "the time left shows after the first" in first and "data-left-s" not in first


def test_the_labs_example_says_what_it_changed():
    html = unescape(lab_page.lab_example_html({"pair": "tiny-code", "prompt": "        if not", "chat": False, "top_k": 10}, 500))
    assert "pair 'tiny-code'" in html and "prompt '        if not'" in html and "chat off" in html
    assert "top-k 10" in html and "N = 500" in html and "cleared" in html


# --- step mode's reasons and rival guesses ---------------------------------------------------------------


def step_stages(pair: ModelPair, prompt: list[int], config: DecodeConfig) -> list[tuple[RoundEvent, str]]:
    """Every round of a step run with its stages' text (HTML unescaped, tags dropped), as step mode shows it."""
    view = render.RunView("prompt", prompt, config.gamma, {"temperature": config.temperature}, lanes=("speculative",))
    step = step_mode.StepRun(pair, prompt, config)
    for event in step.start():
        view.add(event, decode_ids)
    shown = []
    while not step.done:
        for event in step.advance():
            view.add(event, decode_ids)
            if isinstance(event, RoundEvent):
                lane = view.speculative
                html = step_words.round_html(event, lane.round_texts[event.round_index], lane.labels, 1, config.drafter,
                                               step.draft_room(event), greedy=config.temperature == 0)
                shown.append((event, page_text(html)))
    step.close()
    return shown


def page_text(html: str) -> str:
    """What a reader sees: tags dropped, then entities read (a token may be "<b>")."""
    return unescape(re.sub(r"<[^>]+>", "", html))


def decode_ids(ids):
    return "".join(f" t{token_id}" for token_id in ids)


def test_step_mode_says_the_confidence_stop_not_the_token_limit_when_drafting_stops_early():
    """A round the drafter's confidence stop ended says so, not "Only 1 of γ = 3: the token limit is near." at
    token 2 of 64. The reason is the real one, in the round's own numbers."""
    pair = tiny_pair("gpt2")  # random weights: the draft is never 90% sure
    config = DecodeConfig(gamma=3, temperature=1.0, max_new_tokens=12, seed=2, draft_confidence=0.9, rivals=0,
                          stop_at_eos=False)
    shown = step_stages(pair, [5, 6, 7], config)
    first, text = shown[0]
    assert first.stopped_unsure and first.gamma == 1
    sure = f"the drafter was only {first.drafted[0].draft_confidence:.0%} sure of its 1st draft"
    assert f"Only 1 of γ = 3: {sure}, under the “draft only while sure” threshold 0.90" in text
    assert "limit" not in text
    last, text = shown[-1]  # 12 new tokens: the last rounds have room for fewer than γ + 1
    unsure_free = DecodeConfig(**{**dataclasses.asdict(config), "draft_confidence": 0.0})
    ends = [(event, words) for event, words in step_stages(pair, [5, 6, 7], unsure_free) if event.gamma < 3]
    assert ends, "no round near the limit drafted fewer than γ"
    for event, words in ends:
        room = 12 - event.position
        assert f"Only {event.gamma} of γ = 3: the 12-token limit leaves room for {room} more token" in words
        assert "sure" not in words.split("Only")[1].split(".")[0]


def test_step_mode_at_temperature_0_gives_the_targets_pick_and_no_coin():
    """The inspector says "no coin is drawn" at T = 0; step mode said "Draw r ~ U(0, 1) … r = 0.634 ≥ min(1,
    0.000 / 1.000)" and "drew ' Edinburgh' from norm(max(0, p − q))" on the same round. Now its stages give the
    rule that decides there, the target's own top pick, as the hover and the inspector do."""
    pair = tiny_pair("gpt2")
    config = DecodeConfig(gamma=3, temperature=0.0, max_new_tokens=16, seed=1, draft_confidence=0.0, rivals=0,
                          stop_at_eos=False)
    shown = step_stages(pair, [5, 6, 7], config)
    rejected = [(event, text) for event, text in shown if event.gamma and event.next_kind == "resample"]
    assert rejected, "no greedy round with a rejection"
    event, text = rejected[0]
    bad = event.drafted[event.num_accepted]
    accept = text.split("Accept or reject, left to right.")[1].split("· Verdict")[0]
    assert as_sentence(rule.GREEDY_RULE) in accept and "r = " not in accept and "min(1" not in accept
    assert f" t{bad.token_id}: {rule.pick_test(False, f' t{event.next_id}')} → rejected" in accept
    correction = text.split(f"· {rule.OWN_PICK.capitalize()}.")[1]  # its one-line caption, then its paragraph
    assert rule.replacement_story(f" t{event.next_id}", greedy=True) in correction
    # the verify names the target's own top pick where the round shows it: at each kept draft and at the rejection
    picks = [f"at draft {i + 1}  t{token.token_id if i < event.num_accepted else event.next_id}, "
             f"{token.target_confidence:.0%} sure" for i, token in enumerate(event.drafted[: event.num_accepted + 1])]
    assert rule.verify_story(count(event.gamma, "draft"), "", event.gamma + 1, True, step_words.listing(picks)) in text
    assert "p( " not in text  # p is one-hot at T = 0: it says nothing the pick does not
    # Above temperature 0 the coin decides, and step mode shows it.
    sampled = step_stages(pair, [5, 6, 7], dataclasses.replace(config, temperature=1.0))
    assert any(rule.COIN_TEST in words and "r = " in words for event, words in sampled if event.gamma)


def test_a_round_planned_short_by_the_heuristic_schedule_says_so():
    room = step_mode.DraftRoom(gamma=4, planned=2, room=40, limit=64, limit_is_context=False, threshold=0.0)
    event = bonus_round(0, 5, gamma=2)
    assert room.fewer_cause(event) == "schedule"
    assert step_mode.DraftRoom(4, 4, 2, 64, True, 0.0).fewer_cause(event) == "context"
    assert step_mode.DraftRoom(2, 2, 40, 64, False, 0.0).fewer_cause(event) == ""
    view = render.RunView("x", [1], gamma=4, settings={}, lanes=("speculative",))
    for shown in (PrefillEvent("speculative", 1, 2, 0.012, 1, 1), event):
        view.add(shown, decode)
    html = step_words.round_html(event, view.speculative.round_texts[0], view.speculative.labels, 5, "model", room,
                                   greedy=False)
    assert "Only 2 of γ = 4: the heuristic γ schedule planned 2 for this round" in unescape(html)


def rival_round(taken_index: int | None) -> tuple[RoundEvent, render.LaneView]:
    """A greedy round whose unsure first pick (#8, 41% sure) had rivals #3 (27%) and #9 (12%): the target
    took guess `taken_index` (0: the first pick, 1: #3) or none of them."""
    # greedy: tried surest first up to the target's own pick (p = 1), the ones after it never examined
    verdicts = (["rejected"] * 3 if taken_index is None
                else ["rejected"] * taken_index + ["accepted"] + ["unexamined"] * (2 - taken_index))
    told = taken_index or 0  # the guess the round tells as its draft (`drafted`), the one with its coin kept
    nodes = rivals(*(guess(token_id, sure, float(i == taken_index), verdict, r=0.3 if i == told else None)
                     for i, (token_id, sure, verdict) in enumerate(zip((8, 3, 9), (0.41, 0.27, 0.12), verdicts))),
                   then=(4, "resample") if taken_index is None else (5, "bonus"))
    if taken_index is None:
        event = RoundEvent("speculative", 0, 1, 1, nodes, 0, 4, "resample", (4,), 0.002, 0.03, 1, 1,
                           stopped_unsure=True, shape="rivals")
    else:
        event = RoundEvent("speculative", 0, 1, 1, nodes, 1, 5, "bonus", ((8, 3)[taken_index], 5), 0.002, 0.03, 1, 1,
                           stopped_unsure=True, shape="rivals")
    view = render.RunView("x", [1], gamma=3, settings={"temperature": 0.0, "rivals": 2}, lanes=("speculative",))
    for shown in (PrefillEvent("speculative", 1, 2, 0.012, 1, 1), event):
        view.add(shown, decode)
    return event, view.speculative


@pytest.mark.parametrize("taken_index", [0, 1, None])
def test_step_mode_explains_rival_guesses_and_what_became_of_them(taken_index):
    event, lane = rival_round(taken_index)
    html = step_words.round_html(event, lane.round_texts[0], lane.labels, 1, "head", room_of(3, threshold=0.5),
                                   greedy=True)
    assert 'data-stage="rivals"' in html
    text = page_text(html)
    # The draft stage names the drafter's own first pick (" <b>", 41%) and why the round stopped at one token.
    assert "Only 1 of γ = 3: the drafter was only 41% sure of its 1st draft, under the “draft only while sure” threshold 0.50" in text
    draft_stage = text.split("2 · Verify")[0]
    assert " <b> (q = 1, 41% sure). At temperature 0 q is 1 for any top guess: the percentage is how sure" in draft_stage
    rivals = text.split("3 · Rival guesses.")[1].split("4 · ")[0]
    assert rule.rivals_offered_story(" <b>", "41%", "2nd and 3rd", "(x (27%) and  & ${y} (12%)") in rivals
    outcome = {0: rule.rivals_taken_story(0, 3, " <b>", dropped="(x and  & ${y}"),
               1: rule.rivals_taken_story(1, 3, " <b>", "(x", "2nd", " <b> and  & ${y}"),
               None: rule.rivals_taken_story(None, 3, " <b>")}[taken_index]
    assert outcome in rivals


# --- one answer to "which γ" -----------------------------------------------------------------------


def flat_sweep() -> list[BenchResult]:
    """A flat sweep: γ 1–6 × 2 repeats, every median 1.20–1.27×, the best at the range's edge."""
    cells = [(1, 1.20, 1.19, 1.21), (2, 1.24, 1.23, 1.25), (3, 1.25, 1.24, 1.26), (4, 1.23, 1.22, 1.24),
             (5, 1.26, 1.25, 1.27), (6, 1.27, 1.26, 1.27)]
    return [dataclasses.replace(bench_result(*cell), num_runs=2) for cell in cells]


def test_medians_within_the_noise_are_a_tie_and_it_goes_to_the_smaller_gamma():
    view = sweep.sweep_view(flat_sweep())
    assert view.best_gamma == 6  # the highest median, 1.27×…
    assert view.tied_gammas == (2, 3, 4, 5, 6)  # …but γ 2–5 are within 5% of it; γ = 1's 1.20× is not
    assert view.recommended_gamma == 2 and view.payoff.at_range_edge is None
    html = sweep_page.sweep_status_html(14, 14, 41.0, view)
    assert 'data-gamma="2"' in html and "Recommended γ = 2</b>: median 1.24×" in html
    assert "γ = 6&#x27;s 1.27×" in html and "a tie goes to the smaller γ: γ = 2" in html and "a tie goes to the smaller γ" in html
    assert "Recommended γ = 6" not in html
    # Five of six tie: another sweep may pick another of them, and the page says what narrows the spread.
    assert "5 of the 6 γ measured are within the noise of the best, so another sweep may well pick another" in html
    assert "more repeats, or a longer answer, narrow the spread" in html
    assert "within the noise of the best, so another sweep" not in sweep_page.sweep_status_html(
        10, 10, 20.0, sweep.sweep_view(clear_rise()))
    assert "the formula predicts" in html and "a prediction, not a measurement" in html
    assert "recommended γ = 2" in sweep_page.gamma_sweep(view).layout.title.text
    # the bench's text and JSON give the same answer by the same rule
    assert bench.payoff_of(flat_sweep(), 0.0).recommended_gamma == 2
    table = bench.format_table(flat_sweep())
    assert "recommended γ = 2: " in table and "the formula predicts" in table and "recommended γ = 6" not in table
    record = bench.recommendation_record(flat_sweep(), 0.0)
    assert record["gamma"] == 2 and record["best_median_gamma"] == 6 and record["tied_gammas"] == [2, 3, 4, 5, 6]


def clear_rise() -> list[BenchResult]:
    """γ 1–4, each median beyond the noise of the next: no ties."""
    return [dataclasses.replace(bench_result(gamma, median, median - 0.02, median + 0.02), num_runs=2)
            for gamma, median in ((1, 1.05), (2, 1.15), (3, 1.30), (4, 1.45))]


def test_a_choice_at_the_edge_of_the_range_says_so_and_suggests_widening_it():
    rising = clear_rise()
    view = sweep.sweep_view(rising)
    assert view.recommended_gamma == 4 and view.payoff.at_range_edge == "largest"
    html = sweep_page.sweep_status_html(10, 10, 20.0, view)
    assert 'data-edge="largest"' in html and "γ = 4 is the largest γ measured" in html and "widen the range" in html
    assert bench.recommendation_record(rising, 0.0)["at_range_edge"] == "largest"
    assert "widen the range upwards" in bench.format_table(rising)
    falling = [dataclasses.replace(bench_result(gamma, median, median - 0.02, median + 0.02), num_runs=2)
               for gamma, median in ((3, 1.45), (4, 1.30), (5, 1.15))]
    assert sweep.sweep_view(falling).payoff.at_range_edge == "smallest"
    assert "widen the range downwards" in sweep_page.sweep_status_html(6, 6, 9.0, sweep.sweep_view(falling))
    inside = sweep.sweep_view([bench_result(1, 1.10, 1.05, 1.15), bench_result(2, 1.40, 1.35, 1.45),
                               bench_result(3, 1.20, 1.15, 1.25)])
    assert inside.recommended_gamma == 2 and inside.payoff.at_range_edge is None
    assert "widen" not in sweep_page.sweep_status_html(9, 9, 9.0, inside)
    alone = sweep_page.sweep_status_html(3, 3, 3.0, sweep.sweep_view([bench_result(3, 1.40, 1.35, 1.45)]))
    assert 'data-gamma="3"' in alone and "Why this γ" not in alone and "widen" not in alone  # one γ: no range
    assert sweep.sweep_view([bench_result(1, 1.40, 1.35, 1.45), bench_result(2, 1.10, 1.05, 1.15)]).payoff.at_range_edge is None  # γ = 1 is as small as γ goes


def test_the_runs_stats_table_gives_one_recommendation_with_the_formula_beside_it_as_a_prediction():
    from tests.test_render import timed_run, visible_text

    run = timed_run(speculative_verify_s=0.02)
    run.repeats = (1.9, 2.0, 2.1)  # three runs of it on the page: their spread, all above 1×, is the band
    table = visible_text(render.stats_html(run).split('class="theory-table"')[1])
    assert table.count("Recommended") == 1 and "the formula's best γ" not in table
    stats = render.stats_dict(run)
    assert f"the formula predicts γ = {stats['best_gamma']} would do best" in table
    assert f"at this α̂ = {stats['acceptance_rate']:.2f}, c = " in table  # its own figures: a sweep's differ


# --- the lab's verdict against its threshold, and where it tests -------------------------------------------


def test_the_labs_verdict_states_its_threshold_and_agrees_with_the_whiskers():
    """Each verdict is said against its threshold (a bare "Target alone: p-value = 0.03 — consistent with …"
    beside a bar outside its ±2σ whisker, with the 0.01 threshold named only for the wrong rule, reads as a
    contradiction), and a bar outside its whisker is said to happen about 1 time in 20 by chance."""
    html = unescape(lab_page.lab_status_html(500, 500, {"baseline": 0.03, "speculative": 2e-9}, 13, True, 60.0,
                                            outside={"baseline": 1, "speculative": 5}))
    assert ("Target alone: p-value = 0.03 ≥ 0.01: no evidence against the target's exact distribution, though 1 of "
            "its 13 bars sits outside the ±2σ whisker: about 1 bar in 20 does by chance") in html
    assert "p-value = 2e-09 < 0.01: these draws do not follow the target's distribution (5 of its 13 bars" in html
    assert "consistent with" not in html and "1 bar in 20 outside its whisker" in html
    plain = unescape(lab_page.lab_status_html(500, 500, {"baseline": 0.4}, 13, False, 60.0))
    assert "Target alone: p-value = 0.40 ≥ 0.01: no evidence against the target's exact distribution." in plain


def test_the_labs_verdict_is_given_only_away_from_its_threshold():
    """At the lab's smallest N a p-value of 0.0104 read "p-value = 0.01 ≥ 0.01: no evidence against …": a verdict
    on the threshold itself. Near it the lab says it cannot call it, with the p-value's third digit."""
    for p_value in (0.0051, 0.0104, 0.0149, 0.0199):
        html = unescape(lab_page.lab_status_html(500, 500, {"baseline": p_value}, 13, False, 60.0))
        assert f"p-value = {p_value:.3f}, too close to the 0.01 threshold to call either way" in html
        assert "no evidence against" not in html and "do not follow" not in html
    assert exactness.verdict_of(0.0049) == "parts" and exactness.verdict_of(0.02) == "follows"


def test_bars_outside_their_whiskers_are_counted_as_the_chart_draws_them():
    bins = exactness.Bins(((1, 2), (3, 4)), (0.5, 0.3, 0.2), True)
    tally = exactness.LabTally(bins, 100)
    for lane, counts in (("baseline", [50, 30, 20]), ("speculative", [70, 20, 10])):
        tally.counts[lane] = counts
    assert tally.bars_outside("baseline") == 0
    # 2σ at n = 100: 0.100, 0.092, 0.080; the speculative lane misses by 0.20, 0.10 and 0.10
    assert tally.bars_outside("speculative") == 3


def test_the_lab_gives_no_verdict_before_every_bin_expects_five_draws():
    """At 20 draws of a lab planned for 500 the chi-square test flagged the target against itself: no p-value
    until every tested pair is expected at least 5 times, and the status says how many draws that takes."""
    bins = exactness.Bins(((1, 2), (3, 4)), (0.5, 0.4, 0.1), True)
    assert bins.draws_needed == 50  # 5 / 0.1
    tally = exactness.LabTally(bins, 500)
    tally.counts["baseline"], tally.counts["speculative"] = [19, 1, 0], [10, 8, 2]
    assert tally.too_few("baseline") and tally.p_value("baseline") is None and tally.p_value("speculative") is None
    tally.outside["speculative"] = 1  # an outcome the target never gives: decisive at any count
    assert tally.p_value("speculative") == 0.0
    tally.counts["baseline"] = [45, 5, 0]
    assert not tally.too_few("baseline") and tally.p_value("baseline") < exactness.SIGNIFICANCE
    html = unescape(lab_page.lab_status_html(20, 500, {"baseline": None, "speculative": None}, 3, False, 5.0,
                                            draws_needed=50, settings="Drawn with the tiny-code pair at temperature 1."))
    assert html.count("no verdict yet: the test needs every tested pair expected at least 5 times, about 50 draws") == 2
    assert "do not follow" not in html and "no evidence" not in html
    assert "Drawn with the tiny-code pair at temperature 1." in html


def test_the_lab_restates_the_settings_its_draws_were_made_with():
    chain = lab_page.lab_settings_text("tiny-code", 1.0, 0, 0.9, 4, "draft model", 0)
    assert chain == "Drawn with the tiny-code pair at temperature 1, top-k off, top-p 0.9; γ = 4 from the draft model."
    tree = lab_page.lab_settings_text("tiny-code", 0.7, 10, 1.0, 4, "prompt lookup", 8)
    assert "temperature 0.7, top-k 10, top-p off; a tree of up to 8 nodes from the prompt lookup" in tree


def test_the_lab_tests_after_the_targets_greedy_start_where_it_is_unsure(monkeypatch):
    """Where the target is all but sure of the first two tokens, the lab's histogram would be one bar: it
    goes on along the target's own greedy text to the first position it is unsure of."""
    pair = tiny_pair("gpt2")
    config = DecodeConfig(gamma=2, temperature=1.0)
    prompt = [5, 6, 7]
    greedy, tops = [], []
    ids = list(prompt)
    for _ in range(7):  # the target's greedy path and its top probability at each position
        with torch.inference_mode():
            logits = pair.target(torch.tensor([ids])).logits[0, -1, : pair.vocab_size].float()
        tops.append(float(logits.softmax(-1).max()))
        greedy.append(int(logits.argmax()))
        ids.append(greedy[-1])
    unsure_at = 1 + min(range(6), key=lambda i: tops[1 + i])  # the least sure position after the first
    monkeypatch.setattr(exactness, "SPREAD_TOP", tops[unsure_at])
    assert exactness.unsure_lead(pair, prompt, config) == greedy[:unsure_at]
    first_ids, joint = exactness.exact_first_two(pair, prompt, config)
    monkeypatch.setattr(exactness, "SPREAD_TOP", float(joint.max()) - 1e-6)  # the prompt's end is "sure"
    start, start_ids, _ = exactness.choose_start(pair, prompt, config, (first_ids, joint))
    assert start_ids == prompt + list(start.lead_ids) and start.lead_ids and start.skipped_prob == float(joint.max())
    monkeypatch.setattr(exactness, "SPREAD_TOP", float(joint.max()))  # spread enough: the lab tests right there
    assert exactness.choose_start(pair, prompt, config, (first_ids, joint))[0] == exactness.LabStart()
    words = unescape(lab_page.lab_start_html(" Edinburgh,", "The capital", 0.83))
    assert "all but sure" in words and "83%" in words and "greedy start" in words


@pytest.mark.timeout(120)
def test_at_the_pages_default_prompt_the_labs_histogram_has_several_outcomes():
    """Measured with the real default pair at the page's first example (a chat answer's "The capital" is
    83% sure at T = 0.7): the lab tests after the target's own start, over several outcomes."""
    from specviz.analysis.bench import load_prompts
    from specviz.models.loading import load_pair

    pair = load_pair()
    example = load_prompts()[0]
    prompt_ids = pair.encode(example.text, example.chat is not False)
    config = DecodeConfig(temperature=0.7, drafter="head")
    exact = exactness.exact_first_two(pair, prompt_ids, config)
    assert float(exact[1].max()) > exactness.SPREAD_TOP  # right after the prompt: one bar and "other"
    start, _, (first_ids, joint) = exactness.choose_start(pair, prompt_ids, config, exact)
    assert start.lead_ids and "Edinburgh" in pair.decode(list(start.lead_ids))
    assert exactness.choose_bins(first_ids, joint, 500).num_bins >= 5
