"""The decoding engine: a fair autoregressive baseline and exact speculative decoding.

Both are generators of events (specviz.events). No threads, callbacks or prints in here: a
consumer that wants to stop simply stops iterating. Timings cover model work and sampling
only, with CUDA synchronised before the clock is read, so rendering between events never
counts against either lane.

One speculative round, with committed ids c and lookahead γ (Leviathan et al. 2023):
  draft   x_1..x_γ ~ q, autoregressively                    (γ draft forwards)
  verify  p at γ+1 positions from one forward over [c_-1, x_1..x_γ]   (1 target forward)
  decide  accept while r < min(1, p/q); resample or bonus   (sampling.accept_or_resample)
  rollback both KV caches to the new committed length
Invariant between rounds: each KV cache holds at most committed[:-1]; whatever it lacks is fed
on the next forward, so a fully accepted round needs no extra draft pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, NamedTuple, Protocol

import torch
from transformers import DynamicCache

from specviz.events import DraftedToken, Event, FinishEvent, PositionDetail, PrefillEvent, RoundEvent
from specviz.models import ModelPair
from specviz.sampling import ProbsFn, Verdict, accept_or_resample, sample

MAX_GAMMA = 16
INSPECT_TOP_K = 8  # tokens shown per distribution in the step inspector


@dataclass(frozen=True)
class DecodeConfig:
    """Settings shared by both lanes, so the baseline is decoded exactly like the target lane."""

    gamma: int = 4  # tokens drafted per round (γ); ignored by the baseline
    temperature: float = 0.0  # 0 = greedy; else logits / temperature
    top_k: int = 0  # keep the k most likely tokens; 0 = off
    top_p: float = 1.0  # nucleus: smallest set with mass ≥ top_p; 1 = off
    max_new_tokens: int = 64  # hard cap; a round never overshoots it
    seed: int = 0  # seeds the one torch.Generator all randomness flows through
    stop_at_eos: bool = True  # stop after the tokenizer's end-of-sequence token
    inspect: bool = False  # attach top-k of p, q and the residual to every round (step inspector)
    # False: where the draft ships head_rows.json, draft over those rows only (q = 0 elsewhere,
    # still exact, much cheaper at a 49k vocabulary); True: always the draft's whole output head.
    full_draft_head: bool = False

    def validate(self) -> None:
        """Raise ValueError with a message a user can act on."""
        if not isinstance(self.gamma, int) or not 1 <= self.gamma <= MAX_GAMMA:
            raise ValueError(f"gamma (γ, tokens drafted per round) must be an integer from 1 to {MAX_GAMMA}, got {self.gamma!r}")
        if not self.temperature >= 0:  # also rejects NaN
            raise ValueError(f"temperature must be ≥ 0 (0 means greedy), got {self.temperature!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top-k must be an integer ≥ 0 (0 turns it off), got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top-p must be in (0, 1] (1 turns it off), got {self.top_p!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max new tokens must be a positive integer, got {self.max_new_tokens!r}")


class Proposal(NamedTuple):
    """What a drafter proposes for one round."""

    draft_ids: torch.Tensor  # (γ,)
    draft_probs: torch.Tensor  # (γ, vocab) q at each drafted position (one-hot for deterministic drafters)
    num_forwards: int  # draft model forwards spent


class Drafter(Protocol):
    """A drafting strategy; the speculative loop only talks to this interface.

    A draft model is one; prompt lookup (n-gram copying with one-hot q) would be another, and
    the same rejection rule keeps the output exact for either.
    """

    def prefill(self, prompt_ids: torch.Tensor) -> int:
        """See the prompt (1, n); return the number of forwards spent."""
        ...

    def propose(self, committed_ids: torch.Tensor, num_tokens: int) -> Proposal:
        """Draft num_tokens tokens after committed_ids (1, n)."""
        ...

    def rollback(self, num_committed: int) -> None:
        """Forget everything past the first num_committed tokens."""
        ...


def clock(device: torch.device) -> float:
    """perf_counter after the device has finished queued work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` positions. transformers 5's crop takes a negative count to drop."""
    excess = cache.get_seq_length() - length
    if excess > 0:
        cache.crop(-excess)


def forward_new_ids(model, all_ids: torch.Tensor, cache: DynamicCache, vocab_size: int, last_only: bool = False) -> torch.Tensor:
    """Run the ids the cache has not seen yet; return their logits (n_new, vocab) in float32.

    Logits are sliced to the shared vocabulary: checkpoints pad their embedding matrices
    (Qwen's 151936 rows for a 151665-token tokenizer) and the padding must never be sampled.
    `last_only` (a prefill) computes the output head at the last position alone: (1, vocab).
    """
    new_ids = all_ids[:, cache.get_seq_length() :]  # (1, n_new)
    keep = {"logits_to_keep": 1} if last_only else {}
    output = model(input_ids=new_ids, past_key_values=cache, use_cache=True, **keep)
    return output.logits[0, :, :vocab_size].float()  # (n_new, vocab)


class ModelDrafter:
    """Drafts with a small causal LM and its own KV cache.

    With `head_rows`, only those rows of the draft's output head are computed: at a 49k-token
    vocabulary the head is most of a small draft's step. q is then zero outside the rows, which
    the rejection rule handles like any other q: the output stays exactly the target's.
    """

    def __init__(self, model, vocab_size: int, to_probs: ProbsFn, generator: torch.Generator,
                 head_rows: torch.Tensor | None = None):
        self.model = model
        self.vocab_size = vocab_size
        self.to_probs = to_probs
        self.generator = generator
        self.cache = DynamicCache()
        self.head_rows = head_rows  # (rows,) sorted token ids, or None for the whole head
        if head_rows is not None:
            self.head_weight = model.get_output_embeddings().weight[head_rows]  # (rows, hidden)

    def prefill(self, prompt_ids: torch.Tensor) -> int:
        # Only the cache matters here: the head runs at the last position alone, not at every one.
        forward_new_ids(self.model, prompt_ids, self.cache, self.vocab_size, last_only=True)
        return 1

    def next_logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits (1, vocab) for the token after input_ids; -inf outside head_rows when set."""
        if self.head_rows is None:
            return forward_new_ids(self.model, input_ids, self.cache, self.vocab_size)[-1:]  # (1, vocab)
        new_ids = input_ids[:, self.cache.get_seq_length() :]  # (1, n_new)
        hidden = self.model.base_model(input_ids=new_ids, past_key_values=self.cache, use_cache=True).last_hidden_state
        row_logits = torch.nn.functional.linear(hidden[0, -1:], self.head_weight).float()  # (1, rows)
        logits = row_logits.new_full((1, self.vocab_size), float("-inf"))  # (1, vocab)
        logits[:, self.head_rows] = row_logits
        return logits

    def propose(self, committed_ids: torch.Tensor, num_tokens: int) -> Proposal:
        device = committed_ids.device
        input_ids = committed_ids
        drafted, probs = [], []
        for _ in range(num_tokens):
            logits = self.next_logits(input_ids).to(device)  # (1, vocab)
            if self.to_probs.greedy:
                # Same token the one-hot q would give, without building q each step: drafting
                # is the hot loop, and q is built once per round below.
                next_id = logits.argmax(-1)  # (1,)
            else:
                step_probs = self.to_probs(logits)  # (1, vocab)
                next_id = sample(step_probs, self.generator)  # (1,)
                probs.append(step_probs)
            drafted.append(next_id)
            input_ids = torch.cat([input_ids, next_id.view(1, 1)], dim=1)  # (1, n+1)
        draft_ids = torch.cat(drafted)  # (γ,)
        if self.to_probs.greedy:
            draft_probs = torch.nn.functional.one_hot(draft_ids, self.vocab_size).float()  # (γ, vocab)
        else:
            draft_probs = torch.cat(probs)  # (γ, vocab)
        return Proposal(draft_ids, draft_probs, num_tokens)

    def rollback(self, num_committed: int) -> None:
        crop_cache(self.cache, num_committed - 1)


def context_budget(pair: ModelPair, num_prompt_tokens: int, config: DecodeConfig) -> int:
    """New tokens this run may produce: max_new_tokens, capped by the models' context length."""
    room = pair.context_length - num_prompt_tokens
    if room < 1:
        raise ValueError(
            f"the prompt is {num_prompt_tokens} tokens long, but these models see at most "
            f"{pair.context_length} tokens: shorten the prompt to at most {pair.context_length - 1} tokens"
        )
    return min(config.max_new_tokens, room)


def check_prompt(prompt_ids: list[int], pair: ModelPair) -> None:
    if len(prompt_ids) == 0:
        raise ValueError("the prompt is empty: type some text to continue")
    bad = [i for i in prompt_ids if not 0 <= i < pair.vocab_size]
    if bad:
        raise ValueError(f"prompt token ids {bad[:5]} are outside the vocabulary (size {pair.vocab_size})")


def truncate_at_eos(ids: list[int], eos_id: int | None, stop_at_eos: bool) -> tuple[list[int], bool]:
    """Cut after the first EOS; report whether one was found."""
    if stop_at_eos and eos_id is not None and eos_id in ids:
        return ids[: ids.index(eos_id) + 1], True
    return ids, False


def start_run(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig):
    """Shared set-up of both lanes: validated inputs, budget, generator, probs function."""
    config.validate()
    check_prompt(prompt_ids, pair)
    budget = context_budget(pair, len(prompt_ids), config)
    generator = torch.Generator(device=pair.device).manual_seed(config.seed)
    to_probs = ProbsFn(config.temperature, config.top_k, config.top_p)
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=pair.device)  # (1, n)
    return budget, generator, to_probs, ids


def top_pairs(probs: torch.Tensor, k: int = INSPECT_TOP_K) -> tuple[tuple[int, float], ...]:
    values, indices = probs.topk(min(k, probs.shape[-1]))
    return tuple(zip(indices.tolist(), values.tolist()))


def describe_positions(proposal: Proposal, target_probs: torch.Tensor, verdict: Verdict) -> tuple[PositionDetail, ...]:
    """Top-k of q, p (and the residual where the correction was drawn) for the step inspector."""
    details = []
    for i in range(target_probs.shape[0]):
        draft_top = top_pairs(proposal.draft_probs[i]) if i < proposal.draft_probs.shape[0] else ()
        residual_top = top_pairs(verdict.residual) if (verdict.residual is not None and i == verdict.num_accepted) else ()
        details.append(PositionDetail(draft_top, top_pairs(target_probs[i]), residual_top))
    return tuple(details)


def describe_drafts(draft_ids: list[int], verdict: Verdict) -> tuple[DraftedToken, ...]:
    draft_probs, target_probs, accept_probs, uniforms = (
        t.tolist() for t in (verdict.draft_token_probs, verdict.target_token_probs, verdict.accept_probs, verdict.uniforms)
    )
    return tuple(
        DraftedToken(
            token_id=token_id,
            draft_prob=draft_probs[i],
            target_prob=target_probs[i],
            accept_prob=accept_probs[i],
            r=uniforms[i],
            accepted=i < verdict.num_accepted,
            decided=i <= verdict.num_accepted,
        )
        for i, token_id in enumerate(draft_ids)
    )


@torch.inference_mode()
def autoregressive_decode(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig) -> Iterator[Event]:
    """The fair baseline: the target alone, one token per forward, KV cache on, same sampling."""
    budget, generator, to_probs, ids = start_run(pair, prompt_ids, config)
    cache = DynamicCache()
    started = clock(pair.device)
    logits = forward_new_ids(pair.target, ids, cache, pair.vocab_size, last_only=True)  # (1, vocab)
    next_id = int(sample(to_probs(logits.to(pair.device)), generator))
    yield PrefillEvent("baseline", len(prompt_ids), next_id, clock(pair.device) - started, 1, 0)
    generated = [next_id]
    if truncate_at_eos(generated, pair.eos_id, config.stop_at_eos)[1]:
        yield FinishEvent("baseline", "eos", 1)
        return
    for round_index in range(budget - 1):
        started = clock(pair.device)
        ids = torch.cat([ids, ids.new_tensor([[next_id]])], dim=1)  # (1, n+1)
        logits = forward_new_ids(pair.target, ids, cache, pair.vocab_size)  # (1, vocab)
        next_id = int(sample(to_probs(logits.to(pair.device)), generator))
        step_s = clock(pair.device) - started
        generated.append(next_id)
        yield RoundEvent(
            "baseline", round_index, len(generated) - 1, 0, (), 0, next_id, "target", (next_id,), 0.0, step_s, 0, 1
        )
        if truncate_at_eos([next_id], pair.eos_id, config.stop_at_eos)[1]:
            yield FinishEvent("baseline", "eos", len(generated))
            return
    yield FinishEvent("baseline", "max_new_tokens" if budget == config.max_new_tokens else "context_length", len(generated))


@torch.inference_mode()
def speculative_decode(
    pair: ModelPair, prompt_ids: list[int], config: DecodeConfig, drafter: Drafter | None = None
) -> Iterator[Event]:
    """Exact speculative decoding: output distributed exactly as the target's (greedy: identical)."""
    budget, generator, to_probs, ids = start_run(pair, prompt_ids, config)
    head_rows = None if config.full_draft_head else pair.draft_head_rows
    drafter = drafter or ModelDrafter(pair.draft, pair.vocab_size, to_probs, generator, head_rows)
    target_cache = DynamicCache()

    started = clock(pair.device)
    logits = forward_new_ids(pair.target, ids, target_cache, pair.vocab_size, last_only=True)  # (1, vocab)
    next_id = int(sample(to_probs(logits.to(pair.device)), generator))
    num_draft_forwards = drafter.prefill(ids)
    yield PrefillEvent("speculative", len(prompt_ids), next_id, clock(pair.device) - started, 1, num_draft_forwards)
    ids = torch.cat([ids, ids.new_tensor([[next_id]])], dim=1)  # (1, n+1): committed ids
    num_generated = 1
    if truncate_at_eos([next_id], pair.eos_id, config.stop_at_eos)[1]:
        yield FinishEvent("speculative", "eos", 1)
        return

    round_index = 0
    while num_generated < budget:
        # A round yields up to γ+1 tokens; draft fewer near the end so it never overshoots.
        gamma = min(config.gamma, budget - num_generated - 1)
        started = clock(pair.device)
        proposal = drafter.propose(ids, gamma) if gamma > 0 else Proposal(ids.new_empty(0), None, 0)
        drafted_at = clock(pair.device)

        verify_ids = torch.cat([ids, proposal.draft_ids.view(1, -1)], dim=1)  # (1, n+γ)
        target_logits = forward_new_ids(pair.target, verify_ids, target_cache, pair.vocab_size)  # (γ+1, vocab)
        target_probs = to_probs(target_logits.to(pair.device))  # (γ+1, vocab)
        if gamma > 0:
            verdict = accept_or_resample(proposal.draft_ids, proposal.draft_probs, target_probs, generator)
        else:  # no room to draft: a plain target step, which is the bonus rule with γ = 0
            bonus_id = int(sample(target_probs, generator))
            empty = target_probs.new_empty(0)
            verdict = Verdict(0, bonus_id, True, empty, empty, empty, empty, None)
        draft_ids = proposal.draft_ids.tolist()
        new_ids = draft_ids[: verdict.num_accepted] + [verdict.next_id]
        ids = torch.cat([ids, ids.new_tensor([new_ids])], dim=1)  # (1, n')
        crop_cache(target_cache, ids.shape[1] - 1)
        drafter.rollback(ids.shape[1])
        verified_at = clock(pair.device)

        emitted, hit_eos = truncate_at_eos(new_ids, pair.eos_id, config.stop_at_eos)
        details = describe_positions(proposal, target_probs, verdict) if config.inspect and gamma > 0 else None
        yield RoundEvent(
            lane="speculative",
            round_index=round_index,
            position=num_generated,
            gamma=gamma,
            drafted=describe_drafts(draft_ids, verdict),
            num_accepted=verdict.num_accepted,
            next_id=verdict.next_id,
            next_kind="bonus" if verdict.is_bonus else "resample",
            emitted_ids=tuple(emitted),
            draft_s=drafted_at - started,
            verify_s=verified_at - drafted_at,
            num_draft_forwards=proposal.num_forwards,
            num_target_forwards=1,
            details=details,
        )
        num_generated += len(emitted)
        round_index += 1
        if hit_eos:
            yield FinishEvent("speculative", "eos", num_generated)
            return
    yield FinishEvent(
        "speculative", "max_new_tokens" if budget == config.max_new_tokens else "context_length", num_generated
    )


@torch.inference_mode()
def warm_up(pair: ModelPair) -> None:
    """A few throwaway forwards so first-call costs (allocation, kernel choice) are never timed."""
    ids = torch.arange(1, 5, device=pair.device).view(1, 4) % pair.vocab_size  # (1, 4)
    for model in (pair.target, pair.draft):
        if model is not None:
            cache = DynamicCache()
            forward_new_ids(model, ids, cache, pair.vocab_size)
            forward_new_ids(model, torch.cat([ids, ids[:, :1]], dim=1), cache, pair.vocab_size)
    clock(pair.device)


def decode_both(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig) -> Iterator[Event]:
    """Baseline, then speculative: one after the other, never concurrently, after a warm-up."""
    config.validate()
    check_prompt(prompt_ids, pair)
    context_budget(pair, len(prompt_ids), config)  # fail before any work if the prompt is too long
    warm_up(pair)
    yield from autoregressive_decode(pair, prompt_ids, config)
    yield from speculative_decode(pair, prompt_ids, config)
