"""Running calls in slots (specviz.models.slots): each forward as calls of call_rows(device) rows, captured once as a CUDA
graph per (width, variant) where the cache is graphed, replayed after; the bodies the lanes and the drafters
run (a causal LM's logits or hidden states, a draft head's layer); the pool that keeps caches and their graphs
across runs; the warm-up's captures."""

from __future__ import annotations

import os
import warnings
import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from transformers import DynamicCache

from specviz.models.slots import (SLOTS, SLOTS_LAYOUT, ZERO_GPU_ENV, CallInputs, SlotCache, call_rows, call_width,
                                  fill_inputs, group_calls, key_block, key_width, lower_layer_states, mixed_widths,
                                  plan_rows, widths_free)


@dataclass
class Captured:
    """A call captured as a CUDA graph, and the outputs its replays write."""

    graph: object
    outputs: tuple[torch.Tensor, ...]


def base_call(model, cache: SlotCache, inputs: CallInputs, **kwargs):
    """A causal LM's base model over one call's S rows (its output (1, S, ·))."""
    return model.base_model(input_ids=inputs.ids, position_ids=inputs.positions, attention_mask=inputs.visible,
                            past_key_values=cache, use_cache=True, **inputs.attention_kwargs(), **kwargs)


def logits_and_states(model, output, layers: tuple[int, ...] | None, last_only: bool = False) -> tuple[torch.Tensor, ...]:
    """A causal LM's base-model output as the lanes read it, the output head applied as the LM's own forward
    applies it (at the last row alone with `last_only`): (logits,) or, with `layers` (a drafter reading the
    target), (logits, the final hidden states with those of `layers` beside them (b, n, d·(1+len(layers))))."""
    hidden = output.last_hidden_state  # (b, n, d)
    logits = model.get_output_embeddings()(hidden[:, -1:] if last_only else hidden)  # (b, n_out, vocab)
    if layers is None:
        return (logits,)
    if layers:
        hidden = torch.cat([hidden, lower_layer_states(output.hidden_states, layers)], dim=-1)  # (b, n, d·(1+n))
    return logits, hidden


def capture(call: Callable[[], tuple[torch.Tensor, ...]]) -> Captured:
    """Capture a call as a CUDA graph: twice eagerly on a side stream first (lazy initialisation, cuBLAS's
    workspace), as torch asks. Each run computes the very call it is about to replay, so the cache's
    slots receive the same keys every time."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # thread_local: another thread of the page (another visitor's run) may use CUDA while this one captures
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        outputs = call()
    return Captured(graph, outputs)


# What the graphs did in this process, for a run's machine record: how many captured, the first failure.
GRAPHS = {"captured": 0, "failed": None}


def graph_for(cache: SlotCache, key: tuple, call: Callable[[], tuple[torch.Tensor, ...]]) -> Captured | None:
    """The cache's graph of `key`, captured at its first use; None where the capture fails: from then on the
    cache's calls run eagerly (still exact), the reason kept for the machine record and warned once."""
    if key not in cache.graphs:
        try:
            cache.graphs[key] = capture(call)
            GRAPHS["captured"] += 1
        except Exception as error:  # noqa: BLE001 — whatever CUDA raises, the call still runs eagerly
            cache.graphed = False
            if GRAPHS["failed"] is None:
                GRAPHS["failed"] = f"{type(error).__name__}: {error}"
                warnings.warn(f"CUDA graph capture failed, running slots eagerly: {GRAPHS['failed']}", RuntimeWarning)
            return None
    return cache.graphs[key]


def inputs_at(cache: SlotCache, key: object, width: int, device: torch.device) -> CallInputs:
    """The cache's input buffers for calls of `key` (a width; a drafting chain's step at a width) reading `width` keys,
    made at their first use and kept at fixed addresses: a graph captured over them reads them at every replay."""
    inputs = cache.inputs.get(key)
    if inputs is None:
        inputs = cache.inputs[key] = CallInputs.empty(width, device)
    return inputs


