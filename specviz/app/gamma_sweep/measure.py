"""The γ sweep's measurement: the bench's loop (specviz.analysis.bench) for one prompt, yielding after every timed run so a
page can draw progress and stop it (`sweep_gammas`), then what the page draws (`sweep_view`). Where the page
drafts a tree, every γ is timed as a chain and as that tree, and the one rule (specviz.analysis.payoff) picks
between them as it picks γ.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Iterator, Sequence

from specviz.analysis import theory
from specviz.analysis.confidence import JudgedDraft, judged_drafts
from specviz.analysis.bench import BenchConfig, BenchResult, measurement_of, summarise, timed_runs
from specviz.decoding.config import MAX_GAMMA, DecodeConfig
from specviz.models.pairs import ModelPair
from specviz.analysis.payoff import Payoff, Spread
from specviz.analysis.trace import Trace
from specviz.app.render.pieces import label_text

MAX_SWEEP_GAMMAS = 16
MAX_SWEEP_REPEATS = 5

Cell = tuple[int, int]  # (γ, tree budget; 0 = a chain)


@dataclass
class SweepProgress:
    """Where a sweep stands: runs done, and one BenchResult per (γ, tree budget) with at least one run."""

    num_done: int
    num_total: int
    runs: dict[Cell, list[tuple[Trace, Trace]]] = field(default_factory=dict)  # (γ, tree) → (baseline, speculative)
    labels: dict[int, str] = field(default_factory=dict)  # token id → its text: the confidence chart's hover labels

    def cells(self) -> list[tuple[Cell, list[tuple[Trace, Trace]]]]:
        """The runs per (γ, tree), chains first, then each γ ascending."""
        return sorted(self.runs.items(), key=lambda item: item[0][::-1])

    def results(self, temperature: float) -> list[BenchResult]:
        return [summarise(gamma, temperature, pairs, tree=tree) for (gamma, tree), pairs in self.cells()]

    def most_drafted(self) -> int:
        """The most tokens any chain round of the sweep drafted. A drafter that stops once unsure (draft_confidence)
        may never reach the larger γ: no γ above this one drafted more than it."""
        return max((len(event.drafted) for (_, tree), pairs in self.cells() if not tree
                    for _, speculative in pairs for event in speculative.rounds), default=0)

    def judged_drafts(self) -> list[JudgedDraft]:
        """Every judged draft of every speculative run so far, tagged with its run's γ."""
        return [draft for (gamma, _), pairs in self.cells() for _, speculative in pairs
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
    config = replace(config, temperatures=config.temperatures[:1])
    progress = SweepProgress(0, config.num_timed_runs(1))
    yield progress
    for gamma, tree, _, baseline, speculative in timed_runs(pair, [prompt_ids], config):
        if speculative is not None:
            progress.runs.setdefault((gamma, tree), []).append((baseline, speculative))
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
    """The bench's settings from the page's, so the sweep times what the page runs: the same sampling, drafter,
    token budget, seed, confidence stop, rivals and γ schedule; and with a tree budget, that tree beside a chain."""
    if not 1 <= repeats <= MAX_SWEEP_REPEATS:
        raise ValueError(f"repeats must be from 1 to {MAX_SWEEP_REPEATS}, got {repeats}")
    return BenchConfig(config, gammas=gammas, temperatures=(config.temperature,), repeats=repeats,
                       trees=(0, config.tree) if config.tree else (0,))


@dataclass(frozen=True)
class SweepView:
    """What the sweep chart draws: measured speedups per (γ, tree budget) over the theory's curves, and the verdict.

    The curves are a chain's (Leviathan's formula has no term for a tree), drawn at the chain cells' α̂ and c."""

    results: tuple[BenchResult, ...]  # one per (γ, tree): the chain's first, then each tree budget's; γ ascending
    alpha: float  # α̂ of the chain (median of its γ cells)
    cost_ratio: float  # c, median of the chain's γ cells
    theory_gammas: tuple[int, ...]
    theory_speedups: tuple[float, ...]  # Leviathan's curve at (α̂, c) with v = 1
    predicted_with_verify: tuple[float, ...]  # per chain result: the formula with that γ's measured v
    best_gamma: int | None  # the highest measured median, paying or not
    tied_gammas: tuple[int, ...]  # γ whose medians are within the noise of the best's (payoff.TIE_RULE), the best's too
    payoff: Payoff | None = None  # the one verdict (specviz.analysis.payoff) on these measurements

    @property
    def recommended_gamma(self) -> int | None:
        """The one rule's γ (payoff.Payoff.recommended_gamma); None: the target alone."""
        return self.payoff.recommended_gamma if self.payoff is not None else None

    @property
    def recommended_tree(self) -> int | None:
        """The tree budget that goes with recommended_gamma (0: a chain); None: the target alone."""
        return self.payoff.recommended_tree if self.payoff is not None else None

    @property
    def trees(self) -> tuple[int, ...]:
        """The tree budgets measured, ascending (0: the chain)."""
        return tuple(sorted({r.tree for r in self.results}))

    @property
    def has_trees(self) -> bool:
        """A tree budget was timed beside the chain: the words and the chart name each setup's budget."""
        return len(self.trees) > 1

    @property
    def recommended_result(self) -> BenchResult | None:
        """The cell behind the recommendation; None where the target alone is faster."""
        gamma, tree = self.recommended_gamma, self.recommended_tree
        return next((r for r in self.results if (r.gamma, r.tree) == (gamma, tree)), None)

    def label_of(self, result: BenchResult) -> str:
        """"γ = 3" where only chains were timed; beside a tree, "γ = 3, a chain" or "γ = 3, tree 8"."""
        return measurement_of(result).label + (", a chain" if self.has_trees and not result.tree else "")

    def results_of(self, tree: int) -> tuple[BenchResult, ...]:
        return tuple(r for r in self.results if r.tree == tree)

    def pick_of(self, tree: int) -> BenchResult | None:
        """The cell the one rule picks among one budget's γ (the best median where none pays)."""
        cells = self.results_of(tree)
        if not cells or self.payoff is None:
            return None
        chosen = replace(self.payoff, measured=tuple(m for m in self.payoff.measured if m.tree == tree)).chosen
        return next(r for r in cells if r.gamma == chosen.gamma)


def sweep_view(results: Sequence[BenchResult], spread: Spread | None = None, most_drafted: int = 0) -> SweepView:
    """The chart's and the verdict's view of a sweep. `spread`: how far one run was measured to move here (a bench
    record's), which a cell of one run (one repeat) is judged with, as the page's statistics judge one run.
    `most_drafted`: the most tokens any chain round drafted (SweepProgress.most_drafted), which the verdict keeps, so
    the page's one answer to "which γ" can say where a larger γ changes nothing."""
    results = tuple(sorted(results, key=lambda r: (r.tree, r.gamma)))
    if not results:
        return SweepView((), 0.0, 0.0, (), (), (), None, ())
    chains = tuple(r for r in results if r.tree == 0)
    basis = chains or results  # the formula is a chain's: read α̂, c and v from the chain's cells
    alpha = statistics.median([r.acceptance_rate for r in basis])
    cost_ratio = statistics.median([r.c for r in basis])
    gammas = tuple(range(1, max(MAX_GAMMA, max(r.gamma for r in results)) + 1))
    cell = max(basis, key=lambda r: r.median_speedup)
    payoff = Payoff(alpha, cost_ratio, cell.verify_cost, tuple(measurement_of(r, spread) for r in results),
                    max(gammas), most_drafted=most_drafted)
    return SweepView(
        results=results,
        alpha=alpha,
        cost_ratio=cost_ratio,
        theory_gammas=gammas,
        theory_speedups=tuple(theory.expected_speedup(alpha, gamma, cost_ratio) for gamma in gammas),
        predicted_with_verify=tuple(theory.expected_speedup(alpha, r.gamma, cost_ratio, r.verify_cost) for r in chains),
        best_gamma=payoff.best.gamma,
        tied_gammas=tuple(m.gamma for m in payoff.ties),
        payoff=payoff,
    )
