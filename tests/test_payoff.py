"""One home per answer: the page's one recommended γ (payoff.GammaAnswer, which every section reads), a short
verdict with its detail one click away, and one GPU sentence, for the pair that ran, read from its own record."""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from html import unescape

import pytest

from specviz.analysis import bench, expectations, payoff
from specviz.analysis.bench import BenchResult
from specviz.app import render
from specviz.app.gamma_sweep import measure as sweep, page as sweep_page
from specviz.app.render.stats import comparison_of
from specviz.app.render.verdict import verdict_html, which_gamma
from specviz.app.theory_explorer import page as theory_page
from tests.test_expectations import a_gpu_record, a_record, clear_caches, write_records
from tests.test_render import timed_run, visible_text


def cell(gamma: int, median: float, low: float, high: float, acceptance: float = 0.69,
         tau: float = 2.0) -> BenchResult:
    """A sweep cell of 2 runs; α̂ and τ alike at every γ, as where the drafter's stop capped the rounds."""
    return BenchResult(gamma=gamma, temperature=0.0, median_speedup=median, min_speedup=low, max_speedup=high,
                       acceptance_rate=acceptance, tokens_per_target_forward=tau, c=0.05, verify_cost=1.1,
                       median_baseline_tokens_per_s=10.0, median_speculative_tokens_per_s=10.0 * median,
                       predicted_speedup=1.8, num_runs=2)


def capped_sweep() -> sweep.SweepView:
    """γ 2–6 swept, no round drafting more than 2 tokens: γ 3–6 measure the same rounds, within the noise."""
    cells = [cell(2, 1.30, 1.25, 1.35), cell(3, 1.32, 1.27, 1.37), cell(4, 1.29, 1.24, 1.34), cell(5, 1.31, 1.26, 1.36),
             cell(6, 1.33, 1.28, 1.38)]
    return sweep.sweep_view(cells, most_drafted=2)


def page_html(run: render.RunView) -> str:
    """Every section that names a γ, as the page shows them for this run: the statistics (their arithmetic too),
    How it works, and the theory explorer's note and chart title at the run's own α̂, c and v."""
    comparison = comparison_of(run)
    chart, note = theory_page.theory_values(comparison.acceptance_rate, comparison.cost_ratio, comparison.verify_cost,
                                            run)
    return "\n".join([render.stats_html(run), render.explain_html(run), note, chart.layout.title.text])


def recommendations(html: str) -> list[str]:
    """Each "Recommended …" the page says, up to its first full stop."""
    return [words.strip() for words in re.findall(r"Recommended[^.(]*", visible_text(unescape(html)))]


def test_after_a_sweep_every_section_gives_the_sweeps_gamma_and_the_formula_only_as_a_prediction():
    """A learner read four answers on one page: the sweep's γ = 2, How it works' γ = 3 with the formula's 5, the theory
    explorer's "Predicted best γ = 4 (v = 1), 5" and the arithmetic's "the formula predicts γ = 5 would do best". Now
    one: the run's arithmetic gives it (How it works and the theory explorer point there), the sweep its own."""
    view = capped_sweep()
    run = timed_run(speculative_verify_s=0.02)
    run.sweep = view.payoff  # what the page keeps after a sweep of this setup (specviz.app.history)
    answer = which_gamma(run, comparison_of(run))
    assert answer.source == payoff.FROM_SWEEP and answer.gamma == view.recommended_gamma == 2
    html = page_html(run)
    said = recommendations(html)
    assert said and all(words == answer.recommendation_text() for words in said), said
    assert unescape(html).count(answer.text()) == 1  # the statistics' arithmetic, nowhere else
    # the formula's best γ is said only as a prediction: beside the answer, and at the explorer's sliders
    assert "best γ" not in visible_text(unescape(html)).replace("the formula's best γ", "")
    assert "Predicted best" not in html
    status = sweep_page.sweep_status_html(10, 10, 9.0, view)
    assert f'data-gamma="{answer.gamma}"' in status and unescape(status).count(answer.prediction_text()) == 1
    # rounds capped at 2 drafts: a larger γ changes nothing, said once with the answer in every section
    assert answer.is_capped and answer.capped_text() in unescape(status) and answer.capped_text() in unescape(html)


