"""Does speculation pay here? One rule, asked by the run's stats, the theory explorer and the γ sweep.

Measurement decides; the formula explains. A γ pays only when its measured speedup is above 1× beyond
the noise: a sweep cell's (or the page's repeats') whole min–max spread above 1, or one run whose band
still clears 1 when widened by the spread one run was *measured* to have here (a `Spread`, from the
machine's bench record); with no spread measured, one run gives no verdict: the band is never assumed.
Lanes that wrote different texts get no verdict (unequal_texts_text). Leviathan's formula at the setup's
α̂, c and v is always worded as a prediction, and supplies the reason when nothing pays.

Of several γ measured, medians within the noise of the best tie (TIE_RULE), and a tie goes to the
smaller γ, which drafts less and wastes less when a draft misses; a choice at the range's edge says so.
The verdict is short (VERDICT_MAX_WORDS), its detail apart (verdict_detail_text), so the page can put it a
click away. The page's one answer to "which γ" is a GammaAnswer: the bench record's pick before a γ sweep of
the setup, the sweep's after one, the formula's best only beside it as a prediction.
Plain text, no HTML, so the page, the API and the terminal can all show it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from specviz.analysis import theory

# Medians of a few repeats still move by several percent from one sweep to the next on a shared CPU:
# two medians closer than this share of the best are not told apart.
TIE_TOLERANCE = 0.05
# Runs of one setup on the page before their own min–max is the band (fewer say too little of the spread).
MIN_REPEATS = 3
# Measurement.noise_band's words: its runs' min–max, or, where measured, the band one run moves in here (a sweep's γ
# run once; a bench cell that kept every run)
TIE_NOISE = ("inside the best γ's noise band, its runs' min–max or, where measured, the band one run moves in "
             f"here; or within {TIE_TOLERANCE:.0%} of its median")
TIE_RULE = (f"medians within the noise of the best ({TIE_NOISE}) are a tie, and a tie goes to the smaller γ "
            "(where draft trees were measured too, to a chain before a tree and a smaller tree before a bigger)")
NOTHING_PAYS_GAMMA = "none: the target alone is faster here"
# The verdict is read at a glance: at most this many words, the bench's detail one click away (verdict_detail_text).
VERDICT_MAX_WORDS = 30
# The levers that do not depend on the machine, ending both "what would change it" sentences.
OTHER_LEVERS = ("a drafter that guesses this kind of text better (higher α̂); or prompt lookup on prompts whose answer "
                "copies from them (no draft model, so c is near 0).")
# No GPU claim here: what a GPU did for a pair is its record's to say (expectations.gpu_text), said once, for the
# pair that ran, and nothing where no record measured it.
WHAT_WOULD_CHANGE_IT = (
    "What would change it: a bigger target, whose step costs many draft steps (lower c) while a (γ+1)-token verify "
    f"costs about one step (v near 1); {OTHER_LEVERS}"
)
WHAT_WOULD_CHANGE_IT_ON_A_GPU = (
    "What would change it: a bigger target, whose step is arithmetic rather than launches, so a draft step costs a "
    "small share of it (lower c); fewer trips to the host a round (each round reads its verdicts back); "
    f"{OTHER_LEVERS}"
)
# Where the one answer to "which γ" came from (GammaAnswer.source).
FROM_SWEEP, FROM_BENCH, FROM_NOTHING = "sweep", "bench", "none"
# How every prediction that stands alone is named: the formula's γ is never said as a measurement.
PREDICTION_ONLY = "a prediction, not a measurement"
SWEEP_WHERE = "measured by the γ sweep below, on this prompt and these settings"
NOTHING_WHERE = "no bench record for this setup on this machine, and no γ sweep of it on this page yet"


@dataclass(frozen=True)
class Spread:
    """How far one run's speedup was measured to move here, as ratios to the median of many (never assumed)."""

    low_ratio: float  # lowest over median
    high_ratio: float  # highest over median
    source: str  # where it was measured, in words: "the bench's 33 greedy runs on this machine (…)"


def repeat_ratios(speedups: Sequence[float], num_prompts: int) -> list[float]:
    """Each run's speedup over its own prompt's median, for every prompt run at least twice (run i is prompt
    i mod num_prompts, as the bench measures them): how far timing alone moves one run, what the text asks
    held fixed. Empty where no prompt ran twice or the number of prompts is not known (0)."""
    if num_prompts < 1:
        return []
    by_prompt: dict[int, list[float]] = {}
    for index, value in enumerate(speedups):
        by_prompt.setdefault(index % num_prompts, []).append(value)
    return [value / statistics.median(runs) for runs in by_prompt.values() if len(runs) > 1 for value in runs]


