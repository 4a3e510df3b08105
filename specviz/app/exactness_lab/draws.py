"""The exactness lab: draw many short continuations of one prompt from the target alone and from
speculative decoding, both through the engine's own lanes, and test the first two generated
tokens of each lane against the target's exact distribution with a chi-square test.

The first token is the target's own sample at prefill in both lanes, so the second is the first
token a speculative round decides: the test looks at the pair (token 1, token 2), whose exact
probability p(t1)·p(t2 | t1) takes one batched target forward. Where the target is all but sure of
that pair (a chat answer's "The capital"), the histogram would be one bar: the lab then adds the
target's own greedy start to the prompt, up to where it is unsure (`unsure_lead`). The two wrong rules,
for the learner to watch fail, are the only lab-only code on the sampling path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Generator, Iterator, Sequence

import torch
from transformers import DynamicCache

from specviz.analysis.bench import SEED_MODULUS
from specviz.catalogue import DEFAULT_LANES
from specviz.decoding.forward import forward_new_ids
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from specviz.decoding.events import Event, PrefillEvent, RoundEvent
from specviz.models.pairs import ModelPair
from specviz.decoding.sampling import (
    ProbsFn, TreeVerdict, Verdict, accept_or_resample, accept_tree, node_children, sample,
)
from specviz.decoding.rounds import AcceptRule, TreeRule
from specviz.app.render.rule import WRONG_CHAIN, WRONG_TREE

MIN_DRAWS, MAX_DRAWS = 100, 5000  # per lane
SIGNIFICANCE = 0.01  # below this p-value the lab says a lane does not follow the target
# A p-value within a factor 2 of the threshold is too close to call: one more batch of draws moves it across. The lab
# gives a verdict only outside this band (a lane that follows the target lands inside it 1.5 % of the time).
TOO_CLOSE = (SIGNIFICANCE / 2, SIGNIFICANCE * 2)
MAX_BINS = 12  # outcomes shown and tested one by one; the rest share an "other" bin
MIN_EXPECTED = 5.0  # chi-square's rule of thumb: every bin expects at least 5 draws
MAX_FIRST_IDS = 32  # first tokens whose continuations the exact distribution spells out
# Past this share for the likeliest (token 1, token 2) the histogram is one bar and "other": the lab then
# tests further on, after the target's own greedy start, where its first token has at most this share.
SPREAD_TOP = 0.5
MAX_LEAD = 32  # greedy tokens the lab may add to the prompt to get there (bounded: the wait stays short)
WHISKER_SIGMAS = 2.0  # the chart's whiskers: the exact share ± this many standard errors of a bar
TYPICAL_EPSILON = 0.09  # Medusa's posterior_threshold ε: a child with p(x) ≥ ε is always plausible
TYPICAL_DELTA = 0.3  # Medusa's posterior_alpha δ: where p is flat (high entropy H) the bar is δ·exp(−H)


def verdict_of(p_value: float) -> str:
    """The lab's reading of one lane's p-value: "follows" (no evidence against the target's distribution),
    "parts" (these draws do not follow it) or "too close" (near the threshold: no verdict either way)."""
    if TOO_CLOSE[0] <= p_value < TOO_CLOSE[1]:
        return "too close"
    return "follows" if p_value >= SIGNIFICANCE else "parts"


Outcome = tuple[int, int]  # (first, second) generated token ids
LANES = DEFAULT_LANES  # drawn and tested: the target alone and speculative decoding


# --- the wrong rules ------------------------------------------------------------------------------


def resample_from_target(
    draft_ids: torch.Tensor,  # (γ,)
    draft_probs: torch.Tensor,  # (γ, vocab)
    target_probs: torch.Tensor,  # (γ+1, vocab)
    generator: torch.Generator,
) -> Verdict:
    """The classic mistake: at a rejection, draw the correction from p instead of the residual.

    The accept test is the real one. But a rejected position already lost the mass where the
    draft over-proposed, and drawing from all of p hands it back: tokens the draft likes come
    out too often, so the output is no longer the target's.
    """
    verdict = accept_or_resample(draft_ids, draft_probs, target_probs, generator)
    if verdict.is_bonus:
        return verdict
    position = verdict.num_accepted
    wrong_id = int(sample(target_probs[position : position + 1], generator))
    return verdict._replace(next_id=wrong_id, residual=target_probs[position])


def typical_acceptance(
    node_ids: torch.Tensor,  # (N,)
    parents: Sequence[int],  # (N,)
    draft_probs: torch.Tensor | None,  # unused: typical acceptance never looks at q
    target_probs: torch.Tensor,  # (1+N, vocab)
    generator: torch.Generator,
) -> TreeVerdict:
    """A tree's wrong rule, with sampling.accept_tree's signature: Medusa's typical acceptance (Cai et al. 2024,
    arXiv 2401.10774, §2.3.1), used in practice and not exact.

    Walking down the tree, it keeps the first child x the target finds plausible enough, p(x) ≥ min(ε, δ·exp(−H(p))),
    with no coin: the drafter's first plausible guess wins every time, so its favourite tokens come out more
    often than the target would write them (the exact rule keeps x with p′(x) and renormalises p′ after each
    rejection). Where every child fails, the token is drawn from p, not from p′.
    """
    children = node_children(parents)
    accept_probs = torch.full((node_ids.shape[0],), float("nan"))  # (N,) 1 or 0: no coin decides
    uniforms = torch.full((node_ids.shape[0],), float("nan"))  # (N,)
    token_ids = node_ids.tolist()
    path: list[int] = []
    node = -1
    while True:
        probs = target_probs[node + 1]  # (vocab,)
        entropy = float(-(probs * probs.clamp_min(1e-30).log()).sum())
        bar = min(TYPICAL_EPSILON, TYPICAL_DELTA * math.exp(-entropy))
        taken = None
        for child in children[node]:
            plausible = float(probs[token_ids[child]]) >= bar
            accept_probs[child], uniforms[child] = float(plausible), 0.5  # r < 1 keeps it, r ≥ 0 rejects it
            if plausible:
                taken = child
                break
        if taken is None:
            is_bonus = not children[node]
            next_id = int(sample(probs.unsqueeze(0), generator))  # p, not p′: the rejected guesses' mass stays in
            return TreeVerdict(tuple(path), next_id, is_bonus, accept_probs, uniforms, None if is_bonus else probs)
        path.append(taken)
        node = taken


# --- drawing ----------------------------------------------------------------------------------------


def lab_config(config: DecodeConfig, seed: int) -> DecodeConfig:
    """The page's settings (its tree budget too) for one draw: token 2 is decided by the first round, so a draw
    stops there, and 2 + γ new tokens let that round draft all γ (the engine drafts fewer near max_new_tokens).
    EOS does not stop a draw: the pair (EOS, next) is as much the target's as any other."""
    return replace(config, max_new_tokens=2 + config.gamma, stop_at_eos=False, inspect=False,
                   seed=seed % SEED_MODULUS)


