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
Invariant between rounds: each KV cache holds at most committed[:-1]; whatever it lacks is fed
on the next forward, so a fully accepted round needs no extra draft pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch
from transformers import DynamicCache

from specviz.catalogue import DEFAULT_DRAFTER, DEFAULT_LANES, LANE_INFO, LANE_NAMES, drafter_info, resolve
from specviz.decoding.drafters import MAX_NGRAM, Drafter, DrafterFactory, Proposal
from specviz.decoding.forward import crop_cache, forward_new_ids, forward_new_ids_with_hidden, move_cache_position
from specviz.decoding.events import DraftedToken, Event, FinishEvent, PositionDetail, PrefillEvent, RoundEvent
from specviz.models.pairs import ModelPair
from specviz.decoding.sampling import ProbsFn, Verdict, accept_or_resample, sample

AcceptRule = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator], Verdict]

MAX_GAMMA = 16
MAX_RIVALS = 4  # rival guesses beside an unsure first draft: each more lengthens every such verify for rarer wins
MAX_TEMPERATURE = 10.0  # far past any useful setting: at 10 sampling is all but uniform
INSPECT_TOP_K = 8  # tokens shown per distribution in the step inspector
GAMMA_SCHEDULES = ("constant", "heuristic")


@dataclass(frozen=True)
class DecodeConfig:
    """Settings shared by both lanes, so the baseline is decoded exactly like the target lane."""

    gamma: int = 3  # tokens drafted per round (γ), the default pair's measured best; ignored by the baseline
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
    drafter: str = DEFAULT_DRAFTER  # a name in catalogue.DRAFTER_INFO
    ngram: int = 3  # prompt lookup: longest trailing n-gram it looks for (it tries shorter ones too)
    # Draft only while sure: a round stops drafting after a token whose draft top probability
    # (temperature 1) is below this; 0 = always draft γ (as transformers' assistant_confidence_threshold).
    # 0.5 won the bench on the default pair (README): a verify of fewer tokens costs less here.
    draft_confidence: float = 0.5
    # "constant": every round drafts γ; "heuristic": transformers' schedule for assistant models,
    # which starts at γ, adds 2 after a round whose drafts were all accepted and takes 1 away otherwise.
    gamma_schedule: str = "constant"
    # Greedy only: where the drafter is unsure of a round's first token (below draft_confidence), also
    # offer its next `rivals` likeliest tokens there, judged in the same verify (a one-level draft
    # tree, after EAGLE-2): the target takes whichever is its own choice. 0 = off. 2 won the bench on
    # the default pair's held-out prompts (1.29× → 1.41×) and tied on the examples (README).
    rivals: int = 2

    def validate(self) -> None:
        """Raise ValueError with a message a user can act on."""
        if not isinstance(self.gamma, int) or not 1 <= self.gamma <= MAX_GAMMA:
            raise ValueError(f"gamma (γ, tokens drafted per round) must be an integer from 1 to {MAX_GAMMA}, got {self.gamma!r}")
        if not 0 <= self.temperature <= MAX_TEMPERATURE:  # also rejects NaN and infinity
            raise ValueError(f"temperature must be from 0 (greedy) to {MAX_TEMPERATURE}, got {self.temperature!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top-k must be an integer ≥ 0 (0 turns it off), got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top-p must be in (0, 1] (1 turns it off), got {self.top_p!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max new tokens must be a positive integer, got {self.max_new_tokens!r}")
        drafter_info(self.drafter)  # raises for an unknown name, listing the known ones
        if not isinstance(self.ngram, int) or not 1 <= self.ngram <= MAX_NGRAM:
            raise ValueError(f"the n-gram size of prompt lookup must be an integer from 1 to {MAX_NGRAM}, got {self.ngram!r}")
        if self.gamma_schedule not in GAMMA_SCHEDULES:
            raise ValueError(f"unknown γ schedule {self.gamma_schedule!r}; choose one of: {', '.join(GAMMA_SCHEDULES)}")
        if not isinstance(self.rivals, int) or not 0 <= self.rivals <= MAX_RIVALS:
            raise ValueError(f"rival guesses must be an integer from 0 (off) to {MAX_RIVALS}, got {self.rivals!r}")
        if not 0 <= self.draft_confidence < 1:  # also rejects NaN
            raise ValueError(f"the draft confidence threshold must be from 0 (off) to below 1, got {self.draft_confidence!r}")


