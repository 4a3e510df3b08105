"""Tokens per target pass (τ) beside α̂: the one sentence, in the run's own numbers, that tells them apart.

Both are read off the same rounds and are easy to take for one another: α̂ is a share of drafts (those
the target examined that it accepted), τ a count of tokens (what one target forward gave, its own
correction or bonus included). Plain text, no HTML: the page, the explainer and the terminal show it.
"""

from __future__ import annotations

from specviz.analysis import theory
from specviz.analysis.trace import Trace
from specviz.app.wording import count


def round_counts(trace: Trace) -> tuple[int, int]:
    """(tokens the rounds gave, target forwards they took): τ's numerator and denominator."""
    return sum(len(event.emitted_ids) for event in trace.rounds), sum(event.num_target_forwards for event in trace.rounds)


def tau_text(speculative: Trace, gamma: int, baseline: Trace | None = None) -> str:
    """τ against α̂ for one drafting lane; empty before it has drafted."""
    if not speculative.num_examined:
        return ""
    tau, alpha = speculative.tokens_per_target_forward, speculative.acceptance_rate
    tokens, forwards = round_counts(speculative)
    formula = theory.expected_tokens_per_round(alpha, gamma)
    alone = ""
    if baseline is not None and baseline.rounds:
        base_tokens, base_forwards = round_counts(baseline)
        alone = f" (the target alone: {count(base_tokens, 'token')} in {count(base_forwards, 'forward')}, τ = 1)"
    return (
        f"Tokens per target pass τ = {tau:.2f}: after the prefill the target ran {count(forwards, 'forward')} and "
        f"they gave {count(tokens, 'token')}{alone}, each pass the drafts it accepted plus one token of its own (the "
        f"correction at a rejection, or the bonus when all were kept). α̂ = {alpha:.2f} counts something else: of the "
        f"{count(speculative.num_examined, 'draft')} the target examined it accepted {speculative.num_accepted}. So τ "
        f"is at least 1 even where α̂ is 0, and at most γ + 1 = {gamma + 1} where α̂ is 1; the formula turns α̂ into "
        f"the τ to expect, (1 − α̂^(γ+1)) / (1 − α̂) = {formula:.2f} at γ = {gamma} (rounds that drafted fewer than γ, "
        f"because the drafter stopped while unsure or the text ended, give fewer). τ is what divides the target's "
        f"passes, and so what a speedup is made of."
    )
