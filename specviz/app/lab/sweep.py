"""The γ sweep: the bench's loop (specviz.analysis.bench) for one prompt, yielding after every timed run so a
page can draw progress and stop it (`sweep_gammas`), then what the page draws (`sweep_view`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Iterator, Sequence

from specviz.analysis import theory
from specviz.analysis.confidence import JudgedDraft, judged_drafts
from specviz.analysis.bench import BenchConfig, BenchResult, summarise, timed_runs
from specviz.decoding.config import MAX_GAMMA, DecodeConfig
from specviz.models.pairs import ModelPair
from specviz.analysis.payoff import Measurement, Payoff
from specviz.analysis.trace import Trace
from specviz.app.render.pieces import label_text

MAX_SWEEP_GAMMAS = 16
MAX_SWEEP_REPEATS = 5


@dataclass
class SweepProgress:
    """Where a sweep stands: runs done, and one BenchResult per γ with at least one run."""

    num_done: int
    num_total: int
    runs: dict[int, list[tuple[Trace, Trace]]] = field(default_factory=dict)  # γ → (baseline, speculative)
    labels: dict[int, str] = field(default_factory=dict)  # token id → its text: the confidence chart's hover labels

    def results(self, temperature: float) -> list[BenchResult]:
        return [summarise(gamma, temperature, pairs) for gamma, pairs in sorted(self.runs.items())]

    def judged_drafts(self) -> list[JudgedDraft]:
        """Every judged draft of every speculative run so far, tagged with its run's γ."""
        return [draft for gamma, pairs in sorted(self.runs.items()) for _, speculative in pairs
                for draft in judged_drafts(speculative, gamma)]


def remember_labels(pair: ModelPair, trace: Trace, labels: dict[int, str]) -> None:
    """The text of each drafted token (a pair without a tokenizer, as in tests, shows ids instead)."""
    if getattr(pair, "tokenizer", None) is None:
        return
    for event in trace.rounds:
        for token in event.drafted:
            if token.token_id not in labels:
                labels[token.token_id] = label_text(pair.decode, [], token.token_id)  # a lone byte: named, not "\ufffd"


def sweep_gammas(pair: ModelPair, prompt_ids: list[int], config: BenchConfig) -> Iterator[SweepProgress]:
    """bench.timed_runs for one prompt and one temperature, yielding after every timed run."""
    progress = SweepProgress(0, config.repeats * (1 + len(config.gammas)))
    yield progress
    for gamma, _, _, baseline, speculative in timed_runs(pair, [prompt_ids], replace(config, temperatures=config.temperatures[:1])):
        if speculative is not None:
            progress.runs.setdefault(gamma, []).append((baseline, speculative))
            remember_labels(pair, speculative, progress.labels)
        progress.num_done += 1
        yield progress


def sweep_gamma_range(smallest: int, largest: int) -> tuple[int, ...]:
    """The γ values from smallest to largest, checked, with a message a user can act on."""
    if not 1 <= smallest <= largest <= MAX_SWEEP_GAMMAS:
        raise ValueError(f"the γ range must run from a smallest γ ≥ 1 to a largest γ ≤ {MAX_SWEEP_GAMMAS}, "
                         f"smallest first; got {smallest} to {largest}")
    return tuple(range(smallest, largest + 1))


def sweep_config(config: DecodeConfig, gammas: tuple[int, ...], repeats: int) -> BenchConfig:
    """The bench's settings from the page's: same sampling, drafter, token budget and seed."""
    if not 1 <= repeats <= MAX_SWEEP_REPEATS:
        raise ValueError(f"repeats must be from 1 to {MAX_SWEEP_REPEATS}, got {repeats}")
    return BenchConfig(
        gammas=gammas, temperatures=(config.temperature,), repeats=repeats, max_new_tokens=config.max_new_tokens,
        top_k=config.top_k, top_p=config.top_p, seed=config.seed, stop_at_eos=config.stop_at_eos,
        full_draft_head=config.full_draft_head, drafter=config.drafter, ngram=config.ngram,
    )


@dataclass(frozen=True)
class SweepView:
    """What the sweep chart draws: measured speedups per γ over the theory's curves, and the verdict."""

    results: tuple[BenchResult, ...]  # one per γ, ascending
    alpha: float  # α̂ over the whole sweep (median of the γ cells)
    cost_ratio: float  # c, median of the γ cells
    theory_gammas: tuple[int, ...]
    theory_speedups: tuple[float, ...]  # Leviathan's curve at (α̂, c) with v = 1
    predicted_with_verify: tuple[float, ...]  # per result: the formula with that γ's measured v
    best_gamma: int | None  # the highest measured median, paying or not
    tied_gammas: tuple[int, ...]  # γ whose medians are within the noise of the best's (payoff.TIE_RULE), the best's too
    payoff: Payoff | None = None  # the one verdict (specviz.analysis.payoff) on these measurements

    @property
    def recommended_gamma(self) -> int | None:
        """The one rule's γ (payoff.Payoff.chosen: a tie within the noise goes to the smaller γ) when it beats
        the target alone beyond the noise; None: the target alone."""
        return self.payoff.recommended_gamma if self.payoff is not None else None


def measurement_of(result: BenchResult) -> Measurement:
    return Measurement(result.gamma, result.median_speedup, result.min_speedup, result.max_speedup, result.num_runs)


def sweep_view(results: Sequence[BenchResult], max_gamma: int = MAX_GAMMA) -> SweepView:
    results = tuple(sorted(results, key=lambda r: r.gamma))
    if not results:
        return SweepView((), 0.0, 0.0, (), (), (), None, ())
    alpha = statistics.median([r.acceptance_rate for r in results])
    cost_ratio = statistics.median([r.c for r in results])
    gammas = tuple(range(1, max(max_gamma, results[-1].gamma) + 1))
    cell = max(results, key=lambda r: r.median_speedup)
    payoff = Payoff(alpha, cost_ratio, cell.verify_cost, tuple(measurement_of(r) for r in results), max(gammas))
    return SweepView(
        results=results,
        alpha=alpha,
        cost_ratio=cost_ratio,
        theory_gammas=gammas,
        theory_speedups=tuple(theory.expected_speedup(alpha, gamma, cost_ratio) for gamma in gammas),
        predicted_with_verify=tuple(theory.expected_speedup(alpha, r.gamma, cost_ratio, r.verify_cost) for r in results),
        best_gamma=payoff.best.gamma,
        tied_gammas=tuple(m.gamma for m in payoff.ties),
        payoff=payoff,
    )
