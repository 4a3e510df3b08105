"""What the theory explorer draws: Leviathan's expected speedup against γ, with v = 1 and with a measured verify
cost, and where in the (c, α) plane speculation pays (`theory_view`)."""

from __future__ import annotations

from dataclasses import dataclass

from specviz.analysis import theory
from specviz.decoding.config import MAX_GAMMA


@dataclass(frozen=True)
class TheoryView:
    """What the theory explorer draws for one (α, c, v), and the last run's measured point."""

    alpha: float
    cost_ratio: float
    verify_cost: float
    gammas: tuple[int, ...]
    speedups: tuple[float, ...]  # Leviathan: v = 1
    speedups_with_verify: tuple[float, ...]  # the same formula with the verify costing v target steps
    boundary_costs: tuple[float, ...]  # c from 0 to the chart's edge
    boundary_alphas: tuple[float | None, ...]  # the α above which speculation pays at that c and v (None: never)
    measured_gamma: int | None = None  # the last run's γ and measured speedup, if there was one
    measured_speedup: float | None = None

    @property
    def best_gamma(self) -> int:
        return theory.best_gamma(self.alpha, self.cost_ratio, len(self.gammas))

    @property
    def best_gamma_with_verify(self) -> int:
        return theory.best_gamma(self.alpha, self.cost_ratio, len(self.gammas), self.verify_cost)

    @property
    def paying_alpha(self) -> float | None:
        """The α above which some γ pays at this c and v (None: no α does)."""
        return theory.min_paying_alpha(self.cost_ratio, self.verify_cost, len(self.gammas))

    @property
    def max_cost(self) -> float:
        return self.boundary_costs[-1] if self.boundary_costs else 1.0


BOUNDARY_POINTS = 41


def theory_view(alpha: float, cost_ratio: float, verify_cost: float = 1.0, measured_gamma: int | None = None,
                measured_speedup: float | None = None) -> TheoryView:
    """The curves for sliders at (α, c, v); the (c, α) plane reaches past c so the point stays on it."""
    gammas = tuple(range(1, MAX_GAMMA + 1))
    max_cost = max(1.0, 1.2 * cost_ratio)
    costs = tuple(max_cost * i / (BOUNDARY_POINTS - 1) for i in range(BOUNDARY_POINTS))
    return TheoryView(
        alpha=alpha,
        cost_ratio=cost_ratio,
        verify_cost=verify_cost,
        gammas=gammas,
        speedups=tuple(theory.expected_speedup(alpha, gamma, cost_ratio) for gamma in gammas),
        speedups_with_verify=tuple(theory.expected_speedup(alpha, gamma, cost_ratio, verify_cost) for gamma in gammas),
        boundary_costs=costs,
        boundary_alphas=tuple(theory.min_paying_alpha(cost, verify_cost, MAX_GAMMA) for cost in costs),
        measured_gamma=measured_gamma,
        measured_speedup=measured_speedup,
    )