def repeat_spread(speedups: Sequence[float], num_prompts: int, source: str) -> Spread | None:
    """The spread of one run from repeats of the same prompt (repeat_ratios), with where it was measured; None
    where no prompt ran twice, and for runs of one prompt, whose own min–max already is its repeats' spread.
    Prompts differ for a reason (what a text asks sets how many drafts are accepted), so their range is not
    noise, and this is what a run's verdict is judged against."""
    if num_prompts < 2:
        return None
    ratios = repeat_ratios(speedups, num_prompts)
    return Spread(min(ratios), max(ratios), source) if ratios else None


def token_counts_text(num_baseline: int, num_speculative: int) -> str:
    """"64 and 70 tokens", or "64 tokens each" where two texts are as long (a sample at the token limit is)."""
    if num_baseline == num_speculative:
        return f"{num_baseline} tokens each"
    return f"{num_baseline} and {num_speculative} tokens"


def unequal_texts_text(num_baseline: int, num_speculative: int, temperature: float) -> str:
    """No verdict on one run whose lanes wrote different texts: their tokens per second are not like for like
    (a short sample is mostly prefill, a long one mostly rounds)."""
    why = (f"at temperature {temperature:g} each lane drew its own sample" if temperature
           else "the greedy lanes parted")
    return (f"No verdict from this run: {why}, so they wrote different texts "
            f"({token_counts_text(num_baseline, num_speculative)}) and their speeds compare unequal work. "
            "Temperature 0 compares like for like; the bench's sampled figures pool many prompts and repeats.")


def shown_above_one(speedup: float) -> bool:
    """Above 1× as the page prints a speedup (two decimals): what a verdict of "above 1×" may rest on."""
    return round(speedup, 2) > 1.0


def shown_below_one(speedup: float) -> bool:
    """Below 1× as the page prints a speedup: what "slower" may rest on (a 0.996× run reads "1.00×")."""
    return round(speedup, 2) < 1.0


@dataclass(frozen=True)
class Measurement:
    """Measured speedup at one γ (and tree budget): a sweep cell's median and min–max, a bench cell's over its
    prompts, or one run (low = high = median)."""

    gamma: int
    median: float  # tokens/s of speculative decoding over the target alone's
    low: float
    high: float
    num_runs: int = 1
    # how far one run was measured to move here, from repeats of one prompt: one run's band; for many runs over
    # several prompts (a bench cell), the median's band in place of the prompts' range (a median moves less than
    # one run, so it is wide, never narrow). None: one run has no band, many runs are judged by their min–max
    spread: Spread | None = None
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
        """The measured spread of one run around the median (repeats of one prompt); else, for many runs, their
        min–max; for one run without one, no band at all."""
        if self.spread is not None:
            return self.median * self.spread.low_ratio, self.median * self.spread.high_ratio
        if self.num_runs > 1:
            return self.low, self.high
        return self.median, self.median

    @property
    def over_prompts(self) -> bool:
        """Many runs over several prompts, judged by the noise of repeats of one prompt (a bench cell that kept
        every run): its min–max is the prompts' range, not noise."""
        return self.num_runs > 1 and self.spread is not None

    @property
    def beats_target(self) -> bool:
        """Faster than the target alone beyond the noise: a measured band, all of it above 1× as the page prints
        it (a band from 1.003× reads "1.00–1.19×", and "all above 1×" beside it would contradict what it shows)."""
        return self.has_spread and shown_above_one(self.median) and shown_above_one(self.noise_band[0])

    def evidence_text(self) -> str:
        if self.over_prompts:
            return (f"{self.label} measured a median {self.median:.2f}× over {self.num_runs} runs "
                    f"(prompts ranged {self.low:.2f}–{self.high:.2f}×)")
        if self.num_runs > 1:
            return (f"{self.label} measured a median {self.median:.2f}× "
                    f"({self.low:.2f}–{self.high:.2f}× over {self.num_runs} runs)")
        return f"this run measured {self.median:.2f}× at {self.label} (one noisy sample)"

    def band_text(self) -> str:
        """The band in words: how far one run moves here, where that was measured, and what it makes of this."""
        low, high = self.noise_band
        this = ("at that noise the median stands for" if self.over_prompts else "this one could as well read")
        return (f"one run moves from {self.spread.low_ratio:.0%} to {self.spread.high_ratio:.0%} of the median here "
                f"({self.spread.source}), so {this} {low:.2f}–{high:.2f}×")

    def short_band_text(self) -> str:
        """The band alone, for the short verdict (band_text, with where it was measured, is one click away)."""
        low, high = self.noise_band
        return f"{'its median' if self.over_prompts else 'one run'} here reads {low:.2f}–{high:.2f}×"

    def shortfall_text(self) -> str:
        """Why this measurement is no gain, in a few words: a slowdown, a gain inside the measured noise, or no
        noise measured."""
        below = shown_below_one(self.median)
        if shown_below_one(self.noise_band[1]) or (below and (self.num_runs == 1 or self.over_prompts)):
            return "slower than the target alone"
        if self.num_runs > 1 and not self.over_prompts:
            return "below 1× at the median" if below else "a spread that reaches 1×"
        if self.spread is not None:
            return f"within the noise: {self.short_band_text()}"
        return "and how far one run moves here has not been measured"

    def noise_detail_text(self) -> str:
        """Where the band came from, or why there is none: the verdict's detail."""
        if self.over_prompts:
            return (f"The band: {self.band_text()}; a gain counts only where all of it is above 1×. The prompts' own "
                    f"range, {self.low:.2f}–{self.high:.2f}×, is what they ask, not noise.")
        if self.num_runs > 1:
            return (f"The band is the spread of {self.num_runs} runs of this setup: a gain counts only where all of "
                    "it is above 1×.")
        if self.spread is not None:
            return f"The band: {self.band_text()}. {BUSY_MACHINE}"
        return ("How far one run moves here has not been measured (no bench record for this machine and setup, and "
                "too few repeats on this page), so one run cannot say it is beyond the noise: run it again, and the "
                "runs-so-far table shows the spread.")


