"""Every decoding forward of the target in one shape: a fixed number of query rows over a fixed-size key cache.

A step (1 token), a verify (γ+1 tokens), rival guesses and a draft tree's verify all run as calls of exactly
call_rows(device) rows (4 on a CPU, SLOTS = 8 on a GPU: the real ones, then filler), each row attending over its
own keys (or its call's shared prefix of them, on a CPU: attend_sets), to a width rounded up to the device's key
block. A row's result then depends on its own inputs alone, never on how many
rows ran beside it: a verify rounds like a step *by construction*, on any device and in any precision,
whatever kernel the device picks for that one shape (oneDNN's AMX kernels round a row differently by the row
count; cuBLAS picks kernels by the key count: neither can matter). A call's rows read the width a step at their
place reads, so a verify across a key block's edge is two calls; on a CPU where fixed_rows' attention serves (it
reads each row's visible keys and nothing past them) the width cannot reach a row, and such a verify is one call
(widths_free).

The one decoding path, on every device, for both lanes (so the baseline stays fair); on CUDA each (width,
outputs) call is also captured once as a CUDA graph, which needs that one shape too. Other forwards compute
their decoding-sized rows the same way (`outside_slots`; linear layers padded to SLOTS rows by
specviz.models.invariance), so transformers' generate() writes the lanes' tokens too; a prompt's own pass
runs SDPA as it is, and its keys are copied in. This module is the shape (which keys each row reads, a
call's inputs, the cache, the attention); specviz.models.slot_calls runs the calls.
"""

from __future__ import annotations

import contextlib
import functools
import os
import weakref
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AttentionInterface, DynamicCache, StaticCache
from transformers.masking_utils import AttentionMaskInterface, causal_mask_function, sdpa_mask

from specviz.models.fixed_rows import attend, attention_serves

SLOTS = 8  # query rows per call on a GPU (a verify of γ ≤ 7 in one graph), the most any call has; the trash slots
SLOTS_LAYOUT = "specviz_slots"  # the attention name transformers knows it by
SWITCH_ENV = "SPECVIZ_SLOTS"  # "0": targets as transformers loads them (SDPA, not exact by construction): to compare
ZERO_GPU_ENV = "SPACES_ZERO_GPU"  # set on Hugging Face ZeroGPU Spaces
KEY_BLOCK = {"cuda": 256, "cpu": 64}  # key widths round up to this: fewer graphs on a GPU, less work on a CPU
MAX_ROWWISE = 32  # a forward outside slots with more query rows than this is a prompt's own pass
PROFILE_LABEL = "specviz::slots_attention"  # how the attention (its gathers included) shows in torch's profiler
# Query rows per call on a CPU: there 4 rows cost about what 1 does (bf16 products; float32 through
# specviz.models.fixed_rows), 8 up to 1.4× (2× on AVX2) in every product and elementwise op, so a step or a
# verify of γ ≤ 3 costs what a plain step does; a longer verify runs as several calls. A GPU's graphs replay
# SLOTS rows.
CALL_ROWS = {"cpu": 4}


def call_rows(device: torch.device) -> int:
    """How many query rows every decoding call has on this device (its linear layers' row block too)."""
    return CALL_ROWS.get(device.type, SLOTS)


def slots_wanted() -> bool:
    """Whether targets load to decode in slots: always, unless the switch says "0" (a comparison only)."""
    return os.environ.get(SWITCH_ENV, "").strip() != "0"


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


def group_calls(rows: list[Row], block: int, per_call: int = SLOTS, widths_matter: bool = True) -> list[list[Row]]:
    """Consecutive rows, at most `per_call` a call (call_rows). Where `widths_matter`, a call's rows are of one key
    width: each row reads exactly the width a step at its place reads, so its call has a step's shape. Where they do
    not (widths_free), a call's rows may end either side of a key block's edge and read the widest one's width
    (call_width): a verify across the edge is one call, not two."""
    calls: list[list[Row]] = []
    for row in rows:
        if (calls and len(calls[-1]) < per_call
                and (not widths_matter or key_width(calls[-1][0].num_keys, block) == key_width(row.num_keys, block))):
            calls[-1].append(row)
        else:
            calls.append([row])
    return calls


