"""The decoding engine: a fair autoregressive baseline and exact speculative decoding.

Both are generators of events (specviz.decoding.events). No threads, callbacks or prints in here: a consumer
that wants to stop simply stops iterating. Timings cover model work and sampling only, with CUDA synchronised
before the clock is read, so rendering between events never counts against either lane.

One speculative round, with committed ids c and lookahead γ (Leviathan et al. 2023):
  draft   x_1..x_γ ~ q, autoregressively                    (γ draft forwards)
  verify  p at γ+1 positions from one forward over [c_-1, x_1..x_γ]   (1 target forward)
  decide  accept while r < min(1, p/q); resample or bonus   (sampling.accept_or_resample)
  rollback both KV caches to the new committed length
A tree round (DecodeConfig.tree > 0) drafts a tree instead and checks every branch in the same one
forward (specviz.decoding.tree); a chain is a linear tree and a chain round's rival guesses a one-level one,
so every round is verified, decided, settled and told by the same code (specviz.decoding.rounds).
Invariant between rounds: each KV cache holds at most committed[:-1]; whatever it lacks is fed
on the next forward, so a fully accepted round needs no extra draft pass.
"""

from __future__ import annotations

import functools
import time
from typing import Iterator, Sequence

import torch
from transformers import DynamicCache

from specviz.catalogue import DEFAULT_LANES, LANE_INFO, drafter_info, resolve, run_lanes
from specviz.decoding.config import DecodeConfig, next_gamma
from specviz.decoding.drafters import DrafterFactory, prepare_draft_graphs, prepare_head_graphs
from specviz.decoding.events import Event, FinishEvent, PrefillEvent, RoundEvent, take_turns
from specviz.decoding.forward import forward_new_ids, forward_new_ids_with_hidden, target_cache_for, target_forward
from specviz.decoding.rounds import (AcceptRule, TreeRule, draft_branches, draft_chain, settle_round,
                                     verify_round)
from specviz.decoding.sampling import ProbsFn, accept_or_resample, accept_tree
from specviz.models.pairs import ModelPair
from specviz.models.slot_calls import prepare_pooled, run_rows
from specviz.models.slots import to_device, uses_slots


def clock(device: torch.device) -> float:
    """perf_counter after the device has finished queued work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def context_budget(pair: ModelPair, num_prompt_tokens: int, config: DecodeConfig) -> int:
    """New tokens this run may produce: max_new_tokens, capped by the models' context length."""
    room = pair.context_length - num_prompt_tokens
    if room < 1:
        raise ValueError(f"the prompt is {num_prompt_tokens} tokens long, but these models see at most "
                         f"{pair.context_length} tokens: shorten the prompt to at most "
                         f"{pair.context_length - 1} tokens")
    return min(config.max_new_tokens, room)


def longest_text(pair: ModelPair, num_prompt_tokens: int, config: DecodeConfig) -> int:
    """The most positions a run's caches hold: its prompt, its new tokens, a last round's tree or drafts."""
    return num_prompt_tokens + context_budget(pair, num_prompt_tokens, config) + max(config.tree, config.gamma) + 1


def check_run(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig) -> int:
    """Raise ValueError for bad settings or a bad or too long prompt, before any work; return the run's budget."""
    config.validate()
    if len(prompt_ids) == 0:
        raise ValueError("the prompt is empty: type some text to continue")
    bad = [i for i in prompt_ids if not 0 <= i < pair.vocab_size]
    if bad:
        raise ValueError(f"prompt token ids {bad[:5]} are outside the vocabulary (size {pair.vocab_size})")
    return context_budget(pair, len(prompt_ids), config)


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
    budget = check_run(pair, prompt_ids, config)
    generator = torch.Generator(device=pair.device).manual_seed(config.seed)
    to_probs = ProbsFn(config.temperature, config.top_k, config.top_p)
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=pair.device)  # (1, n)
    return budget, generator, to_probs, ids