# A bench measures its band with nothing else running. A machine whose speed swings (another program, a shared host's
# other tenants) moves one run further: the lanes take turns (events.take_turns), so a slow spell falls on both, but a
# spell shorter than a few turns still lands on one (measured on the built code at a busy hour, 2026-12-07: one run
# 86-111 % of its median in turns, 65-117 % one lane after the other; assets/bench/README.md, "Lanes in turns").
BUSY_MACHINE = ("That band is a quiet machine's: on a busy one a run moves further. The lanes take turns, so a slow "
                "spell slows both, but not always alike.")


@dataclass(frozen=True)
class Payoff:
    """The verdict for one setup (α̂, c, v) and what was measured there (nothing, one run, a sweep)."""

    alpha: float  # α̂ measured, or the theory explorer's slider
    cost_ratio: float  # c
    verify_cost: float  # v (Leviathan takes 1)
    measured: tuple[Measurement, ...] = ()  # one per γ measured; empty: prediction only
    max_gamma: int = 16
    on_gpu: bool = False  # measured on a GPU: "what would change it" cannot be "run it on a GPU"
    # the most tokens any chain round drafted where it was measured (0: not known): a drafter that stops once unsure
    # may never reach the larger γ, and GammaAnswer then says a larger γ changes nothing
    most_drafted: int = 0

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
    def predicted_ties(self) -> list[int]:
        """The formula's best γ and every γ that prints alike: naming the argmax alone read as a gain over a run's γ
        that printed the same (γ = 2 "would do best (1.47×)" beside γ = 3's 1.47×)."""
        return theory.best_gammas(self.alpha, self.cost_ratio, self.max_gamma, self.verify_cost)

    def predicted_gammas_text(self) -> str:
        """The formula's best γ as the page can show it: one γ, or the ones it cannot tell apart."""
        ties = self.predicted_ties  # the argmax alone where one γ prints best
        return f"{theory.gammas_text(ties)} would do {'best' if len(ties) == 1 else 'equally well'}"

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
        """The γ to use; None when the target alone is faster here, or nothing was measured (the formula's best γ is
        a prediction, never a recommendation)."""
        if not self.pays or self.chosen is None:
            return None
        return self.chosen.gamma

    @property
    def recommended_tree(self) -> int | None:
        """The tree budget to use with it (0: a chain); None where recommended_gamma is."""
        if not self.pays or self.chosen is None:
            return None
        return self.chosen.tree

    def recommendation_text(self) -> str:
        if self.recommended_gamma is not None:
            return self.chosen.label
        best = self.best
        if best is None:
            return "none measured"
        if not shown_below_one(best.median) and not best.has_spread:
            return f"none beyond the noise yet: one run at {best.label} measured {best.median:.2f}×, with no spread measured"
        if not shown_below_one(best.median):  # as fast or faster at the median, yet not beyond the noise
            low = best.noise_band[0]
            return f"none beyond the noise: {best.label}'s median is {best.median:.2f}×, but it reaches down to {low:.2f}×"
        return NOTHING_PAYS_GAMMA

    def formula_text(self) -> str:
        """The formula's best γ at its own α̂, c and v (a run's and a sweep's differ): the one sentence every
        prediction here says, beside the measured answer, never as a second one."""
        if self.predicted_pays:
            return (f"the formula predicts {self.predicted_gammas_text()} ({self.predicted_speedup:.2f}×) "
                    f"at this {self.setup_text()}")
        return (f"the formula predicts no γ beats the target alone at this {self.setup_text()} (its best, "
                f"γ = {self.predicted_gamma}, {self.predicted_speedup:.2f}×)")

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
        return f"{self.formula_text()}: {PREDICTION_ONLY}"

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
        """The verdict in one short sentence (at most VERDICT_MAX_WORDS words): measured evidence first, else the
        prediction, named as one. Where the band was measured and why nothing pays are verdict_detail_text's."""
        best = self.best
        if best is None:
            if self.predicted_pays:
                return (f"Predicted only ({PREDICTION_ONLY}): the formula predicts {self.predicted_speedup:.2f}× at "
                        f"γ = {self.predicted_gamma} here. Run it to measure.")
            return (f"Predicted only ({PREDICTION_ONLY}): the formula predicts no γ beats the target alone here "
                    f"(at most {self.predicted_speedup:.2f}×, at γ = {self.predicted_gamma}).")
        chosen = self.chosen
        if chosen.beats_target:
            if chosen.num_runs == 1:
                return f"Speculation pays here: {chosen.evidence_text()}, and {chosen.short_band_text()}, all above 1×."
            return f"Speculation pays here: {chosen.evidence_text()}, above 1× beyond the noise."
        if not shown_below_one(best.median):  # as fast or faster on the clock, not beyond the noise: unproven
            return f"Not shown to pay here: {best.evidence_text()}, {best.shortfall_text()}."
        return f"Here speculation does not pay: {best.evidence_text()}, {best.shortfall_text()}."

    def verdict_text(self) -> str:
        """The verdict as the page shows it: the short headline."""
        return self.headline_text()

    def verdict_detail_text(self) -> str:
        """What the short verdict leaves one click away: where the noise band was measured (the bench's record,
        the page's repeats) or why there is none, and when nothing pays, why in this setup's numbers and what
        would change it."""
        judged = self.chosen if self.pays else self.best
        parts = [judged.noise_detail_text()] if judged is not None else [self.prediction_text()[0].upper()
                                                                          + self.prediction_text()[1:] + "."]
        if not self.pays:
            if self.measured:
                parts.append(self.reason_text())
            parts.append(WHAT_WOULD_CHANGE_IT_ON_A_GPU if self.on_gpu else WHAT_WOULD_CHANGE_IT)
        return " ".join(parts)

    def full_verdict_text(self) -> str:
        """The verdict and its detail in one text, for the terminal and the API (no click there)."""
        return f"{self.verdict_text()} {self.verdict_detail_text()}"