def test_before_a_sweep_the_recommended_gamma_is_the_bench_records_pick_for_this_machine_and_pair(tmp_path, monkeypatch):
    record = a_gpu_record(median=1.40)  # on a CUDA GPU, so the test reads the same on every host
    record["results"].append(dict(record["results"][0], gamma=5, median_speedup=1.42))  # a tie: the smaller γ
    records = write_records(tmp_path, record)
    monkeypatch.setattr(expectations, "load_records", lambda folder=None: records)
    clear_caches()
    try:
        run = timed_run(speculative_verify_s=0.02)
        run.settings.update(pair=record["pair"], precision="bfloat16", drafter="head", device="cuda:0")
        answer = which_gamma(run, comparison_of(run))
        assert answer.source == payoff.FROM_BENCH and answer.gamma == 3 and answer.tree == 0
        html = page_html(run)
        assert all(words == answer.recommendation_text() for words in recommendations(html))
        # said once, in the statistics' arithmetic; the theory explorer, its sliders at this run's α̂, c and v,
        # says the formula's best γ once, in its own prediction, and points to the arithmetic for the measured one
        assert unescape(html).count(answer.text()) == 1
        comparison = comparison_of(run)
        _, note = theory_page.theory_values(comparison.acceptance_rate, comparison.cost_ratio,
                                            comparison.verify_cost, run)
        prediction = answer.prediction_text()
        assert visible_text(unescape(note)).lower().count(prediction.lower()) == 1, note
        assert "Recommended" not in note and "which γ to pick" in note
        _, moved = theory_page.theory_values(0.9, 0.05, 1.0, run)  # sliders moved: their own prediction, no other
        assert "Recommended" not in moved and answer.prediction_text() not in unescape(moved)
        assert render.stats_dict(run)["recommended_gamma"] == 3  # the API gives the page's answer
        # no record of the drafter that ran, or of the pair: no γ named, and none borrowed from another setup
        run.settings["drafter"] = "model"
        assert which_gamma(run, comparison_of(run)).source == payoff.FROM_NOTHING
        run.settings.update(drafter="head", pair="tiny-code")
        nothing = which_gamma(run, comparison_of(run))
        assert nothing.gamma is None and nothing.where == payoff.NOTHING_WHERE
    finally:  # the kept records again for the tests after this one
        clear_caches()


def test_a_run_whose_rounds_never_reached_its_gamma_says_a_larger_gamma_changes_nothing():
    run = timed_run(speculative_verify_s=0.02)  # its one round drafted 2 at γ = 2: not capped
    assert not which_gamma(run, comparison_of(run)).is_capped
    run.settings["gamma"] = 4  # the same rounds at γ = 4: no round drafted more than 2
    answer = which_gamma(run, comparison_of(run))
    assert answer.is_capped and answer.most_drafted == 2
    assert answer.capped_text() in unescape(render.stats_html(run))


def one_run(speedup: float, spread: payoff.Spread | None) -> payoff.Payoff:
    return payoff.judge_run(0.69, 0.05, 1.1, 3, speedup, spread)


@pytest.mark.parametrize("verdict", [
    one_run(1.77, payoff.Spread(0.77, 1.31, "the bench's 33 greedy runs of the example prompts on a CPU with AVX2 "
                                            "only in float32, γ = 3, 1.23× (0.84–1.67), 2026-11-25")),
    one_run(1.20, payoff.Spread(0.77, 1.31, "the bench")),
    one_run(1.05, None),
    one_run(0.80, payoff.Spread(0.77, 1.31, "the bench")),
    capped_sweep().payoff,
    sweep.sweep_view([cell(2, 0.95, 0.90, 1.02), cell(3, 1.04, 0.96, 1.12)]).payoff,
    payoff.Payoff(0.7, 0.1, 1.0),
    payoff.Payoff(0.3, 0.5, 1.5),
])
def test_the_verdict_is_short_and_its_detail_is_one_click_away(verdict):
    """The verdict read as one 60-word sentence; now at most VERDICT_MAX_WORDS, the rest behind a click."""
    words = verdict.verdict_text()
    assert len(words.split()) <= payoff.VERDICT_MAX_WORDS, words
    assert verdict.verdict_detail_text() and verdict.verdict_detail_text() not in words


def test_the_pages_verdict_keeps_where_its_band_was_measured_in_a_details():
    spread = payoff.Spread(0.77, 1.31, "the bench's 33 greedy runs of the example prompts")
    verdict = one_run(1.77, spread)
    assert spread.source not in verdict.verdict_text() and spread.source in verdict.verdict_detail_text()
    html = verdict_html(verdict)
    shown, hidden = html.split('<details class="verdict-detail"')
    assert verdict.verdict_text() in unescape(shown) and verdict.verdict_detail_text() in unescape(hidden)