def next_gamma(config: DecodeConfig, gamma: int, num_drafted: int, num_accepted: int) -> int:
    """The γ of the next round: config.gamma always, or transformers' heuristic schedule."""
    if config.gamma_schedule == "constant" or num_drafted == 0:
        return gamma
    return min(gamma + 2, MAX_GAMMA) if num_accepted == num_drafted else max(gamma - 1, 1)


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


def top_pairs(probs: torch.Tensor, k: int = INSPECT_TOP_K, keep: tuple[int, ...] = ()) -> tuple[tuple[int, float], ...]:
    """The k likeliest (id, probability), then any id of `keep` not among them: the tokens this
    round actually drafted and emitted, whose probabilities the inspector must always show."""
    values, indices = probs.topk(min(k, probs.shape[-1]))
    pairs = list(zip(indices.tolist(), values.tolist()))
    shown = {token_id for token_id, _ in pairs}
    pairs += [(token_id, float(probs[token_id])) for token_id in dict.fromkeys(keep) if token_id not in shown]
    return tuple(pairs)


def describe_positions(proposal: Proposal, target_probs: torch.Tensor, verdict: Verdict) -> tuple[PositionDetail, ...]:
    """Top-k of q, p (and the residual where the correction was drawn) for the step inspector,
    always with the drafted token and the target's own token at their positions."""
    draft_ids = proposal.draft_ids.tolist()
    details = []
    for i in range(target_probs.shape[0]):
        keep = tuple(draft_ids[i : i + 1]) + ((verdict.next_id,) if i == verdict.num_accepted else ())
        draft_top = top_pairs(proposal.draft_probs[i], keep=keep) if i < proposal.draft_probs.shape[0] else ()
        residual_top = (
            top_pairs(verdict.residual, keep=keep) if (verdict.residual is not None and i == verdict.num_accepted) else ()
        )
        details.append(PositionDetail(draft_top, top_pairs(target_probs[i], keep=keep), residual_top))
    return tuple(details)


def top_probability(logits: torch.Tensor) -> torch.Tensor:
    """Each row's top probability at temperature 1: a model's confidence, whatever the run samples with."""
    return torch.softmax(logits.float(), dim=-1).amax(dim=-1)  # (rows,)


def describe_drafts(draft_ids: list[int], verdict: Verdict, confidences: tuple[float, ...] | None,
                    target_confidences: list[float] | None = None) -> tuple[DraftedToken, ...]:
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
            draft_confidence=None if confidences is None else confidences[i],
            target_confidence=None if target_confidences is None else target_confidences[i],
        )
        for i, token_id in enumerate(draft_ids)
    )


def target_forward(pair: ModelPair, drafter: Drafter, all_ids: torch.Tensor, cache: DynamicCache,
                   last_only: bool = False, num_rivals: int = 0) -> torch.Tensor:
    """The target's logits for the ids its cache lacks; a drafter that reads the target also gets
    the hidden states of those positions (the final ones, then those of the lower layers it names in
    `target_layers`), from this same forward (no extra target pass)."""
    if not getattr(drafter, "reads_target", False):
        return forward_new_ids(pair.target, all_ids, cache, pair.vocab_size, last_only=last_only, num_rivals=num_rivals)
    start = cache.get_seq_length()
    logits, hidden = forward_new_ids_with_hidden(pair.target, all_ids, cache, pair.vocab_size, last_only=last_only,
                                                 layers=drafter.target_layers, num_rivals=num_rivals)
    drafter.observe_target(hidden, start)  # (n_new, d·(1+n)) for positions start..
    return logits


