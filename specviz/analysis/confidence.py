"""Easy and hard tokens: acceptance against how sure the target was at each drafted position.

A draft is easy to guess where the target is sure ("of" after "the capital"), hard where it is not
("Edinburgh" is one name among many it weighs). Each examined draft carries the target's top probability
there (`DraftedToken.target_confidence`, at temperature 1); this module gathers those drafts, buckets them
by that confidence, and says what the buckets show in the run's own numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from specviz.analysis.trace import Trace

# Bucket edges of the target's top probability: five equal bins, the last one closed at 1.
CONFIDENCE_EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
SURE = 0.8  # the sentence compares drafts where the target was at least this sure…
UNSURE = 0.4  # …with those where it was below this
CHANCE = 0.05  # …and calls one share higher only where chance would part them this far less often than this
TOO_FEW = " These counts are too few to tell the two apart."


@dataclass(frozen=True)
class JudgedDraft:
    """One drafted position the target judged, with how sure the target was there."""

    token_id: int
    target_confidence: float  # the target's top probability at this position (T = 1)
    accepted: bool
    round_index: int
    draft_index: int  # 0-based within its round
    gamma: int | None = None  # the run's γ, where drafts pooled from several runs need telling apart


@dataclass(frozen=True)
class ConfidenceBucket:
    """Drafts whose target confidence fell in [low, high) (the last bucket includes 1)."""

    low: float
    high: float
    num_accepted: int
    num_drafts: int

    @property
    def rate(self) -> float | None:
        return self.num_accepted / self.num_drafts if self.num_drafts else None

    @property
    def label(self) -> str:
        return f"{self.low:.1f}–{self.high:.1f}"


def judged_drafts(trace: Trace, gamma: int | None = None) -> list[JudgedDraft]:
    """Every draft the target judged (accepted, or the round's first rejection), in order: those after a
    rejection say nothing about what is easy. A first position with rival guesses counts once, as α̂ counts it.
    Runs recorded without the target's confidence give no points."""
    drafts = []
    for event in trace.rounds:
        for index, token in enumerate(event.drafted):
            verdict = event.verdict(index)
            if verdict not in ("accepted", "rejected") or token.target_confidence is None:
                continue
            drafts.append(JudgedDraft(token.token_id, token.target_confidence, verdict == "accepted",
                                      event.round_index, index, gamma))
    return drafts


def bucket_of(confidence: float, edges: Sequence[float] = CONFIDENCE_EDGES) -> int:
    """Index of the bucket holding this confidence; 1.0 lands in the last one."""
    return next((index for index in range(len(edges) - 2, -1, -1) if confidence >= edges[index]), 0)


def bucket_drafts(drafts: Iterable[JudgedDraft], edges: Sequence[float] = CONFIDENCE_EDGES) -> list[ConfidenceBucket]:
    """Accepted and judged drafts per confidence bucket, every bucket present (empty ones with 0 of 0)."""
    accepted = [0] * (len(edges) - 1)
    judged = [0] * (len(edges) - 1)
    for draft in drafts:
        index = bucket_of(draft.target_confidence, edges)
        judged[index] += 1
        accepted[index] += draft.accepted
    return [ConfidenceBucket(edges[i], edges[i + 1], accepted[i], judged[i]) for i in range(len(edges) - 1)]


def tally(drafts: Sequence[JudgedDraft]) -> str:
    """ "41 of 47 drafts were accepted (87%)" """
    noun = "draft was" if len(drafts) == 1 else "drafts were"
    return f"{sum(d.accepted for d in drafts)} of {len(drafts)} {noun} accepted ({accepted_share(drafts):.0%})"


def confidence_sentence(drafts: Sequence[JudgedDraft], where: str = "this run") -> str:
    """What the chart shows, in these drafts' own numbers: acceptance where the target was sure
    against where it was not."""
    if not drafts:
        return (f"No judged drafts with the target's confidence in {where} yet: each draft the target judges becomes "
                "a point here, placed by how sure the target was (runs recorded before specviz kept it have none).")
    sure = [draft for draft in drafts if draft.target_confidence >= SURE]
    unsure = [draft for draft in drafts if draft.target_confidence < UNSURE]
    parts = []
    if sure:
        parts.append(f"where the target was at least {SURE:.0%} sure, {tally(sure)}")
    if unsure:
        parts.append(f"where it was under {UNSURE:.0%} sure, {tally(unsure)}")
    if not parts:
        return (f"In {where} the target was between {UNSURE:.0%} and {SURE:.0%} sure at every judged draft: "
                f"{tally(drafts)}.")
    sentence = f"In {where}, " + "; ".join(parts) + "."
    if not (sure and unsure):
        missing = f"under {UNSURE:.0%}" if sure else f"at least {SURE:.0%}"
        sentence += f" The target was never {missing} sure at a judged draft."
    elif not beyond_chance(sure, unsure):
        # 3 of 5 against 8 of 13 is luck as often as not: no lesson read either way from counts this small
        sentence += TOO_FEW
    elif accepted_share(sure) < accepted_share(unsure):
        # The chart's lesson runs backwards here (a sampled run with a drafter that often picks another token,
        # say), and a learner needs the reason, or the chart reads as a bug.
        sentence += (" Here the sure positions fared worse: a position is easy only when the drafter guesses the "
                     "target's clear pick; any other guess there has almost no probability under the target, so it is "
                     "nearly always thrown away, while where the target is unsure many guesses have some.")
    return sentence


def accepted_share(drafts: Sequence[JudgedDraft]) -> float:
    return sum(draft.accepted for draft in drafts) / len(drafts)


def beyond_chance(first: Sequence[JudgedDraft], second: Sequence[JudgedDraft], level: float = CHANCE) -> bool:
    """Whether two groups' accepted shares differ beyond chance: Fisher's exact test, two-sided, on the 2×2 table
    of accepted and rejected drafts in each (exact at the few drafts one run judges, where a normal approximation
    overstates)."""
    accepted_first = sum(draft.accepted for draft in first)
    accepted = accepted_first + sum(draft.accepted for draft in second)
    return fisher_p_value(accepted_first, len(first), accepted, len(first) + len(second)) < level


def fisher_p_value(hits_first: int, num_first: int, hits: int, num: int) -> float:
    """Two-sided p of Fisher's exact test: the chance, with the margins fixed, of a table no likelier than the one
    seen (`hits_first` of the first group's `num_first`, `hits` of all `num`), from hypergeometric terms in logs."""
    def log_term(k: int) -> float:  # log P(the first group holds k of the hits)
        return (log_comb(num_first, k) + log_comb(num - num_first, hits - k) - log_comb(num, hits))
    seen = log_term(hits_first)
    terms = [log_term(k) for k in range(max(0, hits - (num - num_first)), min(num_first, hits) + 1)]
    return min(1.0, sum(math.exp(term) for term in terms if term <= seen + 1e-9))  # ties with the seen table count


def log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