@torch.inference_mode()
def autoregressive_decode(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig,
                          lane: str = "baseline") -> Iterator[Event]:
    """The fair baseline: the target alone, one token per forward, KV cache on, same sampling."""
    budget, generator, to_probs, ids = start_run(pair, prompt_ids, config)
    with target_cache_for(pair) as cache:
        started = clock(pair.device)
        logits = forward_new_ids(pair.target, ids, cache, pair.vocab_size, last_only=True)  # (1, vocab)
        next_id = int(to_probs.pick(logits.to(pair.device), generator))
        yield PrefillEvent(lane, len(prompt_ids), next_id, clock(pair.device) - started, 1, 0)
        generated = [next_id]
        if truncate_at_eos(generated, pair.eos_id, config.stop_at_eos)[1]:
            yield FinishEvent(lane, "eos", 1)
            return
        for round_index in range(budget - 1):
            started = clock(pair.device)
            ids = torch.cat([ids, to_device([[next_id]], ids.device)], dim=1)  # (1, n+1)
            logits = forward_new_ids(pair.target, ids, cache, pair.vocab_size)  # (1, vocab)
            next_id = int(to_probs.pick(logits.to(pair.device), generator))
            step_s = clock(pair.device) - started
            generated.append(next_id)
            yield RoundEvent(lane=lane, round_index=round_index, position=len(generated) - 1, gamma=0, nodes=(),
                             num_accepted=0, next_id=next_id, next_kind="target", emitted_ids=(next_id,), draft_s=0.0,
                             verify_s=step_s, num_draft_forwards=0, num_target_forwards=1)
            if truncate_at_eos([next_id], pair.eos_id, config.stop_at_eos)[1]:
                yield FinishEvent(lane, "eos", len(generated))
                return
        yield FinishEvent(lane, "max_new_tokens" if budget == config.max_new_tokens else "context_length", len(generated))


@torch.inference_mode()
def speculative_decode(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig,
                       drafter: DrafterFactory | None = None, accept_rule: AcceptRule = accept_or_resample,
                       lane: str = "speculative", tree_rule: TreeRule = accept_tree) -> Iterator[Event]:
    """Exact speculative decoding: output distributed exactly as the target's (greedy: identical).

    The drafter is config.drafter's unless a factory is given (tests record with one). Only the exactness lab swaps
    `accept_rule` (a chain's decision) or `tree_rule` (a tree's), for a deliberately wrong rule to watch fail.
    """
    budget, generator, to_probs, ids = start_run(pair, prompt_ids, config)
    if drafter is None:
        check_drafter(pair, config)
        drafter = resolve(drafter_info(config.drafter).drafter).build
    drafter = drafter(pair, config, to_probs, generator)
    with target_cache_for(pair, drafter) as target_cache:
        started = clock(pair.device)
        logits = target_forward(pair, drafter, ids, target_cache, last_only=True)  # (1, vocab)
        next_id = int(to_probs.pick(logits.to(pair.device), generator))
        num_draft_forwards = drafter.prefill(ids)
        yield PrefillEvent(lane, len(prompt_ids), next_id, clock(pair.device) - started, 1, num_draft_forwards)
        ids = torch.cat([ids, to_device([[next_id]], ids.device)], dim=1)  # (1, n+1): committed ids
        num_generated = 1
        if truncate_at_eos([next_id], pair.eos_id, config.stop_at_eos)[1]:
            yield FinishEvent(lane, "eos", 1)
            return

        tree_budget = config.tree if drafter.grows_trees else 0  # else chains (their rival guesses: one-level trees)
        draft = functools.partial(draft_branches, budget=tree_budget) if tree_budget else draft_chain
        round_index = 0
        planned_gamma = config.gamma
        while num_generated < budget:
            room = budget - num_generated - 1  # a round yields up to γ+1 tokens: near the end it drafts fewer, never overshoots
            started = clock(pair.device)
            drafts = draft(drafter, ids, min(planned_gamma, room), room)
            drafted_at = clock(pair.device)
            verified = verify_round(pair, drafter, ids, drafts, target_cache, to_probs, generator, accept_rule, tree_rule)
            ids, new_ids = settle_round(ids, verified, target_cache, drafter)
            verified_at = clock(pair.device)

            # the γ schedule compares the longest path the round could have accepted with the path it did
            planned_gamma = next_gamma(config, planned_gamma, drafts.depth, verified.verdict.num_accepted)
            emitted, hit_eos = truncate_at_eos(new_ids, pair.eos_id, config.stop_at_eos)
            yield verified.event(lane, round_index, num_generated, emitted, drafted_at - started, verified_at - drafted_at,
                                 config.inspect, to_probs.greedy)
            num_generated += len(emitted)
            round_index += 1
            if hit_eos:
                yield FinishEvent(lane, "eos", num_generated)
                return
        reason = "max_new_tokens" if budget == config.max_new_tokens else "context_length"
        yield FinishEvent(lane, reason, num_generated)