def test_a_band_that_prints_as_reaching_1x_is_not_called_all_above_it():
    """A run's band from 1.003×, printed "1.00–1.19×", is not "all above 1×" (the page showed both, 2026-12-05);
    from 1.012× ("1.01–1.19×") it is."""
    edge = one_run(1.10, payoff.Spread(0.912, 1.08, "the bench"))
    assert "1.00–1.19×" in edge.verdict_text() and not edge.pays
    assert edge.verdict_text().startswith("Not shown to pay here") and "all above 1×" not in edge.verdict_text()
    above = one_run(1.10, payoff.Spread(0.92, 1.08, "the bench"))
    assert "1.01–1.19×" in above.verdict_text() and above.pays and "all above 1×" in above.verdict_text()


@pytest.mark.parametrize("speedup", [0.996, 1.0, 1.003])
def test_a_run_that_prints_as_1x_reads_alike_whatever_its_hidden_digits(speedup):
    """0.996× prints "1.00×": it is not called "slower than the target alone" beside that, nor is the target alone
    "faster here" at exactly 1.00× (both were said before); three runs that print alike get one verdict."""
    verdict = one_run(speedup, payoff.Spread(0.91, 1.09, "the bench"))
    assert verdict.verdict_text() == ("Not shown to pay here: this run measured 1.00× at γ = 3 (one noisy sample), "
                                      "within the noise: one run here reads 0.91–1.09×.")
    assert verdict.recommendation_text() == "none beyond the noise: γ = 3's median is 1.00×, but it reaches down to 0.91×"
    slower = one_run(0.994, payoff.Spread(0.91, 1.09, "the bench"))  # prints 0.99×
    assert slower.verdict_text().startswith("Here speculation does not pay") and "slower" in slower.verdict_text()


def test_gammas_the_formula_cannot_tell_apart_as_printed_are_named_together():
    """A run at γ = 3 (α̂ 0.50, c 0.086, v 1.02) read "gives 1.47× at γ = 3" and, beside it, "the formula predicts
    γ = 2 would do best (1.47×)": 1.468× against 1.467×, a gain the page cannot show. Both are named; a clear best
    stays one γ."""
    flat = payoff.Payoff(0.50, 0.086, 1.02)
    assert flat.predicted_gamma == 2 and flat.predicted_ties == [2, 3]
    assert flat.formula_text().startswith("the formula predicts γ = 2 and 3 would do equally well (1.47×) at this α̂")
    flatter = payoff.Payoff(0.80, 0.001, 1.0, max_gamma=40)  # nearly free drafts: a broad, flat top
    ties = flatter.predicted_ties
    assert len(ties) > 2 and ties == list(range(ties[0], ties[-1] + 1))
    assert f"γ = {ties[0]} to {ties[-1]} would do equally well" in flatter.formula_text()
    clear = payoff.Payoff(0.80, 0.05, 1.0)
    assert clear.predicted_ties == [clear.predicted_gamma]
    assert clear.formula_text().startswith(f"the formula predicts γ = {clear.predicted_gamma} would do best (")


def over_prompts(runs: list[float], num_prompts: int) -> BenchResult:
    """A bench cell that kept every run, in the bench's order (repeat by repeat, prompts in order within each)."""
    return dataclasses.replace(cell(3, statistics.median(runs), min(runs), max(runs)), num_runs=len(runs),
                               speedups=tuple(runs), num_prompts=num_prompts)


