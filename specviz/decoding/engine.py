"""The decoding engine: a fair autoregressive baseline and exact speculative decoding.

Both are generators of events (specviz.decoding.events). No threads, callbacks or prints in here: a
consumer that wants to stop simply stops iterating. Timings cover model work and sampling
only, with CUDA synchronised before the clock is read, so rendering between events never
counts against either lane.

One speculative round, with committed ids c and lookahead γ (Leviathan et al. 2023):
  draft   x_1..x_γ ~ q, autoregressively                    (γ draft forwards)
  verify  p at γ+1 positions from one forward over [c_-1, x_1..x_γ]   (1 target forward)
  decide  accept while r < min(1, p/q); resample or bonus   (sampling.accept_or_resample)
  rollback both KV caches to the new committed length
A tree round (DecodeConfig.tree > 0) drafts a tree instead and checks every branch in the same one
forward (specviz.decoding.tree); a chain round's rival guesses are its one-level case, judged the same way.
Invariant between rounds: each KV cache holds at most committed[:-1]; whatever it lacks is fed
on the next forward, so a fully accepted round needs no extra draft pass.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch
from transformers import DynamicCache

from specviz.catalogue import DEFAULT_LANES, LANE_INFO, LANE_NAMES, drafter_info, resolve
from specviz.decoding.config import DecodeConfig, next_gamma
from specviz.decoding.describe import describe_drafts, describe_positions
from specviz.decoding.drafters import Drafter, DrafterFactory, Proposal, prepare_draft_graphs
from specviz.decoding.events import Event, FinishEvent, PrefillEvent, RoundEvent
from specviz.decoding.forward import (crop_cache, forward_new_ids, forward_new_ids_with_hidden, row_confidences,
                                      target_cache_for, target_forward)
from specviz.decoding.head import prepare_head_graphs
from specviz.decoding.sampling import ProbsFn, Verdict, accept_or_resample, accept_tree, sample
from specviz.decoding.tree import DraftTree, TreeRule, VerifiedTree, draft_tree, settle_tree, verify_tree
from specviz.models.pairs import ModelPair
from specviz.models.slot_calls import prepare_pooled, run_rows
from specviz.models.slots import uses_slots

AcceptRule = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator], Verdict]

def clock(device: torch.device) -> float:
    """perf_counter after the device has finished queued work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def context_budget(pair: ModelPair, num_prompt_tokens: int, config: DecodeConfig) -> int:
    """New tokens this run may produce: max_new_tokens, capped by the models' context length."""
    room = pair.context_length - num_prompt_tokens
    if room < 1:
        raise ValueError(
            f"the prompt is {num_prompt_tokens} tokens long, but these models see at most "
            f"{pair.context_length} tokens: shorten the prompt to at most {pair.context_length - 1} tokens"
        )
    return min(config.max_new_tokens, room)


def longest_text(pair: ModelPair, num_prompt_tokens: int, config: DecodeConfig) -> int:
    """The most positions a run's caches hold: its prompt, its new tokens, a last round's tree or drafts."""
    return num_prompt_tokens + context_budget(pair, num_prompt_tokens, config) + max(config.tree, config.gamma) + 1


def check_prompt(prompt_ids: list[int], pair: ModelPair) -> None:
    if len(prompt_ids) == 0:
        raise ValueError("the prompt is empty: type some text to continue")
    bad = [i for i in prompt_ids if not 0 <= i < pair.vocab_size]
    if bad:
        raise ValueError(f"prompt token ids {bad[:5]} are outside the vocabulary (size {pair.vocab_size})")


def check_drafter(pair: ModelPair, config: DecodeConfig) -> None:
    """Raise ValueError when the pair lacks what config.drafter needs (a draft model, a head)."""
    reason = pair.lacks_for(drafter_info(config.drafter))
    if reason:
        raise ValueError(reason)


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


def rivals_tree(proposal: Proposal, rivals: tuple[tuple[int, float], ...]) -> DraftTree:
    """A chain round's unsure first draft and its rival guesses as the one-level tree they are: the drafter's
    own pick first, then its rivals, all children of the text's last id, each with the drafter's probability.
    The tree's verify and walk judge them (greedy: the one that is the target's own pick wins)."""
    guesses = [(int(proposal.draft_ids[0]), proposal.confidences[0]), *rivals]
    node_ids = proposal.draft_ids.new_tensor([token_id for token_id, _ in guesses])  # (1+k,)
    return DraftTree(node_ids, (-1,) * len(guesses), tuple(prob for _, prob in guesses), (-1,) * len(guesses),
                     proposal.num_forwards, rivals=True, stopped_unsure=proposal.stopped_unsure)


