"""Every decoding forward of the target in one shape: SLOTS query rows over a fixed-size key cache.

A step (1 token), a verify (γ+1 tokens) and a draft tree's verify all run as calls of exactly SLOTS
rows (the real ones, then filler), each row attending over its own keys gathered to a prefix of a
width rounded up to KEY_BLOCK. A row's result then depends on its own inputs alone, never on how
many rows ran beside it: a verify rounds like a step *by construction*, on any device, trees
included (a node's gathered keys are its path's, in the order a step along that path has them).

The same fixed shape is what a CUDA graph needs: on a GPU, where a 135 M target is bound by kernel
launches and Python (28 ms a step on an H200, 77% of it no kernel running), each (width, outputs)
call is captured once and replayed (`torch.cuda.CUDAGraph`), for the target alone and the verify alike,
so the baseline stays fair. On a CPU the same calls run eagerly (`SPECVIZ_SLOTS=1`; off by default
there, where specviz.models.invariance's measured layouts are cheaper).

The cache is transformers' StaticCache with two changes: a call writes its rows' keys at the slots the
caller names (filler rows at trash slots past the end), and its length is a Python int the engine
crops, as it crops a DynamicCache. A prompt's own pass runs as ever (a DynamicCache, its kernels), and
its keys are copied in: both lanes read the same prompt.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, DynamicCache, StaticCache
from transformers.masking_utils import AttentionMaskInterface

from specviz.models import invariant_attention

SLOTS = 8  # query rows per call: a verify of γ ≤ 7 in one call; longer ones (trees) in several
SLOTS_LAYOUT = "specviz_slots"  # the attention name transformers knows it by
SWITCH_ENV = "SPECVIZ_SLOTS"  # "1": on (also on a CPU); "0": off (also on CUDA); unset: on CUDA only
KEY_BLOCK = {"cuda": 256, "cpu": 64}  # key widths round up to this: fewer graphs on a GPU, less work on a CPU


def slots_wanted(device: torch.device) -> bool:
    """Whether a target on this device runs its decoding forwards in slots (the switch, else CUDA only)."""
    switch = os.environ.get(SWITCH_ENV, "").strip()
    return switch == "1" if switch in ("0", "1") else device.type == "cuda"


@contextlib.contextmanager
def slots_switched(on: bool) -> Iterator[None]:
    """The switch set for what loads meanwhile (a target's slots are fixed when it loads), then as it was."""
    before = os.environ.get(SWITCH_ENV)
    os.environ[SWITCH_ENV] = "1" if on else "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SWITCH_ENV, None)
        else:
            os.environ[SWITCH_ENV] = before


def key_block(device: torch.device) -> int:
    return KEY_BLOCK.get(device.type, KEY_BLOCK["cpu"])


def lower_layer_states(hidden_states: tuple[torch.Tensor, ...], layers: tuple[int, ...]) -> torch.Tensor:
    """The states of `layers` (indices into a forward's hidden_states), side by side in that order:
    (b, n, d·len(layers)); the order a head that reads them (specviz.models.draft_head) expects,
    at run time and in its teacher pass alike."""
    return torch.cat([hidden_states[k] for k in layers], dim=-1)


# ---- which keys each row reads -------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """One query row: the slot it writes, its position id, and the keys it reads: slots 0..prefix-1,
    then `extra` (a tree node's ancestors and itself), in that order."""

    slot: int
    position: int
    prefix: int
    extra: tuple[int, ...] = ()

    @property
    def num_keys(self) -> int:
        return self.prefix + len(self.extra)


def plan_rows(length: int, num_new: int, parents: Sequence[int] = ()) -> list[Row]:
    """The rows of a forward over `num_new` ids after `length` cached ones. `parents`: the trailing positions
    are draft-tree nodes (parent -1: the text's last id), each at the text's length + its depth − 1, seeing
    the text, its ancestors and itself (as forward.tree_layout's mask says); the first of them may be cached
    already (a head grows its tree a level a forward), the new ones being the last `num_new`."""
    num_text = length + num_new - len(parents)
    rows = [Row(slot, slot, slot + 1) for slot in range(length, num_text)]
    paths: list[tuple[int, ...]] = []  # each node's own slots from the root down, itself last
    for node, parent in enumerate(parents):
        if parent >= node:
            raise ValueError(f"tree node {node} comes before its parent {parent}")
        paths.append((paths[parent] if parent >= 0 else ()) + (num_text + node,))
        if num_text + node >= length:  # nodes already cached (a head's earlier levels) only lend their paths
            rows.append(Row(num_text + node, num_text - 1 + len(paths[node]), num_text, paths[node]))
    return rows


def group_calls(rows: list[Row], block: int) -> list[list[Row]]:
    """Consecutive rows of one key width, at most SLOTS a call: each row reads exactly the width a
    step at its place reads, so its call has a step's shape."""
    calls: list[list[Row]] = []
    for row in rows:
        width = key_width(row.num_keys, block)
        if calls and len(calls[-1]) < SLOTS and key_width(calls[-1][0].num_keys, block) == width:
            calls[-1].append(row)
        else:
            calls.append([row])
    return calls


def key_width(num_keys: int, block: int) -> int:
    return -(-num_keys // block) * block


@dataclass
class CallInputs:
    """The tensors one call reads, at fixed addresses (a CUDA graph replays reading these)."""

    ids: torch.Tensor  # (1, S)
    positions: torch.Tensor  # (1, S)
    write_at: torch.Tensor  # (S,): the slots the rows' keys go to
    order: torch.Tensor  # (S, W): each row's key slots, visible ones first
    visible: torch.Tensor  # (S, 1, 1, W) bool

    @classmethod
    def empty(cls, width: int, device: torch.device) -> "CallInputs":
        long = dict(dtype=torch.long, device=device)
        return cls(torch.zeros(1, SLOTS, **long), torch.zeros(1, SLOTS, **long), torch.zeros(SLOTS, **long),
                   torch.zeros(SLOTS, width, **long), torch.zeros(SLOTS, 1, 1, width, dtype=torch.bool, device=device))


def fill_inputs(inputs: CallInputs, rows: list[Row], ids: torch.Tensor, trash: int) -> None:
    """Write one call's rows into its inputs; filler rows read key 0 and write trash slots."""
    width = inputs.order.shape[1]
    filler = SLOTS - len(rows)
    order = torch.arange(width).repeat(SLOTS, 1)  # (S, W)
    for index, row in enumerate(rows):
        if row.extra:
            order[index, row.prefix : row.num_keys] = torch.tensor(row.extra)
    counts = torch.tensor([row.num_keys for row in rows] + [1] * filler).view(-1, 1)  # (S, 1)
    visible = torch.arange(width).view(1, -1) < counts  # (S, W)
    inputs.order.copy_(order.where(visible, 0))
    inputs.visible.copy_(visible.view(SLOTS, 1, 1, width))
    inputs.ids[0, : len(rows)].copy_(ids)
    inputs.ids[0, len(rows) :] = 0
    inputs.positions.copy_(torch.tensor([[row.position for row in rows] + [0] * filler]))
    inputs.write_at.copy_(torch.tensor([row.slot for row in rows] + list(range(trash, trash + filler))))


# ---- the cache -----------------------------------------------------------------------------------

class SlotCache(StaticCache):
    """transformers' StaticCache whose calls write where the caller says; `length` is the text's."""

    def __init__(self, config, capacity: int, graphed: bool = False):
        super().__init__(config=config, max_cache_len=capacity + SLOTS)  # SLOTS trash slots past the end
        self.capacity = capacity
        self.graphed = graphed  # each call captured once as a CUDA graph, then replayed
        self.length = 0
        self.write_at: torch.Tensor | None = None  # (S,), set before each call
        self.graphs: dict[tuple, "Captured"] = {}  # CUDA only: one per (width, outputs)
        self.inputs: dict[int, CallInputs] = {}  # per width
        self.extras: dict[object, torch.Tensor] = {}  # other inputs a body reads at fixed addresses

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        layer = self.layers[layer_idx]
        if not layer.is_initialized:
            layer.lazy_initialization(key_states, value_states)
        if self.write_at is None:  # a prompt's own pass, copied in: no forward writes here unasked
            raise RuntimeError("a SlotCache is written by specviz.models.slots.run_rows only")
        layer.keys.index_copy_(2, self.write_at, key_states)  # (1, kv, L, D) ← (1, kv, S, D)
        layer.values.index_copy_(2, self.write_at, value_states)
        return layer.keys, layer.values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def crop(self, max_length: int) -> None:
        """As DynamicCache.crop: a negative count drops that many; entries past the length are never read."""
        self.length = self.length + max_length if max_length < 0 else min(self.length, max_length)

    def take_prompt(self, prompt_cache: DynamicCache) -> None:
        """Copy a prompt pass's keys and values in (the prompt's own kernels: both lanes read the same)."""
        num = prompt_cache.get_seq_length()
        if num > self.capacity:
            raise ValueError(f"the prompt's {num} positions do not fit this cache's {self.capacity}")
        for layer, source in zip(self.layers, prompt_cache.layers):
            if not layer.is_initialized:
                layer.lazy_initialization(source.keys, source.values)
            layer.keys[:, :, :num] = source.keys
            layer.values[:, :, :num] = source.values
        self.length = num


# ---- attention -------------------------------------------------------------------------------------

def slots_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                    specviz_order: torch.Tensor | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """query (1, H, S, D), key and value the whole cache (1, kv, L, D), specviz_order (S, W) and the
    mask (S, 1, 1, W): each row one SDPA batch entry over its own gathered keys → (1, S, H, D).
    Without an order (transformers' generate(), a prompt pass, a load-time probe) the forward is not a
    slots call: FIXED computes it, the layout a CUDA target had before (invariant_attention)."""
    if specviz_order is None:
        return FIXED_ATTENTION(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    if kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None:
        raise ValueError("slots compute plain softmax attention; this model needs soft-capping or sinks")
    _, num_heads, num_rows, head_dim = query.shape
    num_kv_heads, width = key.shape[1], specviz_order.shape[1]
    index = specviz_order.reshape(-1)  # (S·W,)
    keys = key[0].index_select(1, index).view(num_kv_heads, num_rows, width, head_dim).transpose(0, 1)  # (S, kv, W, D)
    values = value[0].index_select(1, index).view(num_kv_heads, num_rows, width, head_dim).transpose(0, 1)
    rows = query[0].transpose(0, 1).unsqueeze(2)  # (S, H, 1, D)
    out = F.scaled_dot_product_attention(rows, keys, values, attn_mask=attention_mask, scale=scaling,
                                         enable_gqa=True)  # (S, H, 1, D)
    return out.view(1, num_rows, num_heads, head_dim), None


# Forwards that are not slots calls compute as a CUDA target did before: FIXED, its mask hook too.
FIXED_ATTENTION = invariant_attention.attention_for(invariant_attention.FIXED)
AttentionInterface.register(SLOTS_LAYOUT, slots_attention)
AttentionMaskInterface.register(SLOTS_LAYOUT, invariant_attention.rowwise_mask)


# ---- running calls ---------------------------------------------------------------------------------

@dataclass
class Captured:
    """A call captured as a CUDA graph, and the outputs its replays write."""

    graph: object
    outputs: tuple[torch.Tensor, ...]


def run_call(model, cache: SlotCache, inputs: CallInputs, layers: tuple[int, ...] | None) -> tuple[torch.Tensor, ...]:
    """One call of a causal LM over SLOTS rows: (logits (1, S, vocab),) or, with `layers`, also the final
    hidden states and those of `layers` side by side (1, S, d·(1+n))."""
    output = model.base_model(input_ids=inputs.ids, position_ids=inputs.positions, attention_mask=inputs.visible,
                              past_key_values=cache, use_cache=True, output_hidden_states=bool(layers),
                              specviz_order=inputs.order)
    hidden = output.last_hidden_state  # (1, S, d)
    logits = model.get_output_embeddings()(hidden)  # (1, S, vocab)
    if layers is None:
        return (logits,)
    if layers:
        hidden = torch.cat([hidden, lower_layer_states(output.hidden_states, layers)], dim=-1)  # (1, S, d·(1+n))
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
    with torch.cuda.graph(graph):
        outputs = call()
    return Captured(graph, outputs)


Body = Callable[[CallInputs], tuple[torch.Tensor, ...]]


def run_calls(cache: SlotCache, new_ids: torch.Tensor, parents: Sequence[int], body: Body, variant: object,
              prepare: Callable[[int, int], None] | None = None, graphs: bool = True) -> list[torch.Tensor]:
    """Run the rows of new_ids (1, n) after the cache's length as calls of SLOTS rows: `body` computes one call
    from its inputs (and any buffers `prepare(first, stop)` fills for rows first..stop-1 of new_ids), returning
    tensors of shape (1, S, ·); with the cache graphed, each (width, variant) is captured once and replayed.
    Returns each output's rows, (n, ·)."""
    rows = plan_rows(cache.length, new_ids.shape[1], parents)
    if rows[-1].slot >= cache.capacity:
        raise ValueError(f"a forward past this cache's {cache.capacity} positions")
    block = key_block(new_ids.device)
    parts, done = [], 0
    for call_rows in group_calls(rows, block):
        width = key_width(call_rows[0].num_keys, block)
        inputs = cache.inputs.get(width) or cache.inputs.setdefault(width, CallInputs.empty(width, new_ids.device))
        fill_inputs(inputs, call_rows, new_ids[0, done : done + len(call_rows)], cache.capacity)
        if prepare is not None:
            prepare(done, done + len(call_rows))
        cache.write_at = inputs.write_at
        if graphs and cache.graphed:
            key = (width, variant)
            if key not in cache.graphs:
                cache.graphs[key] = capture(lambda: body(inputs))
            cache.graphs[key].graph.replay()
            outputs = cache.graphs[key].outputs
        else:
            outputs = body(inputs)
        # Copied out: a graph's outputs are overwritten by its next replay (the forward's next call, maybe)
        parts.append([output[0, : len(call_rows)].clone() for output in outputs])  # each (m, ·)
        done += len(call_rows)
    cache.write_at = None
    cache.length += new_ids.shape[1]
    return [torch.cat(rows_of_output) for rows_of_output in zip(*parts)]


def run_rows(model, cache: SlotCache, new_ids: torch.Tensor, parents: Sequence[int] = (),
             layers: tuple[int, ...] | None = None, last_only: bool = False,
             graphs: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A causal LM's forward over new_ids (1, n) after the cache's length: logits (n, vocab), or (1, vocab)
    with `last_only`, and, with `layers` (a drafter reading the target), hidden states (n, d·(1+len(layers))).
    A first forward of more than SLOTS ids is a prompt's own pass: as transformers runs it, then copied in."""
    if cache.length == 0 and new_ids.shape[1] > SLOTS:
        return read_prompt(model, cache, new_ids, layers, last_only)
    outputs = run_calls(cache, new_ids, parents, lambda inputs: run_call(model, cache, inputs, layers), layers,
                        graphs=graphs)
    logits = outputs[0][-1:] if last_only else outputs[0]  # (n or 1, vocab)
    return logits, (outputs[1] if layers is not None else None)


def run_hidden_rows(model, cache: SlotCache, new_ids: torch.Tensor, parents: Sequence[int] = ()) -> torch.Tensor:
    """A causal LM's final hidden states (n, d) for new_ids (1, n) after the cache's length, in slots: what a
    draft model that scores its own head rows (specviz.models.rows) reads. A prompt's pass as run_rows runs it."""
    if cache.length == 0 and new_ids.shape[1] > SLOTS:
        prompt_cache = DynamicCache()
        hidden = model.base_model(input_ids=new_ids, past_key_values=prompt_cache, use_cache=True).last_hidden_state
        cache.take_prompt(prompt_cache)
        return hidden[0]  # (n, d)

    def body(inputs: CallInputs) -> tuple[torch.Tensor]:
        return (model.base_model(input_ids=inputs.ids, position_ids=inputs.positions, attention_mask=inputs.visible,
                                 past_key_values=cache, use_cache=True, specviz_order=inputs.order).last_hidden_state,)

    return run_calls(cache, new_ids, parents, body, "hidden")[0]  # (n, d)


def run_head_rows(head, embed, cache: SlotCache, features: torch.Tensor, next_ids: torch.Tensor,
                  parents: Sequence[int] = ()) -> torch.Tensor:
    """A draft head's forward (specviz.models.draft_head) in slots: its states (n, d) for features (1, n, F)
    and the next tokens' ids (1, n), its tree nodes' `parents` as run_rows takes them. A first forward of
    more than SLOTS rows (the prompt's states) runs as transformers runs it, then is copied in."""
    if cache.length == 0 and next_ids.shape[1] > SLOTS:
        prompt_cache = DynamicCache()
        positions = torch.arange(next_ids.shape[1], device=next_ids.device).view(1, -1)  # (1, n)
        predicted = head(features, embed(next_ids), prompt_cache, positions)  # (1, n, d)
        cache.take_prompt(prompt_cache)
        return predicted[0]
    width = features.shape[-1]  # the target's states with its lower layers, or the head's own predictions
    buffer = cache.extras.get(width)
    if buffer is None:
        buffer = cache.extras[width] = features.new_zeros(1, SLOTS, width)  # (1, S, F): read by the graphs

    def prepare(first: int, stop: int) -> None:
        buffer[0, : stop - first].copy_(features[0, first:stop])

    def body(inputs: CallInputs) -> tuple[torch.Tensor]:
        return (head(buffer, embed(inputs.ids), cache, inputs.positions, inputs.visible, specviz_order=inputs.order),)

    return run_calls(cache, next_ids, parents, body, ("head", width), prepare)[0]  # (n, d)


def prepare_graphs(cache: SlotCache, device: torch.device, longest: int,
                   steps: Sequence[Callable[[SlotCache], object]]) -> int:
    """On CUDA, capture before anything is timed every call a run of up to `longest` positions meets: each of
    `steps` (a one-row forward of one variant: outputs, features) at every key width, its row placed at the
    width's last slot. It writes a throwaway entry there, which a run writes again before reading it.
    Returns how many graphs were captured."""
    if not cache.graphed:
        return 0
    block, before = key_block(device), len(cache.graphs)
    for width in range(block, key_width(min(longest, cache.capacity), block) + 1, block):
        for step in steps:
            cache.length = min(width, cache.capacity) - 1  # the step there reads `width` keys
            step(cache)
    cache.length = 0
    return len(cache.graphs) - before


def read_prompt(model, cache: SlotCache, new_ids: torch.Tensor, layers: tuple[int, ...] | None,
                last_only: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A prompt's own pass, as forward.forward_new_ids_with_hidden runs it, its keys copied into the cache."""
    prompt_cache = DynamicCache()
    output = model.base_model(input_ids=new_ids, past_key_values=prompt_cache, use_cache=True,
                              output_hidden_states=bool(layers))
    hidden = output.last_hidden_state  # (1, n, d)
    logits = model.get_output_embeddings()(hidden[:, -1:] if last_only else hidden)  # (1, n_out, vocab)
    cache.take_prompt(prompt_cache)
    if layers is None:
        return logits[0], None
    if layers:
        hidden = torch.cat([hidden, lower_layer_states(output.hidden_states, layers)], dim=-1)
    return logits[0], hidden[0]


# ---- a pool, so graphs outlive a run -----------------------------------------------------------------

class SlotPool:
    """Each target's free slot caches: a cache's graphs are bound to its buffers, so reusing the cache reuses
    them, run after run. Keyed by the model itself, weakly: a target freed takes its caches along."""

    def __init__(self):
        self.free: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @staticmethod
    def graphs_on(device: torch.device) -> bool:
        """Whether calls on this device are captured as CUDA graphs (tests stand an eager graph in on a CPU)."""
        return device.type == "cuda"

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


def uses_slots(model) -> bool:
    return getattr(model.config, "_attn_implementation", None) == SLOTS_LAYOUT
