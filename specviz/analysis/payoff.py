"""Does speculation pay here? One rule, asked by the run's stats, the theory explorer and the γ sweep.

Measurement decides; the formula explains. A γ pays only when its measured speedup is above 1× beyond
the noise: a sweep cell's (or the page's repeats') whole min–max spread above 1, or one run whose band
still clears 1 when widened by the spread one run was *measured* to have here (a `Spread`, from the
machine's bench record); with no spread measured, one run gives no verdict: the band is never assumed.
Lanes that wrote different texts get no verdict (unequal_texts_text). Leviathan's formula at the setup's
α̂, c and v is always worded as a prediction, and supplies the reason when nothing pays.

Of several γ measured, medians within the noise of the best tie (TIE_RULE), and a tie goes to the
smaller γ, which drafts less and wastes less when a draft misses; a choice at the range's edge says so.
Plain text, no HTML, so the page, the API and the terminal can all show it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from specviz.analysis import theory

# Medians of a few repeats still move by several percent from one sweep to the next on a shared CPU:
# two medians closer than this share of the best are not told apart.
TIE_TOLERANCE = 0.05
# Runs of one setup on the page before their own min–max is the band (fewer say too little of the spread).
MIN_REPEATS = 3
TIE_NOISE = f"inside the best γ's min–max spread, or within {TIE_TOLERANCE:.0%} of its median"
TIE_RULE = (f"medians within the noise of the best ({TIE_NOISE}) are a tie, and a tie goes to the smaller γ "
            "(where draft trees were measured too, to a chain before a tree and a smaller tree before a bigger)")
NOTHING_PAYS_GAMMA = "none: the target alone is faster here"
# The levers that do not depend on the machine, ending both "what would change it" sentences.
OTHER_LEVERS = ("a better drafter (higher α̂); or prompt lookup on prompts whose answer copies from them (no draft "
                "model, so c is near 0).")
WHAT_WOULD_CHANGE_IT = (
    "What would change it: a bigger target, or one on a GPU, where a target step costs many draft steps "
    f"(lower c) and a (γ+1)-token verify costs about one step (v near 1); {OTHER_LEVERS}"
)
# The one phrase every GPU explanation shares, from the H200's records (assets/bench/README.md).
LAUNCH_BOUND_GPU = ("a 135 M target is too little work for a GPU (even replayed as CUDA graphs a step takes about 4 ms, "
                    "mostly the host's, and a draft step costs a fifth of one)")
WHAT_WOULD_CHANGE_IT_ON_A_GPU = (
    f"What would change it: a bigger target, whose step is arithmetic, so a draft step costs a small share of it "
    f"(lower c), since {LAUNCH_BOUND_GPU}; fewer trips to the host a round (each round reads its verdicts back); "
    f"{OTHER_LEVERS}"
)


@dataclass(frozen=True)
class Spread:
    """How far one run's speedup was measured to move here, as ratios to the median of many (never assumed)."""

    low_ratio: float  # lowest over median
    high_ratio: float  # highest over median
    source: str  # where it was measured, in words: "the bench's 33 greedy runs on this machine (…)"


def unequal_texts_text(num_baseline: int, num_speculative: int, temperature: float) -> str:
    """No verdict on one run whose lanes wrote different texts: their tokens per second are not like for like
    (a short sample is mostly prefill, a long one mostly rounds)."""
    why = (f"at temperature {temperature:g} each lane drew its own sample" if temperature
           else "the greedy lanes parted")
    return (f"No verdict from this run: {why}, so they wrote different texts ({num_baseline} and {num_speculative} "
            f"tokens) and their speeds compare unequal work. Temperature 0 compares like for like; the bench's "
            f"sampled figures pool many prompts and repeats.")