@dataclass(frozen=True)
class VerifiedRound:
    """One round once the target has judged it: what was drafted, the verify's rows, the verdict."""

    proposal: Proposal  # the drafts judged
    num_drafted: int  # γ' drafted this round (a copying drafter may find fewer than asked, or none)
    target_logits: torch.Tensor  # (γ'+1, vocab): the verify's rows
    target_probs: torch.Tensor  # (γ'+1, vocab): p at each
    verdict: Verdict

    def event(self, lane: str, round_index: int, position: int, emitted: list[int], draft_s: float, verify_s: float,
              inspect: bool) -> RoundEvent:
        """The round as the stream tells it; built after the clock stopped, so describing costs no lane time."""
        gamma, proposal, verdict = self.num_drafted, self.proposal, self.verdict
        details = (describe_positions(proposal.draft_ids.tolist(), proposal.draft_probs, self.target_probs,
                                      verdict.num_accepted, verdict.next_id, verdict.residual)
                   if inspect and gamma > 0 else None)
        # The target's own certainty at each drafted position (rows 0..γ−1 of the verify), for the chart of
        # acceptance against it.
        target_confidences = row_confidences(self.target_logits[:gamma]).tolist() if gamma > 0 else None
        return RoundEvent(
            lane=lane,
            round_index=round_index,
            position=position,
            gamma=gamma,
            drafted=describe_drafts(proposal.draft_ids.tolist(), verdict, proposal.confidences, target_confidences),
            num_accepted=verdict.num_accepted,
            next_id=verdict.next_id,
            next_kind="bonus" if verdict.is_bonus else "resample",
            emitted_ids=tuple(emitted),
            draft_s=draft_s,
            verify_s=verify_s,
            num_draft_forwards=proposal.num_forwards,
            num_target_forwards=1,
            details=details,
            stopped_unsure=proposal.stopped_unsure,
        )


def draft_round(drafter: Drafter, ids: torch.Tensor, gamma: int, room: int) -> Proposal | DraftTree:
    """Up to γ drafts after the committed ids (1, n); an unsure first draft with rival guesses becomes their
    one-level tree, its rivals cut to the `room` a round's drafts have (they take cache slots as drafts do)."""
    proposal = drafter.propose(ids, gamma) if gamma > 0 else Proposal(ids.new_empty(0), None, 0)
    rivals = proposal.rivals[: max(0, room - proposal.draft_ids.shape[0])]
    return rivals_tree(proposal, rivals) if rivals else proposal._replace(rivals=())


def verify_round(pair: ModelPair, drafter: Drafter, ids: torch.Tensor, proposal: Proposal, target_cache: DynamicCache,
                 to_probs: ProbsFn, generator: torch.Generator, accept_rule: AcceptRule = accept_or_resample) -> VerifiedRound:
    """One target forward over the drafts, then the accept rule left to right."""
    num_drafted = proposal.draft_ids.shape[0]
    verify_ids = torch.cat([ids, proposal.draft_ids.view(1, -1)], dim=1)  # (1, n+γ)
    target_logits = target_forward(pair, drafter, verify_ids, target_cache)  # (γ+1, vocab)
    target_probs = to_probs(target_logits.to(pair.device))  # (γ+1, vocab)
    if num_drafted > 0:
        verdict = accept_rule(proposal.draft_ids, proposal.draft_probs, target_probs, generator)
    else:  # nothing drafted (no room, or no match): a plain target step, the bonus rule with γ = 0
        empty = target_probs.new_empty(0)
        verdict = Verdict(0, int(sample(target_probs, generator)), True, empty, empty, empty, empty, None)
    return VerifiedRound(proposal, num_drafted, target_logits, target_probs, verdict)


def verify_drafts(pair: ModelPair, drafter: Drafter, ids: torch.Tensor, drafted: Proposal | DraftTree,
                  target_cache: DynamicCache, to_probs: ProbsFn, generator: torch.Generator,
                  accept_rule: AcceptRule = accept_or_resample, tree_rule: TreeRule = accept_tree) -> VerifiedRound | VerifiedTree:
    """A chain's verify, or the tree's where the round drafted rival guesses (a one-level tree)."""
    if isinstance(drafted, DraftTree):
        return verify_tree(pair, drafter, ids, drafted, target_cache, to_probs, generator, tree_rule)
    return verify_round(pair, drafter, ids, drafted, target_cache, to_probs, generator, accept_rule)


def settle_round(ids: torch.Tensor, verified: VerifiedRound | VerifiedTree, target_cache: DynamicCache,
                 drafter: Drafter) -> tuple[torch.Tensor, list[int]]:
    """Commit the accepted drafts and the next token; roll both caches back to the committed length.
    Returns (committed ids (1, n'), the round's new ids). A one-level tree of rival guesses settles as a tree."""
    if isinstance(verified, VerifiedTree):
        return settle_tree(ids, verified, target_cache, drafter)
    new_ids = verified.proposal.draft_ids.tolist()[: verified.verdict.num_accepted] + [verified.verdict.next_id]
    ids = torch.cat([ids, ids.new_tensor([new_ids])], dim=1)  # (1, n')
    crop_cache(target_cache, ids.shape[1] - 1)
    drafter.rollback(ids.shape[1])
    return ids, new_ids


