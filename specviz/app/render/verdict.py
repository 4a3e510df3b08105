"""The one verdict on a run, as every part of the page asks for it (stats, explainer, theory explorer, CLI).

payoff.py holds the rule; this reads what a run gives it: the run's own α̂, c, v and speedup, how far one
run was measured to move on this machine (the bench's record, specviz.analysis.expectations), and the
speedups of this page's earlier runs of the same setup (`RunView.repeats`, kept by specviz.app.history).
A run whose lanes wrote different texts gets no verdict: its tokens per second are not like for like.
"""

from __future__ import annotations

from typing import Mapping

from specviz.analysis.expectations import spread_here
from specviz.analysis.payoff import Payoff, Spread, judge_run, unequal_texts_text
from specviz.analysis.trace import Comparison
from specviz.app.render.lanes import RunView


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


def no_verdict_text(run: RunView) -> str:
    """Why this run has no verdict: it has not finished (stopped, or still running), or its texts differ."""
    if not (run.baseline.trace.done and run.speculative.trace.done) or run.was_stopped:
        return "No verdict: the run did not finish, so its lanes did unequal work."
    return unequal_texts_text(run.baseline.trace.num_tokens, run.speculative.trace.num_tokens,
                              float(run.settings.get("temperature", 0) or 0))


def recommended_row(run: RunView, payoff: Payoff | None) -> tuple[str, str]:
    """One answer to "which γ": the measured one, the γ sweep's where this page swept this setup (it compares
    several γ; one run judges only its own); the formula's best beside it as a prediction."""
    if payoff is None:
        return "recommended γ", "— (no verdict: see above)"
    if run.sweep is not None:
        return ("recommended γ (measured by the γ sweep below, on this prompt and these settings)",
                f"{run.sweep.recommendation_text()}; {run.sweep.formula_text()}")
    return ("recommended γ (measured: one run judges only its own γ; the γ sweep compares several)",
            payoff.recommendation_with_prediction_text())