@dataclass(frozen=True)
class Measurement:
    """Measured speedup at one γ (and tree budget): a sweep cell's median and min–max, or one run (low = high = median)."""

    gamma: int
    median: float  # tokens/s of speculative decoding over the target alone's
    low: float
    high: float
    num_runs: int = 1
    spread: Spread | None = None  # one run: how far one run was measured to move here; None: not measured
    tree: int = 0  # the tree budget it ran with (0 = a chain)

    @property
    def label(self) -> str:
        """"γ = 3", or "γ = 3, tree 8" (a draft tree of at most 8 nodes)."""
        return f"γ = {self.gamma}" + (f", tree {self.tree}" if self.tree else "")

    @property
    def cost_order(self) -> tuple[int, int]:
        """Cheaper first (a chain before any tree, a smaller tree before a bigger, then the smaller γ): a tie goes
        to the setup that drafts less and wastes less when a draft misses."""
        return self.tree, self.gamma

    @property
    def has_spread(self) -> bool:
        return self.num_runs > 1 or self.spread is not None

    @property
    def noise_band(self) -> tuple[float, float]:
        """The spread over repeats; for one run, the measured spread around it; without one, no band at all."""
        if self.num_runs > 1:
            return self.low, self.high
        if self.spread is not None:
            return self.median * self.spread.low_ratio, self.median * self.spread.high_ratio
        return self.median, self.median

    @property
    def beats_target(self) -> bool:
        """Faster than the target alone beyond the noise: a measured band, all of it above 1×."""
        return self.has_spread and self.median > 1.0 and self.noise_band[0] > 1.0

    def evidence_text(self) -> str:
        if self.num_runs > 1:
            return (f"{self.label} measured a median {self.median:.2f}× "
                    f"({self.low:.2f}–{self.high:.2f}× over {self.num_runs} runs)")
        return f"this run measured {self.median:.2f}× at {self.label} (one noisy sample of the clock)"

    def band_text(self) -> str:
        """One run's band in words: how far one run moves here, and where that was measured."""
        low, high = self.noise_band
        return (f"one run moves from {self.spread.low_ratio:.0%} to {self.spread.high_ratio:.0%} of the median here "
                f"({self.spread.source}), so this one could as well read {low:.2f}–{high:.2f}×")

    def shortfall_text(self) -> str:
        """Why this measurement is no gain: a slowdown, a gain lost in the measured noise, or no noise measured."""
        if self.noise_band[1] < 1.0 or (self.median < 1.0 and self.num_runs == 1):
            return "slower than the target alone"
        if self.num_runs > 1:
            below = "below 1× at the median, and " if self.median < 1.0 else ""
            return f"{below}a spread that reaches 1×, so no faster than the target alone beyond the noise"
        if self.spread is not None:
            return f"within the noise: {self.band_text()}"
        return ("but how far one run moves here has not been measured (no bench record for this machine and setup, "
                "and too few repeats on this page), so one run cannot say it is beyond the noise: run it again, "
                "and the runs-so-far table shows the spread")