def round_steps(config: DecodeConfig, drafter: Drafter, accept_rule: AcceptRule,
                tree_rule: TreeRule = accept_tree) -> tuple[Callable, Callable, Callable]:
    """A round's draft, verify and settle: a tree's (specviz.decoding.tree) where the run asks for one
    and the drafter grows trees, else a chain's (whose rival guesses are a one-level tree, judged as one)."""
    if config.tree and drafter.grows_trees:
        verify = functools.partial(verify_tree, tree_rule=tree_rule)
        return functools.partial(draft_tree, budget=config.tree), verify, settle_tree
    return draft_round, functools.partial(verify_drafts, accept_rule=accept_rule, tree_rule=tree_rule), settle_round


@torch.inference_mode()
def autoregressive_decode(
    pair: ModelPair, prompt_ids: list[int], config: DecodeConfig, lane: str = "baseline"
) -> Iterator[Event]:
    """The fair baseline: the target alone, one token per forward, KV cache on, same sampling."""
    budget, generator, to_probs, ids = start_run(pair, prompt_ids, config)
    with target_cache_for(pair) as cache:
        started = clock(pair.device)
        logits = forward_new_ids(pair.target, ids, cache, pair.vocab_size, last_only=True)  # (1, vocab)
        next_id = int(sample(to_probs(logits.to(pair.device)), generator))
        yield PrefillEvent(lane, len(prompt_ids), next_id, clock(pair.device) - started, 1, 0)
        generated = [next_id]
        if truncate_at_eos(generated, pair.eos_id, config.stop_at_eos)[1]:
            yield FinishEvent(lane, "eos", 1)
            return
        for round_index in range(budget - 1):
            started = clock(pair.device)
            ids = torch.cat([ids, ids.new_tensor([[next_id]])], dim=1)  # (1, n+1)
            logits = forward_new_ids(pair.target, ids, cache, pair.vocab_size)  # (1, vocab)
            next_id = int(sample(to_probs(logits.to(pair.device)), generator))
            step_s = clock(pair.device) - started
            generated.append(next_id)
            yield RoundEvent(lane=lane, round_index=round_index, position=len(generated) - 1, gamma=0, drafted=(),
                             num_accepted=0, next_id=next_id, next_kind="target", emitted_ids=(next_id,), draft_s=0.0,
                             verify_s=step_s, num_draft_forwards=0, num_target_forwards=1)
            if truncate_at_eos([next_id], pair.eos_id, config.stop_at_eos)[1]:
                yield FinishEvent(lane, "eos", len(generated))
                return
        yield FinishEvent(lane, "max_new_tokens" if budget == config.max_new_tokens else "context_length", len(generated))


@torch.inference_mode()
def speculative_decode(
    pair: ModelPair,
    prompt_ids: list[int],
    config: DecodeConfig,
    drafter: DrafterFactory | None = None,
    accept_rule: AcceptRule = accept_or_resample,
    lane: str = "speculative",
    tree_rule: TreeRule = accept_tree,
) -> Iterator[Event]:
    """Exact speculative decoding: output distributed exactly as the target's (greedy: identical).

    The drafter is config.drafter's from the registry unless a factory is given (tests record
    with one). `accept_rule` is the verification step (`tree_rule` a tree round's); only the exactness lab
    swaps them, for a deliberately wrong rule the learner can watch fail.
    """
    budget, generator, to_probs, ids = start_run(pair, prompt_ids, config)
    if drafter is None:
        check_drafter(pair, config)
        drafter = resolve(drafter_info(config.drafter).drafter).build
    drafter = drafter(pair, config, to_probs, generator)
    with target_cache_for(pair, drafter) as target_cache:
        started = clock(pair.device)
        logits = target_forward(pair, drafter, ids, target_cache, last_only=True)  # (1, vocab)
        next_id = int(sample(to_probs(logits.to(pair.device)), generator))
        num_draft_forwards = drafter.prefill(ids)
        yield PrefillEvent(lane, len(prompt_ids), next_id, clock(pair.device) - started, 1, num_draft_forwards)
        ids = torch.cat([ids, ids.new_tensor([[next_id]])], dim=1)  # (1, n+1): committed ids
        num_generated = 1
        if truncate_at_eos([next_id], pair.eos_id, config.stop_at_eos)[1]:
            yield FinishEvent(lane, "eos", 1)
            return

        draft, verify, settle = round_steps(config, drafter, accept_rule, tree_rule)
        round_index = 0
        planned_gamma = config.gamma
        while num_generated < budget:
            room = budget - num_generated - 1  # a round yields up to γ+1 tokens: near the end it drafts fewer, never overshoots
            started = clock(pair.device)
            proposal = draft(drafter, ids, min(planned_gamma, room), room)
            drafted_at = clock(pair.device)
            verified = verify(pair, drafter, ids, proposal, target_cache, to_probs, generator)
            ids, new_ids = settle(ids, verified, target_cache, drafter)
            verified_at = clock(pair.device)

            planned_gamma = next_gamma(config, planned_gamma, verified.num_drafted, verified.verdict.num_accepted)
            emitted, hit_eos = truncate_at_eos(new_ids, pair.eos_id, config.stop_at_eos)
            yield verified.event(lane, round_index, num_generated, emitted, drafted_at - started, verified_at - drafted_at,
                                 config.inspect)
            num_generated += len(emitted)
            round_index += 1
            if hit_eos:
                yield FinishEvent(lane, "eos", num_generated)
                return
        yield FinishEvent(
            lane, "max_new_tokens" if budget == config.max_new_tokens else "context_length", num_generated
        )


