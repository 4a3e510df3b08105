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


def expected_speedup(alpha: float, gamma: int, cost_ratio: float) -> float:
    """Wall-clock improvement over the baseline: tokens per round over the round's cost γc + 1."""
    return expected_tokens_per_round(alpha, gamma) / (gamma * cost_ratio + 1.0)


def best_gamma(alpha: float, cost_ratio: float, max_gamma: int = 16) -> int:
    """The γ in 1..max_gamma with the highest expected speedup."""
    return max(range(1, max_gamma + 1), key=lambda gamma: expected_speedup(alpha, gamma, cost_ratio))


def speculation_pays(alpha: float, cost_ratio: float) -> bool:
    """Some γ beats the baseline exactly when α > c (Leviathan, Corollary 3.9)."""
    return alpha > cost_ratio
