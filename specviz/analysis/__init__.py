"""Figures from runs: traces, theory, the payoff rule, saved runs, the bench and the self-check."""