def first_guesses(proposal: Proposal) -> list[tuple[int, float]]:
    """A rival round's guesses for its first position, the drafter's own pick first: (id, its probability)."""
    return [(int(proposal.draft_ids[0]), proposal.confidences[0]), *proposal.rivals]


def take_rival(proposal: Proposal, guesses: list[tuple[int, float]],
               target_probs: torch.Tensor) -> tuple[int, Proposal, torch.Tensor]:
    """Greedy: of the first draft and its rivals, the one that is the target's own choice at that
    position (its argmax) becomes the round's one draft, with the verify's rows for it: (its index
    among first_guesses, the proposal of it alone, rows (2, vocab)). Where none is, the first draft
    stays, and the rule rejects it as ever."""
    guessed_ids = [token_id for token_id, _ in guesses]
    choice = int(target_probs[0].argmax())
    taken = guessed_ids.index(choice) if choice in guessed_ids else 0
    if taken == 0:
        return 0, proposal, target_probs[:2]  # (2, vocab)
    token_id, confidence = guesses[taken]
    draft_ids = proposal.draft_ids.new_tensor([token_id])  # (1,)
    draft_probs = torch.nn.functional.one_hot(draft_ids, target_probs.shape[-1]).float()  # (1, vocab)
    chosen = proposal._replace(draft_ids=draft_ids, draft_probs=draft_probs, confidences=(confidence,))
    return taken, chosen, target_probs[[0, 1 + taken]]  # (2, vocab)


def describe_rivals(guesses: list[tuple[int, float]], taken: int, target_probs: torch.Tensor) -> tuple[DraftedToken, ...]:
    """The first guesses the target did not take, each judged against its first row (one-hot when
    greedy): the round's rejected rivals, or the drafter's own pick where a rival won."""
    first = target_probs[0]  # (vocab,)
    return tuple(
        DraftedToken(token_id, 1.0, float(first[token_id]), float(first[token_id]), 0.0, False, True, confidence)
        for i, (token_id, confidence) in enumerate(guesses) if i != taken
    )