@dataclass(frozen=True)
class GammaAnswer:
    """The page's one answer to "which γ?", computed once per run (render.verdict.which_gamma) and said in one place,
    the run's arithmetic (the γ sweep gives its own after a sweep, and the arithmetic then quotes it).

    Before a γ sweep of the setup, the bench record's pick for this machine and pair (by the one rule over its cells;
    none where no record measured the setup); after one, the sweep's. The formula's best γ is only ever said beside
    it, as a prediction. Where the drafter's stop capped every round below the γ measured, a larger γ drafts no more,
    and the answer says so: equal α̂ and τ across γ are then no fault.
    """

    source: str  # FROM_SWEEP, FROM_BENCH or FROM_NOTHING
    where: str  # where it was measured, in words (SWEEP_WHERE, a record's words, NOTHING_WHERE)
    measured: Payoff | None = None  # the one rule over the sweep's or the record's cells; None: nothing measured
    predicted: Payoff | None = None  # the formula at the setup's own α̂, c and v (the sweep's, else the run's)
    most_drafted: int = 0  # the most tokens any chain round drafted (0: not known)
    largest_gamma: int = 0  # the largest γ those rounds could draft

    @property
    def setup(self) -> Measurement | None:
        """The recommended setup: the bench's pick (its best median where none beats the target alone beyond the
        noise, said so), or the sweep's (None where nothing it measured beats the target alone); None: nothing
        measured."""
        if self.measured is None or (self.source != FROM_BENCH and not self.measured.pays):
            return None
        return self.measured.chosen

    @property
    def gamma(self) -> int | None:
        """The recommended γ (setup's); None where there is none."""
        return None if self.setup is None else self.setup.gamma

    @property
    def tree(self) -> int | None:
        """The tree budget that goes with it (0: a chain); None where gamma is."""
        return None if self.setup is None else self.setup.tree

    @property
    def is_capped(self) -> bool:
        """Every round drafted fewer than the largest γ allowed: a larger γ would have drafted no more."""
        return 0 < self.most_drafted < self.largest_gamma

    def recommendation_text(self) -> str:
        """"Recommended γ = 3", or "Recommended γ: none beyond the noise: …" (the one rule's words)."""
        if self.measured is None:
            return "Recommended γ: none measured"
        if self.source == FROM_BENCH:  # the record's best; `where` says when it is no gain beyond the noise
            return f"Recommended {self.measured.chosen.label}"
        if self.gamma is not None:
            return f"Recommended {self.measured.recommendation_text()}"
        return f"Recommended γ: {self.measured.recommendation_text()}"

    def prediction_text(self) -> str:
        """The formula's best γ, worded as the prediction it is ("" where no α̂, c and v were measured)."""
        return self.predicted.prediction_text() if self.predicted is not None else ""

    def capped_text(self) -> str:
        """Why a larger γ changes nothing here, where the rounds never drafted up to the γ allowed."""
        if not self.is_capped:
            return ""
        most = self.most_drafted
        unreached = sorted({m.gamma for m in self.measured.measured if not m.tree and m.gamma > most}
                           if self.source == FROM_SWEEP and self.measured is not None else ())
        # a sweep's γ above the cap measured the same rounds: said, or equal α̂ and τ across γ read as a fault
        noise = (f": γ = {', '.join(map(str, unreached))} drafted no more than γ = {most} does, so their differences "
                 "are the clock's noise" if unreached else "")
        return (f"No round drafted more than {most} token{'' if most == 1 else 's'} (the drafter stops once unsure, "
                f"or at the text's end), so a γ above {most} changes nothing here{noise}.")

    def text(self) -> str:
        """The one sentence the page says for "which γ"."""
        beside = f" Beside it, {self.prediction_text()}." if self.predicted is not None else ""
        capped = f" {self.capped_text()}" if self.is_capped else ""
        return f"{self.recommendation_text()} ({self.where}).{beside}{capped}"


