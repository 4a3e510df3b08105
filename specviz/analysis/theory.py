"""Leviathan et al. 2023, §3: what speculation should give for acceptance rate α and cost ratio c.

α is the probability that the target accepts a drafted token; c is the time of one draft step
over the time of one target step. These formulas assume α is the same at every position.
"""

from __future__ import annotations


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    """(1 − α^(γ+1)) / (1 − α): accepted drafts plus the target's own token, per target call."""
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, gamma: int, cost_ratio: float, verify_cost: float = 1.0) -> float:
    """Wall-clock improvement over the baseline: tokens per round over the round's cost γc + v.

    Leviathan takes v = 1 (verifying γ+1 tokens costs one target step); where more tokens cost more, pass
    the measured v to predict what a run will really do.
    """
    return expected_tokens_per_round(alpha, gamma) / (gamma * cost_ratio + verify_cost)


def best_gamma(alpha: float, cost_ratio: float, max_gamma: int = 16, verify_cost: float = 1.0) -> int:
    """The γ in 1..max_gamma with the highest expected speedup."""
    return max(range(1, max_gamma + 1), key=lambda gamma: expected_speedup(alpha, gamma, cost_ratio, verify_cost))


def best_gammas(alpha: float, cost_ratio: float, max_gamma: int = 16, verify_cost: float = 1.0) -> list[int]:
    """Every γ whose expected speedup prints as the best's, to the hundredth a page shows: on a flat curve the argmax
    is one γ of several that no printed figure tells apart. Consecutive, as the curve has one peak."""
    shown = f"{best_speedup(alpha, cost_ratio, verify_cost, max_gamma):.2f}"
    return [gamma for gamma in range(1, max_gamma + 1)
            if f"{expected_speedup(alpha, gamma, cost_ratio, verify_cost):.2f}" == shown]


def gammas_text(gammas: list[int]) -> str:
    """γ = 3; γ = 2 and 3; γ = 20 to 28."""
    if len(gammas) == 1:
        return f"γ = {gammas[0]}"
    return f"γ = {gammas[0]} and {gammas[1]}" if len(gammas) == 2 else f"γ = {gammas[0]} to {gammas[-1]}"


def best_speedup(alpha: float, cost_ratio: float, verify_cost: float = 1.0, max_gamma: int = 16) -> float:
    """The expected speedup of the best γ in 1..max_gamma."""
    return max(expected_speedup(alpha, gamma, cost_ratio, verify_cost) for gamma in range(1, max_gamma + 1))


def speculation_pays(alpha: float, cost_ratio: float, verify_cost: float = 1.0) -> bool:
    """Whether some γ beats the baseline: with v = 1, α > c (Leviathan, Corollary 3.9); with a dearer verify,
    whether the best γ's expected speedup is above 1 (there is no closed form)."""
    return alpha > cost_ratio if verify_cost == 1.0 else best_speedup(alpha, cost_ratio, verify_cost) > 1.0


def min_paying_alpha(cost_ratio: float, verify_cost: float = 1.0, max_gamma: int = 16) -> float | None:
    """The acceptance rate above which some γ ≤ max_gamma beats the baseline; None if none can. With v = 1 it
    is c; a dearer verify has no closed form, but the best γ's speedup rises with α, so bisection finds it."""
    if best_speedup(1.0, cost_ratio, verify_cost, max_gamma) <= 1.0:
        return None
    low, high = 0.0, 1.0
    if best_speedup(low, cost_ratio, verify_cost, max_gamma) > 1.0:
        return 0.0
    for _ in range(40):  # 2^-40: far below anything a chart or a slider shows
        middle = (low + high) / 2
        low, high = (low, middle) if best_speedup(middle, cost_ratio, verify_cost, max_gamma) > 1.0 else (middle, high)
    return high