@torch.inference_mode()
def top2_logit_gap(pair: ModelPair, ids: list[int]) -> float:
    """The target's top-1 minus top-2 logit for the token after ids, from a plain 1-position
    forward: how near a tie the greedy choice was where two lanes parted."""
    input_ids = torch.tensor([ids], dtype=torch.long, device=pair.device)  # (1, n)
    logits = forward_new_ids(pair.target, input_ids, DynamicCache(), pair.vocab_size, last_only=True)  # (1, vocab)
    top2 = logits[0].topk(2).values  # (2,)
    return float(top2[0] - top2[1])


@torch.inference_mode()
def warm_up(pair: ModelPair, longest: int = 0, chain_steps: int = 0, target_caches: int = 1) -> None:
    """A few throwaway forwards so first-call costs (allocation, kernel choice) are never timed; where the
    target runs in slots, `target_caches` of its caches made (one per lane alive at once) and on CUDA the graphs
    of every call a run of up to `longest` positions meets, the head's drafting chains up to `chain_steps` (γ − 1)
    among them."""
    if longest and uses_slots(pair.target):
        filler = torch.zeros(1, 1, dtype=torch.long, device=pair.device)  # (1, 1)
        variants = (None,) + ((tuple(pair.head.target_layers),) if pair.head is not None else ())
        steps = [functools.partial(run_rows, pair.target, new_ids=filler, layers=layers) for layers in variants]
        prepare_pooled(pair.target, pair.context_length, pair.device, longest, steps, copies=target_caches)
        if pair.head is not None:
            prepare_head_graphs(pair, longest, chain_steps)
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


def decode_lanes(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig, lanes: Sequence[str] = DEFAULT_LANES) -> Iterator[Event]:
    """The lanes after a warm-up: those the engine steps (LaneInfo.in_turns) in turns (take_turns), never two
    forwards at once, then each other lane alone (transformers' generate(), one call timed end to end)."""
    run_lanes(lanes)  # raises for a lane the catalogue lacks
    check_run(pair, prompt_ids, config)
    if any(LANE_INFO[lane].drafts for lane in lanes):
        check_drafter(pair, config)
    # (pair, prompt_ids, config, lane=name) → events, resolved by name from the catalogue when a run asks for it,
    # so the reference lane (built on this module) needs no import here
    decoders = [(lane, resolve(LANE_INFO[lane].decoder)) for lane in lanes]
    in_turns = [(lane, decode) for lane, decode in decoders if LANE_INFO[lane].in_turns]
    warm_up(pair, longest_text(pair, len(prompt_ids), config), config.gamma - 1, target_caches=max(1, len(in_turns)))
    yield from take_turns([(lane, decode(pair, prompt_ids, config, lane=lane)) for lane, decode in in_turns])
    for lane, decode in decoders:
        if not LANE_INFO[lane].in_turns:
            yield from decode(pair, prompt_ids, config, lane=lane)