def sweep_answer(payoff: Payoff) -> GammaAnswer:
    """The answer after a γ sweep of the setup: its own γ, its own prediction, its own rounds' cap."""
    chains = [m.gamma for m in payoff.measured if not m.tree]
    return GammaAnswer(FROM_SWEEP, SWEEP_WHERE, payoff, payoff, payoff.most_drafted, max(chains, default=0))


def setups(measured: list[Measurement]) -> str:
    """"γ = 2 and 3" for chains; each setup's own label where trees are among them."""
    if all(m.tree == 0 for m in measured):
        return f"γ = {listing([m.gamma for m in measured])}"
    return listing([m.label for m in measured])


def listing(items: Sequence) -> str:
    """"", "1", "1 and 2", "1, 2 and 3"."""
    words = [str(item) for item in items]
    return "".join(words) if len(words) <= 1 else ", ".join(words[:-1]) + " and " + words[-1]


def judge_run(alpha: float, cost_ratio: float, verify_cost: float, gamma: int, speedup: float,
              spread: Spread | None = None, repeats: tuple[float, ...] = (), on_gpu: bool = False) -> Payoff:
    """The verdict on one run at its γ: over its repeats (this run's speedup among them) when there are
    MIN_REPEATS, else one noisy sample read against the spread measured for one run here (none: no band)."""
    if len(repeats) >= MIN_REPEATS:
        measured = Measurement(gamma, statistics.median(repeats), min(repeats), max(repeats), len(repeats))
    else:
        measured = Measurement(gamma, speedup, speedup, speedup, 1, spread)
    return Payoff(alpha, cost_ratio, verify_cost, (measured,), on_gpu=on_gpu)