def first_two_ids(events: Generator[Event, None, None]) -> Outcome:
    """Token 1 from the prefill, token 2 from the first round; the lane is not run further."""
    first_id = None
    try:
        for event in events:
            if isinstance(event, PrefillEvent):
                first_id = event.next_id
            elif isinstance(event, RoundEvent):
                return first_id, event.emitted_ids[0]
    finally:
        events.close()  # stop the lane: nothing after token 2 is needed
    raise ValueError("the prompt leaves no room for two new tokens: shorten it to try the lab")


def draw_outcome(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig, lane: str,
                 accept_rule: AcceptRule = accept_or_resample, tree_rule: TreeRule = accept_tree) -> Outcome:
    """The first two tokens of one lane's run, with the config's seed."""
    if lane == "baseline":
        return first_two_ids(autoregressive_decode(pair, prompt_ids, config))
    return first_two_ids(speculative_decode(pair, prompt_ids, config, accept_rule=accept_rule, tree_rule=tree_rule))


# --- the exact distribution -------------------------------------------------------------------------


@dataclass(frozen=True)
class Bins:
    """The outcomes tested one by one, with their exact probabilities; the rest is "other"."""

    outcomes: tuple[Outcome, ...]  # most likely first
    probs: tuple[float, ...]  # exact probability of each outcome, then of "other" when has_other
    has_other: bool

    @property
    def num_bins(self) -> int:
        return len(self.probs)

    @property
    def draws_needed(self) -> int:
        """Draws before every bin expects MIN_EXPECTED of them: before that chi-square's p-value is not
        trustworthy."""
        rarest = min((prob for prob in self.probs if prob > 0), default=1.0)
        return math.ceil(MIN_EXPECTED / rarest - 1e-9)

    def index(self, outcome: Outcome) -> int | None:
        """The bin an outcome falls in; None for an outcome outside them with no "other" bin."""
        try:
            return self.outcomes.index(outcome)
        except ValueError:
            return len(self.outcomes) if self.has_other else None