def test_a_bench_cell_over_prompts_is_judged_by_its_repeats_noise_not_by_the_prompts_range():
    # one prompt slower than the target alone (0.90×), two faster; each moved ±5 % over its three repeats
    runs = [0.90, 1.40, 1.70, 0.95, 1.47, 1.62, 0.86, 1.33, 1.79]
    judged = bench.measurement_of(over_prompts(runs, 3))
    assert judged.over_prompts and judged.low == 0.86  # the prompts' range, kept and named as such
    low, high = judged.noise_band
    assert low == pytest.approx(1.40 * 1.33 / 1.40) and high == pytest.approx(1.40 * 0.95 / 0.90)  # 95 %–106 %
    verdict = payoff.Payoff(0.6, 0.09, 1.1, (judged,))
    assert verdict.pays and verdict.recommended_gamma == 3
    assert verdict.verdict_text() == ("Speculation pays here: γ = 3 measured a median 1.40× over 9 runs (prompts "
                                      "ranged 0.86–1.79×), above 1× beyond the noise.")
    assert "is what they ask, not noise" in verdict.verdict_detail_text()
    # the same figures from a bench that did not keep its runs: the prompts' range is all it has, and it reaches 1×
    pooled = bench.measurement_of(dataclasses.replace(over_prompts(runs, 3), speedups=()))
    assert not pooled.over_prompts and not payoff.Payoff(0.6, 0.09, 1.1, (pooled,)).pays
    # each prompt once: no repeats, no noise measured apart from the prompts, the range judges as before
    assert not bench.measurement_of(over_prompts(runs[:3], 3)).over_prompts
    # one prompt run three times: its min–max already is its repeats' noise, read by both readers as before
    assert payoff.repeat_spread(runs[:3], 1, "one prompt") is None
    assert not bench.measurement_of(over_prompts(runs[:3], 1)).over_prompts
    # a median inside its repeats' noise of 1× does not pay, however wide the prompts' range above
    near = [0.98, 0.95, 1.60, 1.12, 0.90, 1.70]  # a median of 1.05×; the first prompt moved 93 %–107 %
    verdict = payoff.Payoff(0.6, 0.09, 1.1, (bench.measurement_of(over_prompts(near, 3)),))
    assert not verdict.pays and "within the noise: its median here reads" in verdict.verdict_text()


def test_the_bench_pick_reads_a_records_kept_runs_as_the_page_does(tmp_path):
    record = a_record(median=1.40)
    record["num_prompts"] = 3
    runs = [0.90, 1.40, 1.70, 0.95, 1.47, 1.62, 0.86, 1.33, 1.79]
    record["results"][0].update(num_runs=9, min_speedup=0.86, max_speedup=1.79, speedups=runs)
    [kept] = write_records(tmp_path, record)
    chosen = expectations.record_payoff(kept, 0.0).chosen
    assert chosen.over_prompts and chosen.beats_target
    assert chosen.noise_band == bench.measurement_of(over_prompts(runs, 3)).noise_band  # one rule, two readers


def test_the_gpu_sentence_is_the_pairs_own_record_and_nothing_where_none_measured_it(tmp_path):
    """The verdict's "a bigger target, or one on a GPU" stood beside the bench's own GPU figure for this very pair,
    and a 135 M target's GPU sentence was shown for every pair. One sentence now, from the pair's record."""
    assert "GPU" not in payoff.WHAT_WOULD_CHANGE_IT and "GPU" not in payoff.WHAT_WOULD_CHANGE_IT_ON_A_GPU
    gpu = a_gpu_record(median=1.11)
    records = write_records(tmp_path, gpu, a_record(median=1.39))
    sentence = expectations.gpu_text(expectations.gpu_records(records))
    best = next(r for r in records if r.kind == "cuda").chosen_cell(0.0)
    assert best.speedup_text() in sentence and f"{best.baseline_tokens_per_s:.0f} tokens/s" in sentence
    assert f"c = {best.cost_ratio:.2f}" in sentence
    assert expectations.gpu_text(expectations.gpu_records(records, "tiny-code")) == ""  # another pair: no claim
    # in the kept records: the default pair's page says it once, a pair without a GPU record not at all
    run = timed_run(speculative_verify_s=0.2)  # slower than the target alone: the verdict says what would change it
    run.settings.update(pair="smollm2-135m", device="cpu", precision="float32")
    html = unescape(render.stats_html(run))
    kept = expectations.gpu_text_for("smollm2-135m")
    assert kept and html.count(kept) == 1 and html.count("On a GPU") == 1
    run.settings["pair"] = "tiny-code"
    assert expectations.gpu_text_for("tiny-code") == "" and "GPU" not in render.stats_html(run)


def test_a_record_keeps_its_cost_ratio(tmp_path):
    report = a_record()
    [record] = write_records(tmp_path, report)
    assert record.cells[0].cost_ratio == report["results"][0]["c"]
    del report["results"][0]["c"]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "r.json").write_text(json.dumps(report))
    assert expectations.load_records(tmp_path / "old")[0].cells[0].cost_ratio is None  # records made before c was kept