def key_width(num_keys: int, block: int) -> int:
    return -(-num_keys // block) * block


def call_width(rows: list[Row], block: int) -> int:
    """The keys a call of these rows reads: its widest row's width (a tree node may read fewer keys than one before
    it)."""
    return key_width(max(row.num_keys for row in rows), block)


def mixed_widths(rows: list[Row], block: int) -> bool:
    """Whether a call's rows would read different widths as steps (only where widths_free lets them share a call)."""
    return len({key_width(row.num_keys, block) for row in rows}) > 1


@dataclass
class CallInputs:
    """The tensors one call reads, at fixed addresses (a CUDA graph replays reading these). All but the ids
    live in one buffer, so a call's inputs cross to a GPU in one copy; which keys a row sees is computed
    from its count on the device (inside the graph)."""

    ids: torch.Tensor  # (1, S): S = call_rows(device)
    packed: torch.Tensor  # (3·S + S·W,): positions, write_at, counts, order
    keys: torch.Tensor  # (W,): 0 … W−1
    # On a CPU, the call's key sets (attend_sets): the text's prefix, read by every causal and filler row (index
    # None), then one per tree or rival row, its own keys in order: (the rows reading it, its index (W,) or None)
    sets: tuple[tuple[tuple[int, ...], torch.Tensor | None], ...] = ()
    mixed_widths: bool = False  # rows a step would run at different widths share this call (widths_free)

    @classmethod
    def empty(cls, width: int, device: torch.device) -> "CallInputs":
        long, rows = dict(dtype=torch.long, device=device), call_rows(torch.device(device))
        return cls(torch.zeros(1, rows, **long), torch.zeros(3 * rows + rows * width, **long),
                   torch.arange(width, **long))

    @property
    def num_rows(self) -> int:
        return self.ids.shape[1]

    @property
    def positions(self) -> torch.Tensor:
        return self.packed[: self.num_rows].view(1, -1)  # (1, S)

    @property
    def write_at(self) -> torch.Tensor:
        return self.packed[self.num_rows : 2 * self.num_rows]  # (S,): the slots the rows' keys go to

    @property
    def order(self) -> torch.Tensor:
        return self.packed[3 * self.num_rows :].view(self.num_rows, -1)  # (S, W): each row's key slots, visible first

    @property
    def visible(self) -> torch.Tensor:
        counts = self.packed[2 * self.num_rows : 3 * self.num_rows]  # (S,): how many keys each row sees
        return (self.keys.view(1, -1) < counts.view(-1, 1)).view(self.num_rows, 1, 1, -1)  # (S, 1, 1, W) bool

    def attention_kwargs(self) -> dict:
        """What slots_attention reads of this call besides its mask, as a model's forward passes it on."""
        return {"specviz_order": self.order, "specviz_sets": self.sets, "specviz_mixed_widths": self.mixed_widths}


def shares_key_sets(device: torch.device, graphed: bool = False) -> bool:
    """Whether calls carry their key sets (attend_sets): on a CPU, eagerly. A CUDA graph replays one control
    flow for every call of its width, so graphed calls (and CUDA's) gather each row's keys (attend_gathered)."""
    return device.type == "cpu" and not graphed


def widths_free(cache: "SlotCache") -> bool:
    """Whether no row's result can depend on its call's key width in this cache, so rows either side of a key block's
    edge may share a call (group_calls): on a CPU, eagerly, where fixed_rows.attend computes the attention, which
    reads each row's own visible keys and nothing past them (its test holds the width to that); every other part of
    a call works row by row over the hidden dimension. Not where the attention is torch's products over the width
    (attend_sets, attend_gathered: their kernels may sum a row's weighted values in another order at another width),
    nor in a CUDA graph (captured per width). A cache not yet written to says no: its first call is split as a step
    would be, exact either way."""
    if cache.graphed or not cache.layers or not cache.layers[0].is_initialized:
        return False
    keys = cache.layers[0].keys  # (1, kv, L, D)
    return keys.device.type == "cpu" and attention_serves(keys.dtype, keys.shape[-1])


def to_device(values: Sequence, device: torch.device) -> torch.Tensor:
    """Host ints (a list, or nested lists) as a long tensor on `device`, without waiting for the device. torch's
    blocking copy to a GPU synchronises the stream after it, so the host would wait for every queued kernel (a
    verify's graph, a draft's) before it could queue the next; a non-blocking copy from pageable memory is staged by
    the driver before the call returns (the CUDA runtime's documented behaviour), so the values cannot change under
    it. On a CPU: no copy at all."""
    return torch.tensor(values, dtype=torch.long).to(device, non_blocking=True)


def fill_inputs(inputs: CallInputs, rows: list[Row], ids: torch.Tensor, trash: int, graphed: bool = False) -> None:
    """Write one call's rows into its inputs; filler rows read key 0 and write trash slots. Built in numpy, one copy
    to the device: a call's bookkeeping is a dozen small arrays, each a dispatched operation in torch (on a GPU the
    host's time between graph replays)."""
    width, num_rows = inputs.keys.shape[0], inputs.num_rows
    filler = num_rows - len(rows)
    order = np.tile(np.arange(width, dtype=np.int64), (num_rows, 1))  # (S, W)
    for index, row in enumerate(rows):
        if row.extra:
            order[index, row.prefix : row.num_keys] = row.extra
    counts = np.array([row.num_keys for row in rows] + [1] * filler, dtype=np.int64)  # (S,)
    order[np.arange(width) >= counts[:, None]] = 0  # hidden keys read slot 0
    positions = [row.position for row in rows] + [0] * filler  # (S,)
    write_at = [row.slot for row in rows] + list(range(trash, trash + filler))  # (S,)
    packed = np.concatenate([np.array(positions + write_at, dtype=np.int64), counts, order.reshape(-1)])
    inputs.packed.copy_(torch.from_numpy(packed), non_blocking=True)  # one copy to the device, not waited for (to_device)
    inputs.ids[0, : len(rows)].copy_(ids)
    inputs.ids[0, len(rows) :] = 0
    inputs.sets = ()
    if shares_key_sets(inputs.keys.device, graphed):
        own = [index for index, row in enumerate(rows) if row.extra]
        inputs.sets = ((tuple(index for index in range(num_rows) if index not in own), None),
                       *(((index,), torch.from_numpy(order[index].copy())) for index in own))


# ---- the cache -----------------------------------------------------------------------------------

class SlotCache(StaticCache):
    """transformers' StaticCache whose calls write their rows' keys where the caller says (filler rows at
    trash slots past the end); `length`, the text's, is a Python int the engine crops, as a DynamicCache's."""

    def __init__(self, config, capacity: int, graphed: bool = False):
        super().__init__(config=config, max_cache_len=capacity + SLOTS)  # SLOTS trash slots past the end
        self.capacity = capacity
        self.graphed = graphed  # each call captured once as a CUDA graph, then replayed
        self.length = 0
        self.write_at: torch.Tensor | None = None  # (S,), set before each call
        self.graphs: dict[tuple, object] = {}  # CUDA only: slot_calls.Captured per (width, variant)
        self.inputs: dict[object, CallInputs] = {}  # per width; a head's drafting chain's per (width, "chain", step)
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
                    specviz_order: torch.Tensor | None = None, specviz_mixed_widths: bool = False,
                    **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention signature. In a slots call: query (1, H, S, D), key and value the whole
    cache (1, kv, L, D), specviz_order (S, W) and the mask (S, 1, 1, W) → (1, S, H, D). Any other forward
    (transformers' generate(), a prompt pass, the load-time check) goes to outside_slots."""
    if kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None:
        raise ValueError("slots compute plain softmax attention; this model needs soft-capping or sinks")
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    with torch.profiler.record_function(PROFILE_LABEL) if torch.autograd.profiler._is_profiler_enabled \
            else contextlib.nullcontext():  # one labelled block for `specviz profile`; free otherwise
        if specviz_order is None:
            return outside_slots(query, key, value, attention_mask, scaling), None
        return attend_rows(query, key, value, specviz_order, attention_mask, scaling, kwargs.get("specviz_sets"),
                           specviz_mixed_widths), None


def attend_rows(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, order: torch.Tensor,
                visible: torch.Tensor, scaling: float, sets: tuple = (), mixed_widths: bool = False) -> torch.Tensor:
    """One call's attention: query (1, H, S, D), each row over the keys `order` (S, W) names in key and value
    (1, kv, L, D), `visible` (S, 1, 1, W) of them → (1, S, H, D). In float32 or bfloat16 on a CPU, one C call computes each row
    over its own keys where the cache holds them (fixed_rows.attend); else, with the call's key `sets` (a CPU's
    calls carry them: attend_sets), rows that read the same keys share one product; else each row gathers its own.
    A call of `mixed_widths` (widths_free) is the C call's alone: torch's products would see its width."""
    out = attend(query, key, value, order, visible, scaling)  # a CPU (float32, bfloat16): one C call (fixed_rows)
    if out is not None:
        return out
    if mixed_widths:
        raise RuntimeError("a slots call of rows of several key widths needs fixed_rows' attention, which cannot "
                           "serve here: its rows would round by the call's width")
    if sets:
        return attend_sets(query, key, value, sets, visible, scaling)
    return attend_gathered(query, key, value, order, visible, scaling)


def attend_gathered(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, order: torch.Tensor,
                    visible: torch.Tensor, scaling: float) -> torch.Tensor:
    """attend_rows with every row's keys gathered: two batched matrix products, one independent product per
    (row, KV head), and a float32 softmax per row, not SDPA: CPU SDPA in float32 computed batch entries 4–7
    differently from entry 0 on two threads (its work split across threads), so a row's result depended on its
    place in the call. Its control flow never depends on the rows, so a CUDA graph replays it for any call."""
    _, num_heads, num_rows, head_dim = query.shape
    num_kv_heads, width = key.shape[1], order.shape[1]
    group = num_heads // num_kv_heads
    index = order.reshape(-1)  # (S·W,)
    keys = key[0].index_select(1, index).view(num_kv_heads, num_rows, width, head_dim).transpose(0, 1)  # (S, kv, W, D)
    values = value[0].index_select(1, index).view(num_kv_heads, num_rows, width, head_dim).transpose(0, 1)
    rows = query[0].transpose(0, 1).reshape(num_rows, num_kv_heads, group, head_dim) * scaling  # (S, kv, G, D)
    scores = torch.matmul(rows, keys.transpose(-1, -2))  # (S, kv, G, W)
    scores = scores.masked_fill(~visible.view(num_rows, 1, 1, width), float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)  # (S, kv, G, W)
    return torch.matmul(weights, values).view(1, num_rows, num_heads, head_dim)  # (S, kv, G, D) → (1, S, H, D)


def attend_sets(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sets: tuple,
                visible: torch.Tensor, scaling: float) -> torch.Tensor:
    """attend_rows on a CPU, one key set at a time: the keys a set's rows read, copied into one (kv, W, D) block
    (index_select, whatever the set), then every query row of the call against that block in two products of one
    shape, (kv, G·S, D)·(kv, D, W) and (kv, G·S, W)·(kv, W, D), and a float32 softmax per row; each row keeps its
    own set's result. Why a row rounds as it would alone: the products' shapes and operand layouts never change
    (S rows, width W), a row's visible keys sit at the indices a step at its place reads, and its hidden keys
    weigh exactly 0 (exp(−inf)). A chain's call is one set, so a step or a verify costs two small products per
    layer, not S·kv of them over S gathered copies (attend_gathered: ~3× the time here). A rival or tree row adds
    a set."""
    _, num_heads, num_rows, head_dim = query.shape
    num_kv_heads, width = key.shape[1], visible.shape[-1]
    group = num_heads // num_kv_heads
    rows = (query[0] * scaling).reshape(num_kv_heads, group * num_rows, head_dim)  # (kv, G·S, D): row g·S + s
    hidden = ~visible.view(1, 1, num_rows, width)  # (1, 1, S, W)
    out = None  # (kv, G, S, D)
    for members, index in sets:
        if not members:
            continue
        if index is None:
            index = prefix_index(width, key.shape[2])
        keys = key[0].index_select(1, index)  # (kv, W, D)
        values = value[0].index_select(1, index)
        scores = torch.matmul(rows, keys.transpose(-1, -2)).view(num_kv_heads, group, num_rows, width)  # (kv, G, S, W)
        weights = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1, dtype=torch.float32)
        result = torch.matmul(weights.to(values.dtype).view(num_kv_heads, group * num_rows, width), values)  # (kv, G·S, D)
        result = result.view(num_kv_heads, group, num_rows, head_dim)
        if len(members) == num_rows:
            out = result
            continue
        if out is None:
            out = torch.zeros_like(result)
        chosen = torch.tensor(members)
        out[:, :, chosen] = result[:, :, chosen]
    return out.permute(2, 0, 1, 3).reshape(1, num_rows, num_heads, head_dim)  # (S, kv, G, D) → (1, S, H, D)


@functools.lru_cache(maxsize=256)
def prefix_index(width: int, length: int) -> torch.Tensor:
    """Slots 0 … width−1, those past a cache of `length` read its last (hidden keys, weighing 0): (W,)."""
    with torch.inference_mode(False):
        return torch.arange(width).clamp_(max=length - 1)


def outside_slots(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
                  scaling: float) -> torch.Tensor:
    """A forward of a slots target that is not a slots call: query (b, H, M, D), key and value (b, kv, N, D),
    the mask None (causal, the queries the last M of the N keys) or 4D → (b, M, H, D). Decoding-sized ones
    (one sequence, at most MAX_ROWWISE rows: generate(), its assisted verify, the load-time check) compute
    every row as a slots call does, so their tokens are the lanes'; a longer one is a prompt's own pass."""
    batch, _, num_rows, _ = query.shape
    num_keys = key.shape[2]
    if batch > 1 or num_rows > MAX_ROWWISE:
        # A whole prompt from an empty cache is plain causal: SDPA's causal kernel skips the masked half, where a
        # bool mask computes it. Both lanes read one pass.
        whole = attention_mask is None and num_rows == num_keys
        mask = None if whole else (attention_mask if attention_mask is not None
                                   else causal_after(num_keys, num_rows, query.device))
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=whole, scale=scaling,
                                             enable_gqa=True)
        return out.transpose(1, 2)  # (b, M, H, D)
    calls = causal_calls(num_keys, num_rows, query.device) if attention_mask is None \
        else mask_calls(attention_mask, num_keys, query.device)
    outs, done = [], 0
    for num, inputs in calls:
        mine = query.transpose(1, 2)[:, done : done + num]  # (1, m, H, D)
        padded = torch.cat([mine, mine.new_zeros(1, inputs.num_rows - num, *mine.shape[2:])], dim=1)  # (1, S, H, D)
        outs.append(attend_rows(padded.transpose(1, 2), key, value, inputs.order, inputs.visible, scaling,
                                inputs.sets)[:, :num])
        done += num
    return torch.cat(outs, dim=1)  # (1, M, H, D)