@dataclass(frozen=True)
class Payoff:
    """The verdict for one setup (α̂, c, v) and what was measured there (nothing, one run, a sweep)."""

    alpha: float  # α̂ measured, or the theory explorer's slider
    cost_ratio: float  # c
    verify_cost: float  # v (Leviathan takes 1)
    measured: tuple[Measurement, ...] = ()  # one per γ measured; empty: prediction only
    max_gamma: int = 16
    on_gpu: bool = False  # measured on a GPU: "what would change it" cannot be "run it on a GPU"

    @property
    def best(self) -> Measurement | None:
        """The measured setup with the highest median (the cheaper one where two medians are equal)."""
        return max(sorted(self.measured, key=lambda m: m.cost_order), key=lambda m: m.median) if self.measured else None

    @property
    def ties(self) -> tuple[Measurement, ...]:
        """The measured setups whose medians are within the noise of the best's (TIE_RULE), cheapest first."""
        best = self.best
        if best is None:
            return ()
        floor = min(best.noise_band[0], best.median * (1 - TIE_TOLERANCE))
        return tuple(sorted((m for m in self.measured if m.median >= floor), key=lambda m: m.cost_order))

    @property
    def chosen(self) -> Measurement | None:
        """The cheapest setup tied with the best that beats the target alone beyond the noise; where none does,
        the best median (which then says why nothing pays)."""
        paying = [m for m in self.ties if m.beats_target]
        return paying[0] if paying else self.best

    @property
    def at_range_edge(self) -> str | None:
        """"largest" or "smallest" when the γ chosen from several is the edge of a range that could be widened."""
        chosen = self.chosen
        gammas = sorted(m.gamma for m in self.measured if m.tree == getattr(chosen, "tree", 0))
        if chosen is None or len(gammas) < 2 or not self.pays:
            return None
        if chosen.gamma == gammas[-1] and chosen.gamma < self.max_gamma:
            return "largest"
        if chosen.gamma == gammas[0] and chosen.gamma > 1:
            return "smallest"
        return None

    @property
    def predicted_gamma(self) -> int:
        return theory.best_gamma(self.alpha, self.cost_ratio, self.max_gamma, self.verify_cost)

    @property
    def predicted_speedup(self) -> float:
        return theory.expected_speedup(self.alpha, self.predicted_gamma, self.cost_ratio, self.verify_cost)

    @property
    def predicted_pays(self) -> bool:
        return self.predicted_speedup > 1.0

    @property
    def pays(self) -> bool:
        """Measured first: the chosen γ beats the target alone beyond the noise; else the prediction."""
        chosen = self.chosen
        return chosen.beats_target if chosen is not None else self.predicted_pays

    @property
    def recommended_gamma(self) -> int | None:
        """The γ to use; None when the target alone is faster here."""
        if not self.pays:
            return None
        return self.chosen.gamma if self.chosen is not None else self.predicted_gamma

    @property
    def recommended_tree(self) -> int | None:
        """The tree budget to use with it (0: a chain); None when the target alone is faster here."""
        if not self.pays:
            return None
        return self.chosen.tree if self.chosen is not None else 0

    def recommendation_text(self) -> str:
        gamma = self.recommended_gamma
        if gamma is not None:
            return self.chosen.label if self.chosen is not None else f"γ = {gamma}"
        best = self.best
        if best is not None and best.median > 1.0 and not best.has_spread:
            return f"none beyond the noise yet: one run at {best.label} measured {best.median:.2f}×, with no spread measured"
        if best is not None and best.median > 1.0:  # faster at the median, yet not beyond the noise
            low = best.noise_band[0]
            return f"none beyond the noise: {best.label}'s median is {best.median:.2f}×, but it reaches down to {low:.2f}×"
        return NOTHING_PAYS_GAMMA

    def formula_text(self) -> str:
        """The formula's best γ at its own α̂, c and v (a run's and a sweep's differ): the one sentence every
        prediction here says, beside the measured answer, never as a second one."""
        if self.predicted_pays:
            return (f"the formula predicts γ = {self.predicted_gamma} would do best ({self.predicted_speedup:.2f}×) "
                    f"at this {self.setup_text()}")
        return (f"the formula predicts no γ beats the target alone at this {self.setup_text()} (its best, "
                f"γ = {self.predicted_gamma}, {self.predicted_speedup:.2f}×)")

    def recommendation_with_prediction_text(self) -> str:
        """The one recommendation (measured first), with the formula's prediction beside it."""
        return f"{self.recommendation_text()}; {self.formula_text()}"

    def choice_text(self) -> str:
        """Why this γ, of several measured: the tie rule in these numbers, and the range's edge. Empty for one γ."""
        chosen, best = self.chosen, self.best
        if chosen is None or len(self.measured) < 2 or not self.pays:
            return ""
        others = [m for m in self.ties if m is not chosen]
        smaller = "the smaller γ" if self.is_chains else "the cheaper setup (a chain before a tree, then the smaller γ)"
        if chosen is best:
            text = f"{chosen.label} has the best median, {chosen.median:.2f}×"
            if others:
                text += f"; {setups(others)} measured within the noise of it, and a tie goes to {smaller}"
            elif best.cost_order != min(m.cost_order for m in self.measured):
                text += f", beyond the noise of every {'smaller γ' if self.is_chains else 'cheaper setup'}"
        else:
            rivals = [m for m in self.ties if m is not best]
            text = (f"the best median is {best.label}'s {best.median:.2f}×, but {setups(rivals)} "
                    f"measured within the noise of it ({TIE_NOISE}), and a tie goes to {smaller}: {chosen.label}")
        notes = " ".join(note for note in (self.edge_text(), self.noise_text()) if note)
        return f"{text}. {notes}" if notes else f"{text}."

    @property
    def is_chains(self) -> bool:
        """Only chains measured: the words stay about γ alone."""
        return all(m.tree == 0 for m in self.measured)

    def edge_text(self) -> str:
        """A choice at the edge of the measured range says so, and how to widen it."""
        edge, chosen = self.at_range_edge, self.chosen
        if edge == "largest":
            return (f"γ = {chosen.gamma} is the largest γ measured: a larger γ might do better still, so widen the "
                    f"range upwards to find out.")
        if edge == "smallest":
            return (f"γ = {chosen.gamma} is the smallest γ measured: a smaller γ might do as well, so widen the range "
                    f"downwards to find out.")
        return ""

    def noise_text(self) -> str:
        """Where most of the γ measured tie, another sweep may pick another of them: say so, and what
        narrows the spread."""
        if len(self.measured) < 3 or 2 * len(self.ties) <= len(self.measured):
            return ""
        measured = "γ" if self.is_chains else "setups"
        return (f"{len(self.ties)} of the {len(self.measured)} {measured} measured are within the noise of the best, so another "
                f"sweep may well pick another of them: more repeats, or a longer answer, narrow the spread.")

    def setup_text(self) -> str:
        return f"α̂ = {self.alpha:.2f}, c = {self.cost_ratio:.2f}, v = {self.verify_cost:.2f}"

    def prediction_text(self) -> str:
        """The formula's answer, named as a prediction where no measurement stands beside it."""
        return f"{self.formula_text()}: a prediction, not a measurement"

    def reason_text(self) -> str:
        """Why nothing pays, in this setup's numbers."""
        if self.predicted_pays:  # the clock disagrees with the formula: say what the formula leaves out
            formula = self.formula_text()
            return (f"{formula[0].upper()}{formula[1:]}, but it counts only draft steps and verifies; the clock also "
                    "counts the prefills, sampling and cache rollbacks, and rounds cut short by the end of the text.")
        needed = theory.min_paying_alpha(self.cost_ratio, self.verify_cost, self.max_gamma)
        need = (f"it would take α̂ above {needed:.2f} at this c and v" if needed is not None
                else "at this c and v no acceptance rate would be enough")
        return (f"Each round costs γ·c + v target steps (γ draft steps at c = {self.cost_ratio:.2f}, one verify at "
                f"v = {self.verify_cost:.2f}) and yields (1 − α̂^(γ+1)) / (1 − α̂) tokens at α̂ = {self.alpha:.2f}: "
                f"even the formula's best γ, {self.predicted_gamma}, predicts only {self.predicted_speedup:.2f}×, and "
                f"{need}.")

    def headline_text(self) -> str:
        """The verdict in one sentence: measured evidence first, else the prediction, named as one."""
        best = self.best
        if best is None:
            if self.predicted_pays:
                return f"Predicted only: {self.prediction_text()}. Run it to measure."
            return f"Predicted: here speculation would not pay: {self.prediction_text()}."
        chosen = self.chosen
        if chosen.beats_target:
            band = f": {chosen.band_text()}" if chosen.num_runs == 1 else ""
            return f"Speculation pays here: {chosen.evidence_text()}, above 1× beyond the noise{band}."
        if best.median > 1.0:  # faster on the clock, but not beyond the noise: unproven, not disproved
            return f"Not shown to pay here: {best.evidence_text()}, {best.shortfall_text()}."
        return f"Here speculation does not pay: {best.evidence_text()}, {best.shortfall_text()}."

    def verdict_text(self) -> str:
        """The headline, and when nothing pays, why (in this setup's numbers) and what would change it."""
        if self.pays:
            return self.headline_text()
        reason = f" {self.reason_text()}" if self.measured else ""
        return f"{self.headline_text()}{reason} {WHAT_WOULD_CHANGE_IT_ON_A_GPU if self.on_gpu else WHAT_WOULD_CHANGE_IT}"


def setups(measured: list[Measurement]) -> str:
    """"γ = 2 and 3" for chains; each setup's own label where trees are among them."""
    if all(m.tree == 0 for m in measured):
        return f"γ = {listing([m.gamma for m in measured])}"
    return listing([m.label for m in measured])


def listing(items: list) -> str:
    """1, 2 and 3"""
    words = [str(item) for item in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def judge_run(alpha: float, cost_ratio: float, verify_cost: float, gamma: int, speedup: float,
              spread: Spread | None = None, repeats: tuple[float, ...] = (), on_gpu: bool = False) -> Payoff:
    """The verdict on one run at its γ: over its repeats (this run's speedup among them) when there are
    MIN_REPEATS, else one noisy sample read against the spread measured for one run here (none: no band)."""
    if len(repeats) >= MIN_REPEATS:
        measured = Measurement(gamma, statistics.median(repeats), min(repeats), max(repeats), len(repeats))
    else:
        measured = Measurement(gamma, speedup, speedup, speedup, 1, spread)
    return Payoff(alpha, cost_ratio, verify_cost, (measured,), on_gpu=on_gpu)