@torch.inference_mode()
def top2_logit_gap(pair: ModelPair, ids: list[int]) -> float:
    """The target's top-1 minus top-2 logit for the token after ids, from a plain 1-position
    forward: how near a tie the greedy choice was where two lanes parted."""
    input_ids = torch.tensor([ids], dtype=torch.long, device=pair.device)  # (1, n)
    logits = forward_new_ids(pair.target, input_ids, DynamicCache(), pair.vocab_size, last_only=True)  # (1, vocab)
    top2 = logits[0].topk(2).values  # (2,)
    return float(top2[0] - top2[1])


@torch.inference_mode()
def warm_up(pair: ModelPair, longest: int = 0) -> None:
    """A few throwaway forwards so first-call costs (allocation, kernel choice) are never timed; where the
    target runs in slots on CUDA, the graphs of every call a run of up to `longest` positions meets."""
    if longest and uses_slots(pair.target):
        filler = torch.zeros(1, 1, dtype=torch.long, device=pair.device)  # (1, 1)
        variants = (None,) + ((tuple(pair.head.target_layers),) if pair.head is not None else ())
        steps = [functools.partial(run_rows, pair.target, new_ids=filler, layers=layers) for layers in variants]
        prepare_pooled(pair.target, pair.context_length, pair.device, longest, steps)
        if pair.head is not None:
            prepare_head_graphs(pair, longest)
        if pair.draft is not None:
            prepare_draft_graphs(pair, longest)
    ids = torch.arange(1, 5, device=pair.device).view(1, 4) % pair.vocab_size  # (1, 4)
    for model in (pair.target, pair.draft):
        if model is not None:
            cache = DynamicCache()
            forward_new_ids(model, ids, cache, pair.vocab_size)
            forward_new_ids(model, torch.cat([ids, ids[:, :1]], dim=1), cache, pair.vocab_size)
    if pair.head is not None:  # the head drafter's layer, on the target's states for the same ids
        _, hidden = forward_new_ids_with_hidden(pair.target, ids, DynamicCache(), pair.vocab_size,
                                                layers=pair.head.target_layers)  # (4, d·(1+n))
        embeddings = pair.target.get_input_embeddings()(ids)  # (1, 4, d)
        pair.head(hidden.unsqueeze(0), embeddings, DynamicCache())
    clock(pair.device)


# The lanes and their decoders are declared in the catalogue; a decoder is resolved by name when a run
# asks for it, so the reference lane (built on this module) needs no import here.


def lane_decoder(name: str) -> Callable[..., Iterator[Event]]:
    """The decoder behind a lane name: (pair, prompt_ids, config, lane=name) → events."""
    if name not in LANE_INFO:
        raise ValueError(f"unknown lane {name!r}; choose from: {', '.join(LANE_NAMES)}")
    return resolve(LANE_INFO[name].decoder)


def decode_lanes(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig, lanes: Sequence[str] = DEFAULT_LANES) -> Iterator[Event]:
    """The lanes one after another, never concurrently, after a warm-up: no lane's timing
    ever shares the machine with another's."""
    config.validate()
    check_prompt(prompt_ids, pair)
    context_budget(pair, len(prompt_ids), config)  # fail before any work if the prompt is too long
    if any(LANE_INFO[lane].drafts for lane in lanes if lane in LANE_INFO):
        check_drafter(pair, config)
    decoders = [(lane, lane_decoder(lane)) for lane in lanes]
    warm_up(pair, longest_text(pair, len(prompt_ids), config))
    for lane, decode in decoders:
        yield from decode(pair, prompt_ids, config, lane=lane)