def run_calls(cache: SlotCache, new_ids: torch.Tensor, parents: Sequence[int],
              body: Callable[[CallInputs], tuple[torch.Tensor, ...]], variant: object,
              prepare: Callable[[int, int], None] | None = None) -> list[torch.Tensor]:
    """Each output's rows (n, ·) for new_ids (1, n) after the cache's length, run as calls of S rows (call_rows): `body`
    computes one call's outputs (1, S, ·) from its inputs and any buffers `prepare(first, stop)` fills for rows
    first..stop-1 of new_ids; with the cache graphed, each (width, variant) is captured once and replayed."""
    rows = plan_rows(cache.length, new_ids.shape[1], parents)
    if rows[-1].slot >= cache.capacity:
        raise ValueError(f"a forward past this cache's {cache.capacity} positions")
    block, free = key_block(new_ids.device), widths_free(cache)
    parts, done = [], 0
    for rows_of_call in group_calls(rows, block, call_rows(new_ids.device), widths_matter=not free):
        width = call_width(rows_of_call, block)
        inputs = inputs_at(cache, width, width, new_ids.device)
        fill_inputs(inputs, rows_of_call, new_ids[0, done : done + len(rows_of_call)], cache.capacity, cache.graphed)
        inputs.mixed_widths = free and mixed_widths(rows_of_call, block)
        if prepare is not None:
            prepare(done, done + len(rows_of_call))
        cache.write_at = inputs.write_at
        graph = graph_for(cache, (width, variant), lambda: body(inputs)) if cache.graphed else None
        if graph is not None:
            graph.graph.replay()
            outputs = graph.outputs
        else:
            outputs = body(inputs)
        # Copied out: a graph's outputs are overwritten by its next replay (the forward's next call, maybe)
        parts.append([output[0, : len(rows_of_call)].clone() for output in outputs])  # each (m, ·)
        done += len(rows_of_call)
    cache.write_at = None
    cache.length += new_ids.shape[1]
    return [torch.cat(rows_of_output) for rows_of_output in zip(*parts)]