@torch.inference_mode()
def exact_first_two(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig,
                    max_first: int = MAX_FIRST_IDS) -> tuple[torch.Tensor, torch.Tensor]:
    """p(t1)·p(t2 | t1) in float64 for the max_first likeliest t1, warped as the engine warps (ProbsFn), from one
    prompt forward and one batched forward of the m first tokens over copies of its KV cache."""
    to_probs = ProbsFn(config.temperature, config.top_k, config.top_p)
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=pair.device)  # (1, n)
    cache = DynamicCache()
    first_logits = forward_new_ids(pair.target, ids, cache, pair.vocab_size, last_only=True)  # (1, vocab)
    first_probs = normalised(to_probs(first_logits)[0])  # (vocab,)
    first_values, first_ids = first_probs.topk(min(max_first, pair.vocab_size))  # (m,), (m,)
    first_values, first_ids = first_values[first_values > 0], first_ids[first_values > 0]
    num_first = first_ids.shape[0]
    cache.batch_repeat_interleave(num_first)
    mask = ids.new_ones(num_first, ids.shape[1] + 1)  # (m, n+1): no padding anywhere
    output = pair.target(input_ids=first_ids.view(-1, 1), attention_mask=mask, past_key_values=cache, use_cache=True)
    second_probs = normalised(to_probs(output.logits[:, -1, : pair.vocab_size].float()))  # (m, vocab)
    return first_ids, first_values[:, None] * second_probs  # (m,), (m, vocab)


def normalised(probs: torch.Tensor) -> torch.Tensor:
    """In float64, rows summing to 1 to the last bit: float32 softmax is off by ~1e-7, which would
    otherwise leak into the "other" bin."""
    probs = probs.double()
    return probs / probs.sum(-1, keepdim=True)


