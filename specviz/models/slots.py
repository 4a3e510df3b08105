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
its keys are copied in: both lanes read the same prompt. This module is the shape (which keys each row
reads, a call's inputs, the cache, the attention); specviz.models.slot_calls runs the calls.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, DynamicCache, StaticCache
from transformers.masking_utils import AttentionMaskInterface

from specviz.models import invariant_attention

SLOTS = 8  # query rows per call: a verify of γ ≤ 7 in one call; longer ones (trees) in several
SLOTS_LAYOUT = "specviz_slots"  # the attention name transformers knows it by
SWITCH_ENV = "SPECVIZ_SLOTS"  # "1": on (also on a CPU); "0": off (also on CUDA); unset: on CUDA only
ZERO_GPU_ENV = "SPACES_ZERO_GPU"  # set on Hugging Face ZeroGPU Spaces
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
    """The tensors one call reads, at fixed addresses (a CUDA graph replays reading these). All but the ids
    live in one buffer, so a call's inputs cross to a GPU in one copy; which keys a row sees is computed
    from its count on the device (inside the graph)."""

    ids: torch.Tensor  # (1, S)
    packed: torch.Tensor  # (3·S + S·W,): positions, write_at, counts, order
    keys: torch.Tensor  # (W,): 0 … W−1

    @classmethod
    def empty(cls, width: int, device: torch.device) -> "CallInputs":
        long = dict(dtype=torch.long, device=device)
        return cls(torch.zeros(1, SLOTS, **long), torch.zeros(3 * SLOTS + SLOTS * width, **long),
                   torch.arange(width, **long))

    @property
    def positions(self) -> torch.Tensor:
        return self.packed[:SLOTS].view(1, SLOTS)  # (1, S)

    @property
    def write_at(self) -> torch.Tensor:
        return self.packed[SLOTS : 2 * SLOTS]  # (S,): the slots the rows' keys go to

    @property
    def order(self) -> torch.Tensor:
        return self.packed[3 * SLOTS :].view(SLOTS, -1)  # (S, W): each row's key slots, visible ones first

    @property
    def visible(self) -> torch.Tensor:
        counts = self.packed[2 * SLOTS : 3 * SLOTS]  # (S,): how many keys each row sees
        return (self.keys.view(1, -1) < counts.view(-1, 1)).view(SLOTS, 1, 1, -1)  # (S, 1, 1, W) bool


def fill_inputs(inputs: CallInputs, rows: list[Row], ids: torch.Tensor, trash: int) -> None:
    """Write one call's rows into its inputs; filler rows read key 0 and write trash slots."""
    width, filler = inputs.keys.shape[0], SLOTS - len(rows)
    order = torch.arange(width).repeat(SLOTS, 1)  # (S, W)
    for index, row in enumerate(rows):
        if row.extra:
            order[index, row.prefix : row.num_keys] = torch.tensor(row.extra)
    counts = torch.tensor([row.num_keys for row in rows] + [1] * filler)  # (S,)
    order = order.where(torch.arange(width).view(1, -1) < counts.view(-1, 1), 0)  # hidden keys read slot 0
    positions = torch.tensor([row.position for row in rows] + [0] * filler)  # (S,)
    write_at = torch.tensor([row.slot for row in rows] + list(range(trash, trash + filler)))  # (S,)
    inputs.packed.copy_(torch.cat([positions, write_at, counts, order.view(-1)]))  # one copy to the device
    inputs.ids[0, : len(rows)].copy_(ids)
    inputs.ids[0, len(rows) :] = 0


# ---- the cache -----------------------------------------------------------------------------------

class SlotCache(StaticCache):
    """transformers' StaticCache whose calls write where the caller says; `length` is the text's."""

    def __init__(self, config, capacity: int, graphed: bool = False):
        super().__init__(config=config, max_cache_len=capacity + SLOTS)  # SLOTS trash slots past the end
        self.capacity = capacity
        self.graphed = graphed  # each call captured once as a CUDA graph, then replayed
        self.length = 0
        self.write_at: torch.Tensor | None = None  # (S,), set before each call
        self.graphs: dict[tuple, object] = {}  # CUDA only: slot_calls.Captured per (width, variant)
        self.inputs: dict[int, CallInputs] = {}  # per width
        self.extras: dict[object, torch.Tensor] = {}  # other inputs a body reads at fixed addresses

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        layer = self.layers[layer_idx]
        if not layer.is_initialized:
            layer.lazy_initialization(key_states, value_states)
        if self.write_at is None:  # a prompt's own pass, copied in: no forward writes here unasked
            raise RuntimeError("a SlotCache is written by the calls of specviz.models.slot_calls only")
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


def uses_slots(model) -> bool:
    return getattr(model.config, "_attn_implementation", None) == SLOTS_LAYOUT