def run_rows(model, cache: SlotCache, new_ids: torch.Tensor, parents: Sequence[int] = (),
             layers: tuple[int, ...] | None = None, last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A causal LM's forward over new_ids (1, n) after the cache's length: logits (n, vocab), or (1, vocab)
    with `last_only`, and, with `layers` (a drafter reading the target), hidden states (n, d·(1+len(layers))).
    A first forward of more than SLOTS ids is a prompt's own pass: as transformers runs it, then copied in."""
    if cache.length == 0 and new_ids.shape[1] > SLOTS:  # as forward.forward_new_ids_with_hidden runs it
        outputs = read_prompt_with(cache, lambda prompt_cache: logits_and_states(model, model.base_model(
            input_ids=new_ids, past_key_values=prompt_cache, use_cache=True, output_hidden_states=bool(layers)),
            layers, last_only))
        return outputs[0][0], (outputs[1][0] if layers is not None else None)
    outputs = run_calls(cache, new_ids, parents, lambda inputs: logits_and_states(
        model, base_call(model, cache, inputs, output_hidden_states=bool(layers)), layers), layers)
    logits = outputs[0][-1:] if last_only else outputs[0]  # (n or 1, vocab)
    return logits, (outputs[1] if layers is not None else None)


def run_hidden_rows(model, cache: SlotCache, new_ids: torch.Tensor, parents: Sequence[int] = ()) -> torch.Tensor:
    """A causal LM's final hidden states (n, d) for new_ids (1, n) after the cache's length, in slots: what a
    draft model that scores its own head rows (specviz.models.pairs.RowScorer) reads. A prompt's pass as run_rows runs it."""
    if cache.length == 0 and new_ids.shape[1] > SLOTS:
        return read_prompt_with(cache, lambda prompt_cache: model.base_model(
            input_ids=new_ids, past_key_values=prompt_cache, use_cache=True).last_hidden_state[0])  # (n, d)
    return run_calls(cache, new_ids, parents, lambda inputs: (base_call(model, cache, inputs).last_hidden_state,),
                     "hidden")[0]  # (n, d)


def head_inputs(cache: SlotCache, features: torch.Tensor) -> torch.Tensor:
    """The buffer (1, S, F) a head's calls read features of width F from (the target's states with its lower layers, or
    the head's own predictions), at a fixed address (graphs read it), made at its first use in those features' dtype:
    each state is rounded to it, stepped or chained alike."""
    width = features.shape[-1]
    buffer = cache.extras.get(width)
    if buffer is None:
        buffer = cache.extras[width] = features.new_zeros(1, call_rows(features.device), width)  # (1, S, F)
    return buffer


def run_head_rows(head, embed, cache: SlotCache, features: torch.Tensor, next_ids: torch.Tensor,
                  parents: Sequence[int] = ()) -> torch.Tensor:
    """A draft head's forward (specviz.models.draft_head) in slots: its states (n, d) for features (1, n, F)
    and the next tokens' ids (1, n), its tree nodes' `parents` as run_rows takes them. A first forward of
    more than SLOTS rows (the prompt's states) runs as transformers runs it, then is copied in."""
    if cache.length == 0 and next_ids.shape[1] > SLOTS:
        positions = torch.arange(next_ids.shape[1], device=next_ids.device).view(1, -1)  # (1, n)
        return read_prompt_with(cache, lambda prompt_cache: head(features, embed(next_ids), prompt_cache,
                                                                 positions)[0])  # (n, d)
    buffer = head_inputs(cache, features)  # (1, S, F)

    def prepare(first: int, stop: int) -> None:
        buffer[0, : stop - first].copy_(features[0, first:stop])
        # Filler rows read zeros, not an earlier call's features: on a CPU the int8 head rounds its inputs
        # with one range per call, so what filler rows hold would reach the real rows' drafts, run after run.
        buffer[0, stop - first :].zero_()

    def body(inputs: CallInputs) -> tuple[torch.Tensor]:
        return (head(buffer, embed(inputs.ids), cache, inputs.positions, inputs.visible, **inputs.attention_kwargs()),)

    return run_calls(cache, next_ids, parents, body, ("head", features.shape[-1]), prepare)[0]  # (n, d)


ScoreFn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # state (1, d) → logits (1, vocab), confidence


def run_head_chain(head, embed, score: ScoreFn, cache: SlotCache, state: torch.Tensor, first_id: torch.Tensor,
                   num_steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """A greedy head's next `num_steps` drafts in one CUDA graph replay: from its predicted state (1, d) at the cache's
    length and the draft picked there (1,), each step is run_head_rows' one-row call (the same S rows, key width and
    kernels, so the same states bit for bit), scored by `score`, its argmax fed to the next; no host work or read
    between them. Returns the ids (k,), confidences (k,) and logits (k, vocab), which the next replay overwrites; None
    where no graph can hold the chain (an eager cache: the caller steps as before; steps crossing a key width)."""
    length, block = cache.length, key_block(state.device)
    width = key_width(length + 1, block)
    if not cache.graphed or key_width(length + num_steps, block) != width or length + num_steps > cache.capacity:
        return None
    steps = [inputs_at(cache, (width, "chain", step), width, state.device) for step in range(num_steps)]
    for step, inputs in enumerate(steps):  # positions and keys from the host; each id is written in the graph
        fill_inputs(inputs, plan_rows(length + step, 1), first_id, cache.capacity, graphed=True)
    feed = head_inputs(cache, state)  # (1, S, d): a stepped call's own buffer, so each state rounds as there
    if "chain first" not in cache.extras:  # what the graphs read besides: the first state and the first id
        cache.extras["chain start"] = feed.new_zeros(1, state.shape[-1])  # (1, d)
        cache.extras["chain first"] = first_id.new_zeros(1)  # (1,)
    start, first = cache.extras["chain start"], cache.extras["chain first"]
    start.copy_(state)
    first.copy_(first_id)
    # Filler rows read zeros, as a stepped call's do: the buffer may hold a catch-up's states (its width can be the
    # same), and an int8 head rounds a call's inputs with one range, filler rows included (run_head_rows)
    feed[0, 1:].zero_()

    def body() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids, confidences, logits_rows = [], [], []
        predicted, next_id = start, first
        for inputs in steps:
            inputs.ids[0, :1].copy_(next_id)
            feed[0, :1].copy_(predicted)
            cache.write_at = inputs.write_at
            predicted = head(feed, embed(inputs.ids), cache, inputs.positions, inputs.visible,
                             **inputs.attention_kwargs())[0, :1]  # (1, d)
            logits, confidence = score(predicted)  # (1, vocab), 0-d
            next_id = logits.argmax(-1)  # (1,)
            ids.append(next_id)
            confidences.append(confidence.view(1))
            logits_rows.append(logits)
        return torch.cat(ids), torch.cat(confidences), torch.cat(logits_rows)  # (k,), (k,), (k, vocab)

    try:
        graph = graph_for(cache, (width, ("chain", num_steps)), body)
    finally:
        cache.write_at = None  # set by the capture's runs; a replay reads the steps' own
    if graph is None:
        return None  # the caller steps eagerly
    graph.graph.replay()
    cache.length += num_steps
    return graph.outputs


def prepare_graphs(cache: SlotCache, device: torch.device, longest: int,
                   steps: Sequence[Callable[[SlotCache], object]]) -> int:
    """On CUDA, capture before anything is timed every call a run of up to `longest` positions meets (how many
    graphs come back): each of `steps` (a one-row forward of one variant) at every key width, its row at the
    width's last slot, whose throwaway entry a run writes again before reading it."""
    if not cache.graphed:
        return 0
    block, before = key_block(device), len(cache.graphs)
    for width in range(block, key_width(min(longest, cache.capacity), block) + 1, block):
        for step in steps:
            cache.length = min(width, cache.capacity) - 1  # the step there reads `width` keys
            step(cache)
    cache.length = 0
    return len(cache.graphs) - before


def read_prompt_with(cache: SlotCache, forward: Callable[[DynamicCache], object]):
    """A prompt's own pass (more than SLOTS rows into an empty cache) run as transformers runs it, on a
    DynamicCache, whose keys are then copied in: both lanes read the same prompt. Returns what `forward` does."""
    prompt_cache = DynamicCache()
    result = forward(prompt_cache)
    cache.take_prompt(prompt_cache)
    return result


class SlotPool:
    """Each target's free slot caches: a cache's graphs are bound to its buffers, so reusing the cache reuses
    them, run after run. Keyed by the model itself, weakly: a target freed takes its caches along."""

    def __init__(self):
        self.free: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @staticmethod
    def graphs_on(device: torch.device) -> bool:
        """Whether calls on this device are captured as CUDA graphs (tests stand an eager graph in on a CPU).
        Not on ZeroGPU: each call there runs in a process forked for it, under a patched torch, and a graph
        must not outlive the memory it was captured over; its slots run eagerly (still exact)."""
        return device.type == "cuda" and os.environ.get(ZERO_GPU_ENV, "").strip().lower() not in ("1", "t", "true")

    def acquire(self, model, capacity: int) -> SlotCache:
        """A free cache of at least `capacity` positions (a pair's context length) for this target."""
        caches = self.free.setdefault(model, [])
        for cache in caches:
            if cache.capacity >= capacity:
                caches.remove(cache)
                return cache
        return SlotCache(model.config, capacity, graphed=self.graphs_on(next(model.parameters()).device))

    def release(self, model, cache: SlotCache) -> None:
        cache.length, cache.write_at = 0, None
        caches = self.free.setdefault(model, [])
        if len(caches) < 2:  # more than two runs at once on one target is rare; their caches go
            caches.append(cache)


POOL = SlotPool()


def pooled_cache(model, capacity: int) -> SlotCache:
    """A slot cache for `model` (a causal LM, or a draft head's Llama body) from the pool, the model set to
    attend in slots (a drafter runs in slots wherever its target does)."""
    if model.config._attn_implementation != SLOTS_LAYOUT:
        model.set_attn_implementation(SLOTS_LAYOUT)
    return POOL.acquire(model, capacity)


def given_back(model, cache):
    """The run is over: a slot cache goes back to the pool, its graphs with it; what to hold after it."""
    if isinstance(cache, SlotCache):
        POOL.release(model, cache)
        return DynamicCache()
    return cache


def prepare_pooled(model, capacity: int, device: torch.device, longest: int,
                   steps: Sequence[Callable[[SlotCache], object]], copies: int = 1) -> int:
    """prepare_graphs on `copies` caches of `model` from the pool (one per lane a run keeps alive at once), given
    back after: the next run gets them, graphs and all; without graphs, their buffers made (one throwaway step), so
    no lane's timing pays for them."""
    caches = [pooled_cache(model, capacity) for _ in range(copies)]  # held together: the pool hands out distinct ones
    try:
        captured = 0
        for cache in caches:
            if steps and not cache.graphed and not all(layer.is_initialized for layer in cache.layers):
                # a cache makes its buffers (the whole capacity, zeroed) at its first write: here, untimed, not in the
                # first lane's prompt pass (0.15 s of the target alone's first run on a 2-core Xeon, more on a busy one)
                cache.length = min(key_block(device), cache.capacity) - 1
                steps[0](cache)
                cache.length = 0
            captured += prepare_graphs(cache, device, longest, steps)
        return captured
    finally:
        for cache in caches:
            POOL.release(model, cache)