def choose_bins(first_ids: torch.Tensor, joint: torch.Tensor, num_draws: int) -> Bins:
    """The likeliest outcomes that expect ≥ 5 draws each (at most MAX_BINS); "other" holds the rest and must
    expect ≥ 5 too: while it does not, its smallest neighbour joins it. Chosen from the exact distribution
    alone, never from the samples, so the test stays honest."""
    values, flat = joint.flatten().topk(min(MAX_BINS, joint.numel()))  # (k,), (k,)
    vocab = joint.shape[1]
    kept = [((int(first_ids[i // vocab]), int(i % vocab)), v)
            for v, i in zip(values.tolist(), flat.tolist()) if v * num_draws >= MIN_EXPECTED]
    other = max(0.0, 1.0 - sum(prob for _, prob in kept))
    while kept and 0 < other * num_draws < MIN_EXPECTED:
        other += kept.pop()[1]
    has_other = other * num_draws >= MIN_EXPECTED or not kept
    probs = [prob for _, prob in kept] + ([other] if has_other else [])
    return Bins(tuple(outcome for outcome, _ in kept), tuple(probs), has_other)


@dataclass(frozen=True)
class LabStart:
    """Where the lab tests: right after the prompt, or after the target's own greedy start (lead_ids)
    where it was all but sure of the first two tokens (skipped: that pair and its probability)."""

    lead_ids: tuple[int, ...] = ()
    skipped: Outcome | None = None
    skipped_prob: float = 0.0


@torch.inference_mode()
def unsure_lead(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig) -> list[int]:
    """The target's own greedy tokens after the prompt, up to the first position where its (warped) top
    probability is at most SPREAD_TOP; where none is within MAX_LEAD tokens or before its end of text, up
    to the least sure position seen. One cached target step per token."""
    to_probs = ProbsFn(config.temperature, config.top_k, config.top_p)
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=pair.device)  # (1, n)
    cache = DynamicCache()
    lead, best, best_top = [], [], 1.0
    while True:
        logits = forward_new_ids(pair.target, ids, cache, pair.vocab_size, last_only=True)  # (1, vocab)
        top = float(to_probs(logits).max())
        if lead and top <= SPREAD_TOP:
            return lead
        if lead and top < best_top:
            best, best_top = list(lead), top
        next_id = int(logits.argmax())
        if len(lead) == MAX_LEAD or next_id == pair.eos_id:
            return best
        lead.append(next_id)
        ids = torch.cat([ids, ids.new_tensor([[next_id]])], dim=1)  # (1, n+1)


def choose_start(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig,
                 exact: tuple[torch.Tensor, torch.Tensor]) -> tuple[LabStart, list[int], tuple[torch.Tensor, torch.Tensor]]:
    """Where to test, from the exact distribution after the prompt: (the start, the ids the lanes
    continue, the exact distribution there)."""
    first_ids, joint = exact
    top, flat = joint.flatten().max(0)
    if float(top) <= SPREAD_TOP:
        return LabStart(), prompt_ids, exact
    lead = unsure_lead(pair, prompt_ids, config)
    if not lead:
        return LabStart(), prompt_ids, exact
    skipped = (int(first_ids[int(flat) // joint.shape[1]]), int(flat) % joint.shape[1])
    start_ids = prompt_ids + lead
    return LabStart(tuple(lead), skipped, float(top)), start_ids, exact_first_two(pair, start_ids, config)


# --- the test ----------------------------------------------------------------------------------------


def chi_square_survival(statistic: float, dof: int) -> float:
    """P(χ²_dof ≥ statistic): the regularised upper incomplete gamma Q(dof/2, statistic/2)."""
    if statistic <= 0:
        return 1.0
    if math.isinf(statistic):
        return 0.0
    value = torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                    torch.tensor(statistic / 2, dtype=torch.float64))
    return float(value)


def chi_square_p_value(counts: Sequence[int], probs: Sequence[float]) -> float | None:
    """Pearson's goodness of fit of the counts to the probs; None with fewer than 2 bins or no draws; 0 where an
    outcome of probability 0 was drawn (the statistic is infinite)."""
    total = sum(counts)
    if len(probs) < 2 or total == 0:
        return None
    statistic = 0.0
    for count, prob in zip(counts, probs):
        expected = total * prob
        if expected == 0:
            if count:
                return 0.0
            continue
        statistic += (count - expected) ** 2 / expected
    return chi_square_survival(statistic, len(probs) - 1)


@dataclass
class LabTally:
    """Counts per bin for each lane, as the draws come in."""

    bins: Bins
    num_planned: int
    start: LabStart = field(default_factory=LabStart)
    wrong_words: str = WRONG_CHAIN  # what the wrong rule is in this run: a chain's, or a tree's
    counts: dict[str, list[int]] = field(default_factory=dict)
    outside: dict[str, int] = field(default_factory=dict)  # draws of probability 0 (must stay 0)

    def __post_init__(self):
        for lane in LANES:
            self.counts.setdefault(lane, [0] * self.bins.num_bins)
            self.outside.setdefault(lane, 0)

    def add(self, lane: str, outcome: Outcome) -> None:
        index = self.bins.index(outcome)
        if index is None:
            self.outside[lane] += 1
        else:
            self.counts[lane][index] += 1

    def num_draws(self, lane: str) -> int:
        return sum(self.counts[lane]) + self.outside[lane]

    def frequencies(self, lane: str) -> list[float]:
        total = self.num_draws(lane)
        return [count / total if total else 0.0 for count in self.counts[lane]]

    def bars_outside(self, lane: str) -> int:
        """The lane's bars outside their whiskers (the exact share ± WHISKER_SIGMAS standard errors): about
        1 in 20 even for draws that follow the target, which is why the verdict is the test, not the bars."""
        total = self.num_draws(lane)
        if not total:
            return 0
        return sum(abs(share - prob) > WHISKER_SIGMAS * (prob * (1 - prob) / total) ** 0.5
                   for share, prob in zip(self.frequencies(lane), self.bins.probs))

    def too_few(self, lane: str) -> bool:
        """Too few draws so far for the test to judge (Bins.draws_needed)."""
        return self.num_draws(lane) < self.bins.draws_needed

    def p_value(self, lane: str) -> float | None:
        """The lane's chi-square p-value; 0 once it drew an outcome the target never gives; None while it
        has too few draws to judge, or fewer than two bins to compare."""
        if self.outside[lane]:
            return 0.0
        if self.too_few(lane):
            return None
        return chi_square_p_value(self.counts[lane], self.bins.probs)


def run_lab(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig, num_draws: int,
            wrong_rule: bool = False) -> Iterator[LabTally]:
    """Draw num_draws runs per lane, one seed per draw (config.seed + i), both lanes in turn;
    yield the tally after every pair of draws (the first yield has no draws yet). Where the target is
    all but sure of the first two tokens, both lanes start after its own greedy start (choose_start)."""
    check_lab(config, num_draws)
    start, prompt_ids, (first_ids, joint) = choose_start(pair, prompt_ids, config,
                                                         exact_first_two(pair, prompt_ids, config))
    tally = LabTally(choose_bins(first_ids, joint, num_draws), num_draws, start,
                     wrong_words=WRONG_TREE if config.tree else WRONG_CHAIN)
    accept_rule, tree_rule = ((resample_from_target, typical_acceptance) if wrong_rule
                              else (accept_or_resample, accept_tree))
    yield tally
    for index in range(num_draws):
        draw_config = lab_config(config, config.seed + index)
        for lane in LANES:
            tally.add(lane, draw_outcome(pair, prompt_ids, draw_config, lane, accept_rule, tree_rule))
        yield tally


def check_lab(config: DecodeConfig, num_draws: int) -> None:
    """Raise ValueError with a message a user can act on."""
    if not MIN_DRAWS <= num_draws <= MAX_DRAWS:
        raise ValueError(f"N (draws per lane) must be from {MIN_DRAWS} to {MAX_DRAWS}, got {num_draws}")
    if config.temperature == 0:
        raise ValueError("at temperature 0 every draw is the same greedy text, so there is no distribution to "
                         "test: set the temperature above 0 (1 is a good start)")
