"""The one verdict on a run, and the page's one answer to "which γ" (`which_gamma`), as every part of the page
asks for them (stats, explainer, theory explorer, CLI).

payoff.py holds the rule; this reads what a run gives it: the run's own α̂, c, v and speedup, how far one
run was measured to move on this machine (the bench's record, specviz.analysis.expectations), and the
speedups of this page's earlier runs of the same setup (`RunView.repeats`, kept by specviz.app.history).
A run whose lanes wrote different texts gets no verdict: its tokens per second are not like for like.
"""

from __future__ import annotations

from typing import Mapping

from specviz.analysis.expectations import bench_pick, spread_here
from specviz.analysis.payoff import (
    FROM_BENCH, FROM_NOTHING, NOTHING_WHERE, GammaAnswer, Payoff, Spread, judge_run, sweep_answer, unequal_texts_text,
)
from specviz.analysis.trace import Comparison
from specviz.app.render.lanes import RunView
from specviz.app.render.tokens import escape_text


def same_text(run: RunView) -> bool:
    """Both lanes finished with the same tokens: the only runs whose speeds compare like for like."""
    baseline, speculative = run.baseline.trace, run.speculative.trace
    return baseline.done and speculative.done and baseline.token_ids == speculative.token_ids


def speedup_is_quoted(run: RunView) -> bool:
    """Whether the page may call this run's tokens/s ratio a speedup: the lanes wrote the same text, or a greedy
    run is still writing it (said "so far"). A sampled run's lanes draw different texts of different lengths, and
    a stopped run's did unequal work: their ratio is no speedup, and no part of the page quotes it as one."""
    if same_text(run):
        return True
    greedy = float(run.settings.get("temperature", 0) or 0) == 0
    return greedy and not run.done and not run.was_stopped


def run_payoff(run: RunView, comparison: Comparison) -> Payoff | None:
    """The verdict on this run at its γ; None where the lanes wrote different texts (no_verdict_text says why)."""
    if not same_text(run):
        return None
    return judge_run(comparison.acceptance_rate, comparison.cost_ratio, comparison.verify_cost, run.gamma,
                     comparison.speedup, spread_of(run), tuple(run.repeats), on_gpu=on_gpu(run.settings))


def most_drafted(run: RunView) -> int:
    """The most tokens any chain round of the run drafted: below its γ, the drafter's stop capped every round."""
    return max((len(event.drafted) for event in run.speculative.trace.rounds if event.gamma > 0 and not event.is_tree),
               default=0)


def on_gpu(settings: Mapping) -> bool:
    """Whether a run was measured on a CUDA GPU (a replay of a GPU run on a CPU page too)."""
    return str(settings.get("device", "")).startswith("cuda")


def spread_of(run: RunView) -> Spread | None:
    return spread_for(run.settings)


def spread_for(settings: Mapping) -> Spread | None:
    """How far one run of these settings' pair, precision and temperature was measured to move on the kind of
    machine they ran on: this one's, or a GPU's for a run recorded on one (a replay keeps its device); a γ sweep
    judges its cells of one run with it, as the statistics judge a run."""
    return spread_here(str(settings.get("pair", "")), str(settings.get("precision", "")),
                       float(settings.get("temperature", 0) or 0), "cuda" if on_gpu(settings) else None)


UNFINISHED = "No verdict: the run did not finish, so its lanes did unequal work."


def no_verdict_text(run: RunView) -> str:
    """Why this run has no verdict: it has not finished (stopped, or still running), or its texts differ."""
    if not (run.baseline.trace.done and run.speculative.trace.done) or run.was_stopped:
        return UNFINISHED
    return unequal_texts_text(run.baseline.trace.num_tokens, run.speculative.trace.num_tokens,
                              float(run.settings.get("temperature", 0) or 0))


def which_gamma(run: RunView, comparison: Comparison | None) -> GammaAnswer:
    """The page's one answer to "which γ" for this run (payoff.GammaAnswer), said in the run's arithmetic: the γ
    sweep's where this page swept this setup, else the bench record's pick for this machine, pair and drafter, else
    none; beside it the formula's best γ at the measured α̂, c and v, as a prediction."""
    if run.sweep is not None:
        return sweep_answer(run.sweep)
    predicted = (Payoff(comparison.acceptance_rate, comparison.cost_ratio, comparison.verify_cost)
                 if comparison is not None else None)
    settings = run.settings
    pick = bench_pick(str(settings.get("pair", "")), str(settings.get("precision", "")),
                      float(settings.get("temperature", 0) or 0), str(settings.get("drafter", "") or ""),
                      "cuda" if on_gpu(settings) else None)
    source, where, measured = (FROM_BENCH, pick[1], pick[0]) if pick is not None else (FROM_NOTHING, NOTHING_WHERE, None)
    return GammaAnswer(source, where, measured, predicted, most_drafted(run), run.gamma)


def which_gamma_html(answer: GammaAnswer) -> str:
    """The one answer as the sections show it, its γ as data (none: no γ recommended)."""
    gamma = "none" if answer.gamma is None else answer.gamma
    return (f'<span class="which-gamma" data-gamma="{gamma}" data-source="{answer.source}">'
            f"{escape_text(answer.text())}</span>")


# The page's one answer to "how far does one run move?" ends here: where to watch it move, on this page.
NOISE_ON_THIS_PAGE = ("Run it again and the same tokens measure a different speedup: “Runs on this page so far”, under "
                      "the charts, shows how far it moves; the γ sweep below gives medians and spread over repeated runs.")


DETAIL_UNDER_THE_CARD = "Why, and how its noise was measured: under the result card."


def verdict_html(payoff: Payoff | None, no_verdict: str = "", detail: bool = True) -> str:
    """The verdict as the page shows it: one short sentence (payoff.VERDICT_MAX_WORDS at most), and the bench's detail
    (where the band was measured, why nothing pays, what would change it, where to watch one run move) one click
    away. `detail` False: the sentence alone and where its detail is (the theory explorer; the card holds it)."""
    if payoff is None:  # no speedup quoted, so no noise to watch: the reason says what does compare
        return f'<p class="verdict" data-pays="none" style="margin:6px 0 2px"><b>{escape_text(no_verdict)}</b></p>'
    sentence = (f'<p class="verdict" data-pays="{str(payoff.pays).lower()}" style="margin:6px 0 2px">'
                f"<b>{escape_text(payoff.verdict_text())}</b>")
    if not detail:
        return f'{sentence} <span class="verdict-pointer">{escape_text(DETAIL_UNDER_THE_CARD)}</span></p>'
    return (f"{sentence}</p>"
            f'<details class="verdict-detail" style="margin:0 0 4px;font-size:13.5px;color:#444">'
            f'<summary style="cursor:pointer">Why, and how the noise was measured</summary>'
            f'{escape_text(payoff.verdict_detail_text())} <span class="noise-note">{escape_text(NOISE_ON_THIS_PAGE)}'
            "</span></details>")