def calls_over(rows: list[Row], device: torch.device) -> list[tuple[int, CallInputs]]:
    """The calls a slots forward over these rows would make: (how many real rows, its inputs), in row order."""
    calls = []
    for rows_of_call in group_calls(rows, key_block(device), call_rows(device)):
        inputs = CallInputs.empty(call_width(rows_of_call, key_block(device)), device)
        fill_inputs(inputs, rows_of_call, inputs.ids.new_zeros(len(rows_of_call)), trash=0)  # only the keys are read
        calls.append((len(rows_of_call), inputs))
    return calls


@functools.lru_cache(maxsize=64)
def causal_calls(num_keys: int, num_rows: int, device: torch.device) -> list[tuple[int, CallInputs]]:
    """calls_over causal rows, the last num_rows of num_keys positions: made once per shape, not per layer. Made as
    normal tensors even inside inference mode, so a later forward that tracks gradients may read them too."""
    with torch.inference_mode(False):
        return calls_over([Row(0, 0, num_keys - num_rows + 1 + i) for i in range(num_rows)], device)


# ---- masks -------------------------------------------------------------------------------------------

# The last mask seen and its calls: every layer of one forward gets the same mask object. A
# weak reference, compared by identity, so a freed mask's id reused later never matches.
_last_calls: tuple[weakref.ref, torch.device, list[tuple[int, CallInputs]]] | None = None


