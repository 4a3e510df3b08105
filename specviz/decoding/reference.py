"""The reference lane: transformers' own `generate()` on the same pair and settings.

What people would otherwise use: `generate(assistant_model=draft)` for the model drafter and
`generate(prompt_lookup_num_tokens=γ)` for prompt lookup, with a constant γ; transformers has no drafter that
reads the target's hidden states, so with the head drafter it assists with the draft model: what a user of
transformers would get. A streamer turns each chunk of new tokens into an event, so this lane reads like the
others (transformers reports no rounds: plain tokens and timings only, one chunk = one target forward). The call
is timed end to end, transformers' own overhead included. Its first forward reads the prompt and the first
drafts together; on a target in slots, `prompt_apart` computes it as the lanes do (the prompt's own pass,
then decoding rows), so the lane writes the lanes' tokens by construction.

`generate()` runs in a worker thread so the consumer can stop it: leaving the event loop (Stop in the app, or a
run-time cap) sets a flag that a stopping criterion checks after every target forward.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator

import torch
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from specviz.catalogue import drafter_info
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import check_run, clock, context_budget, truncate_at_eos
from specviz.decoding.events import Event, FinishEvent, PrefillEvent, RoundEvent
from specviz.models.invariance import prompt_apart
from specviz.models.pairs import ModelPair

DONE = object()  # end of the worker's stream


def generate_kwargs(pair: ModelPair, config: DecodeConfig, max_new_tokens: int, constant_gamma: bool = True,
                    assisted: bool = True) -> dict:
    """`generate()` arguments for the same sampling, budget and drafter as our lanes.

    `constant_gamma=False` leaves the draft model's γ to transformers' default schedule;
    `assisted=False` gives no drafter at all: transformers' own baseline, the target alone.
    """
    kwargs = {"max_new_tokens": max_new_tokens, "pad_token_id": pair.eos_id}
    if config.stop_at_eos:
        kwargs["eos_token_id"] = pair.eos_id
    else:  # never stop early: the same token budget as our lanes
        kwargs.update(eos_token_id=None, min_new_tokens=max_new_tokens)
    if config.temperature > 0:
        kwargs.update(do_sample=True, temperature=config.temperature, top_k=config.top_k, top_p=config.top_p)
    else:
        kwargs.update(do_sample=False)
    if not assisted:
        return kwargs
    if drafter_info(config.drafter).hf_equivalent == "prompt_lookup_num_tokens":
        kwargs.update(prompt_lookup_num_tokens=config.gamma, max_matching_ngram_size=config.ngram)
    else:  # the draft model's own equivalent, and for a drafter transformers lacks (the head) the nearest one
        if pair.draft is None:
            raise ValueError("this pair has no draft model for transformers' assisted generation")
        kwargs["assistant_model"] = pair.draft
        if constant_gamma:  # our lanes' schedule and threshold; transformers' defaults differ
            kwargs.update(num_assistant_tokens=config.gamma, num_assistant_tokens_schedule=config.gamma_schedule,
                          assistant_confidence_threshold=config.draft_confidence)
    return kwargs


class ChunkStreamer(BaseStreamer):
    """Hands every chunk of new token ids, with the time it arrived, to a queue."""

    def __init__(self, chunks: queue.Queue, device: torch.device):
        self.chunks = chunks
        self.device = device
        self.seen_prompt = False

    def put(self, value: torch.Tensor) -> None:
        if not self.seen_prompt:  # generate() streams the prompt first
            self.seen_prompt = True
            return
        self.chunks.put((clock(self.device), value.reshape(-1).tolist()))

    def end(self) -> None:
        pass


class StopWhenAsked(StoppingCriteria):
    def __init__(self, stop: threading.Event):
        self.stop = stop

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self.stop.is_set(), dtype=torch.bool, device=input_ids.device)


def reference_decode(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig, lane: str = "reference") -> Iterator[Event]:
    """transformers' generate() on the pair, as events: the first chunk's first token is the
    prefill's, every further chunk is a round of plain target tokens."""
    budget = check_run(pair, prompt_ids, config)
    kwargs = generate_kwargs(pair, config, budget)
    chunks: queue.Queue = queue.Queue()
    stop = threading.Event()
    input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=pair.device)  # (1, n)

    def work() -> None:
        try:
            torch.manual_seed(config.seed)  # transformers samples from torch's global generator
            with torch.inference_mode(), prompt_apart(len(prompt_ids)):  # the prompt read as the lanes read it
                pair.target.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                     streamer=ChunkStreamer(chunks, pair.device),
                                     stopping_criteria=StoppingCriteriaList([StopWhenAsked(stop)]), **kwargs)
            chunks.put(DONE)
        except BaseException as error:  # noqa: BLE001 — re-raised in the consumer's thread
            chunks.put(error)

    started = clock(pair.device)
    worker = threading.Thread(target=work, name="specviz-reference", daemon=True)
    worker.start()
    try:
        yield from events_from_chunks(chunks, lane, len(prompt_ids), started, pair.eos_id, config, budget)
    finally:
        stop.set()  # the consumer stopped early (or we are done): end generate() at its next step
        worker.join()


def events_from_chunks(chunks: queue.Queue, lane: str, num_prompt_tokens: int, started: float, eos_id: int | None,
                       config: DecodeConfig, budget: int) -> Iterator[Event]:
    generated: list[int] = []
    last = started
    round_index = 0
    for item in iter(chunks.get, DONE):
        if isinstance(item, BaseException):
            raise item
        arrived, ids = item
        ids, hit_eos = truncate_at_eos(ids[: budget - len(generated)], eos_id, config.stop_at_eos)
        first_chunk = not generated
        if first_chunk:  # its first token stands for the prefill; the rest came with it, at no extra cost
            yield PrefillEvent(lane, num_prompt_tokens, ids[0], arrived - last, 1, 0)
        rest = ids[1:] if first_chunk else ids
        if rest:
            position = len(generated) + (1 if first_chunk else 0)
            step_s, forwards = (0.0, 0) if first_chunk else (arrived - last, 1)
            yield RoundEvent(lane, round_index, position, 0, (), 0, rest[-1], "target", tuple(rest), 0.0, step_s, 0, forwards)
            round_index += 1
        generated.extend(ids)
        last = arrived
        if hit_eos:
            yield FinishEvent(lane, "eos", len(generated))
            return
    reason = "max_new_tokens" if budget == config.max_new_tokens else "context_length"
    yield FinishEvent(lane, reason if len(generated) >= budget else "stopped", len(generated))


def time_generate(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig, assisted: bool = True,
                  constant_gamma: bool = True) -> tuple[float, int]:
    """One plain `generate()` call (no streamer, no thread), timed end to end: (seconds, new tokens)."""
    budget = context_budget(pair, len(prompt_ids), config)
    kwargs = generate_kwargs(pair, config, budget, constant_gamma, assisted)
    input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=pair.device)  # (1, n)
    torch.manual_seed(config.seed)
    started = clock(pair.device)
    with torch.inference_mode(), prompt_apart(len(prompt_ids)):  # a plainly loaded target ignores it
        output = pair.target.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
    return clock(pair.device) - started, output.shape[1] - input_ids.shape[1]