@torch.inference_mode()
def autoregressive_decode(
    pair: ModelPair, prompt_ids: list[int], config: DecodeConfig, lane: str = "baseline"
) -> Iterator[Event]:
    """The fair baseline: the target alone, one token per forward, KV cache on, same sampling."""
    budget, generator, to_probs, ids = start_run(pair, prompt_ids, config)
    cache = DynamicCache()
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
        yield RoundEvent(
            lane, round_index, len(generated) - 1, 0, (), 0, next_id, "target", (next_id,), 0.0, step_s, 0, 1
        )
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
) -> Iterator[Event]:
    """Exact speculative decoding: output distributed exactly as the target's (greedy: identical).

    The drafter is config.drafter's from the registry unless a factory is given (tests record
    with one). `accept_rule` is the verification step; only the exactness lab swaps it, for a
    deliberately wrong rule the learner can watch fail.
    """
    budget, generator, to_probs, ids = start_run(pair, prompt_ids, config)
    if drafter is None:
        check_drafter(pair, config)
        drafter = resolve(drafter_info(config.drafter).factory)
    drafter = drafter(pair, config, to_probs, generator)
    target_cache = DynamicCache()

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

    round_index = 0
    planned_gamma = config.gamma
    while num_generated < budget:
        # A round yields up to γ+1 tokens; draft fewer near the end so it never overshoots.
        gamma = min(planned_gamma, budget - num_generated - 1)
        started = clock(pair.device)
        proposal = drafter.propose(ids, gamma) if gamma > 0 else Proposal(ids.new_empty(0), None, 0)
        gamma = proposal.draft_ids.shape[0]  # a copying drafter may find fewer tokens, or none
        if proposal.rivals:  # they take cache slots as drafts do: never past the room a round's drafts have
            proposal = proposal._replace(rivals=proposal.rivals[: max(0, budget - num_generated - 1 - gamma)])
        drafted_at = clock(pair.device)

        # Rivals of the first draft ride along at its position (forward.rival_layout): one verify judges all.
        guesses = first_guesses(proposal) if proposal.rivals else []
        rival_ids = ids.new_tensor([[token_id for token_id, _ in guesses[1:]]])  # (1, k)
        verify_ids = torch.cat([ids, proposal.draft_ids.view(1, -1), rival_ids], dim=1)  # (1, n+γ+k)
        target_logits = target_forward(pair, drafter, verify_ids, target_cache, num_rivals=len(guesses))  # (γ+1+k, vocab)
        target_probs = to_probs(target_logits.to(pair.device))  # (γ+1+k, vocab)
        taken, rivals = 0, ()
        if guesses:  # from here on the round is the one guess the target took (or the first draft), as a chain
            taken, chosen, chosen_probs = take_rival(proposal, guesses, target_probs)
            rivals = describe_rivals(guesses, taken, target_probs)
            proposal, target_probs = chosen, chosen_probs  # target_probs: (2, vocab)
        if gamma > 0:
            verdict = accept_rule(proposal.draft_ids, proposal.draft_probs, target_probs, generator)
        else:  # nothing drafted (no room, or no match): a plain target step, the bonus rule with γ = 0
            bonus_id = int(sample(target_probs, generator))
            empty = target_probs.new_empty(0)
            verdict = Verdict(0, bonus_id, True, empty, empty, empty, empty, None)
        planned_gamma = next_gamma(config, planned_gamma, gamma, verdict.num_accepted)
        draft_ids = proposal.draft_ids.tolist()
        new_ids = draft_ids[: verdict.num_accepted] + [verdict.next_id]
        if taken:  # the rival the target took keeps what the verify computed for it, at its place in the text
            move_cache_position(target_cache, ids.shape[1] + taken, ids.shape[1])
            if getattr(drafter, "reads_target", False):
                drafter.take_position(ids.shape[1] + taken, ids.shape[1])
        ids = torch.cat([ids, ids.new_tensor([new_ids])], dim=1)  # (1, n')
        crop_cache(target_cache, ids.shape[1] - 1)
        drafter.rollback(ids.shape[1])
        verified_at = clock(pair.device)

        emitted, hit_eos = truncate_at_eos(new_ids, pair.eos_id, config.stop_at_eos)
        details = describe_positions(proposal, target_probs, verdict) if config.inspect and gamma > 0 else None
        # After the clock: the target's own certainty at each drafted position (rows 0..γ−1 of the verify;
        # rivals sit at row 0's position), for the chart of acceptance against it.
        target_confidences = top_probability(target_logits[:gamma]).tolist() if gamma > 0 else None
        yield RoundEvent(
            lane=lane,
            round_index=round_index,
            position=num_generated,
            gamma=gamma,
            drafted=describe_drafts(draft_ids, verdict, proposal.confidences, target_confidences),
            num_accepted=verdict.num_accepted,
            next_id=verdict.next_id,
            next_kind="bonus" if verdict.is_bonus else "resample",
            emitted_ids=tuple(emitted),
            draft_s=drafted_at - started,
            verify_s=verified_at - drafted_at,
            num_draft_forwards=proposal.num_forwards,
            num_target_forwards=1,
            details=details,
            stopped_unsure=proposal.stopped_unsure,
            rivals=rivals,
        )
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
def warm_up(pair: ModelPair) -> None:
    """A few throwaway forwards so first-call costs (allocation, kernel choice) are never timed."""
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
    warm_up(pair)
    for lane, decode in decoders:
        yield from decode(pair, prompt_ids, config, lane=lane)