def mask_calls(mask: torch.Tensor, num_keys: int, device: torch.device) -> list[tuple[int, CallInputs]]:
    """calls_over the rows of a 4D mask (1, 1, M, ≥N), bool (True = visible) or additive (0 = visible, the
    dtype's minimum = hidden), each reading its visible keys in order; made once per forward."""
    global _last_calls
    last = _last_calls  # one read: another thread may replace it meanwhile
    if last is not None and last[0]() is mask and last[1] == device:
        return last[2]
    rows = mask[0, 0, :, :num_keys]  # (M, N)
    visible = rows if rows.dtype == torch.bool else rows == 0
    if rows.dtype != torch.bool and bool((rows[~visible] > torch.finfo(rows.dtype).min / 2).any()):
        raise ValueError("rowwise attention takes masks of 0 and −inf only, not additive biases")
    calls = calls_over([Row(0, 0, 0, tuple(row.nonzero().view(-1).tolist())) for row in visible.cpu()], device)
    _last_calls = (weakref.ref(mask), device, calls)
    return calls


def rowwise_mask(**kwargs) -> torch.Tensor | None:
    """transformers' mask hook for slots targets: None for a plain causal forward whose queries are the
    last of its keys (outside_slots reads causality from the shapes), else the bool mask SDPA gets. A slots
    call passes its own 4D mask, which transformers hands to the attention as it is."""
    padding = kwargs.get("attention_mask")
    plain = kwargs.get("mask_function") is causal_mask_function and (padding is None or bool(padding.all()))
    if plain and kwargs.get("kv_offset", 0) == 0 and kwargs["q_offset"] + kwargs["q_length"] == kwargs["kv_length"]:
        return None
    return sdpa_mask(**{**kwargs, "allow_is_causal_skip": False})


@functools.lru_cache(maxsize=16)
def causal_after(num_keys: int, num_rows: int, device: torch.device) -> torch.Tensor:
    """SDPA's bool mask (M, N) for queries that are the last num_rows of num_keys positions, fewer than the
    keys (normal tensors, as causal_calls makes them)."""
    with torch.inference_mode(False):
        positions = torch.arange(num_keys, device=device)  # (N,)
        return positions.view(1, -1) <= positions[num_keys - num_rows :].view(-1, 1)  # (M, N)


AttentionInterface.register(SLOTS_LAYOUT, slots_attention)
AttentionMaskInterface.register(SLOTS_LAYOUT, rowwise_mask)


def uses_slots(model) -> bool:
    return getattr(model.config, "_attn_implementation", None) == SLOTS_LAYOUT
