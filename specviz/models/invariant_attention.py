"""Attention in which a row's result does not depend on the rows computed beside it.

A (γ+1)-token verify must give each position the logits a 1-token step gives there (DESIGN.md §3).
SDPA does not: its kernels and summation order change with the query count and the key count, so
16-bit greedy lanes parted at near-ties. Two layouts, both registered with transformers'
AttentionInterface (so the baseline, the verify, transformers' own `generate()` and the reference
lane all run the one the target is given; specviz.models.invariance picks it by measuring):

- GROUPED ("specviz_grouped", cheapest): one matrix product per KV head over all its query rows,
  the keys after a row masked to −inf so they trail, softmax in float32. Invariant wherever the
  matrix kernels' summation order does not depend on the row count (measured: bfloat16 on an AMD
  EPYC with avx512_bf16; not float32 with MKL).
- FIXED ("specviz_fixed", invariant by construction): every attention call has one shape: the
  rows in blocks of PADDED_ROWS slots (zeros beside them), the keys rounded up to KEY_BLOCK (zeros
  past the cache), SDPA over a boolean mask. A step and each verify row then run the very same
  kernel on the same numbers, whatever the device picks for that shape.

A forward with any other mask (rival guesses, which see the text and themselves; padding) gathers
each row's visible keys to a prefix and computes it in its layout's step shape. A prompt's own
pass is computed the same way; both lanes run the same one, so they read the same cache.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, causal_mask_function, sdpa_mask

GROUPED, FIXED = "specviz_grouped", "specviz_fixed"  # the names transformers knows the layouts by
LAYOUTS = (GROUPED, FIXED)  # cheapest first
PADDED_ROWS = 8  # FIXED: query slots per call (also the linear layers' padding, specviz.models.invariance)
KEY_BLOCK = 64  # FIXED: key counts are rounded up to this
PROFILE_LABEL = "specviz::rowwise_attention"  # how the attention shows in torch's profiler


# ---- GROUPED -----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def keys_after(num_keys: int, num_rows: int, device: torch.device) -> torch.Tensor:
    """(M, N) True where a key lies after a query row, the rows being the last M of N positions:
    made once per shape (every layer of a forward, and the next round's verify, reuse it)."""
    positions = torch.arange(num_keys, device=device)  # (N,)
    return positions.view(1, -1) > positions[num_keys - num_rows :].view(-1, 1)


def grouped_causal(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float) -> torch.Tensor:
    """Causal attention, the M queries being the last M of the N keys: (b, M, H, D)."""
    b, num_heads, num_rows, head_dim = query.shape
    num_kv_heads, num_keys = key.shape[1], key.shape[2]
    group = num_heads // num_kv_heads
    queries = (query * scaling).reshape(b, num_kv_heads, group * num_rows, head_dim)  # (b, kv, G·M, D)
    scores = torch.matmul(queries, key.transpose(-1, -2)).view(b, num_kv_heads, group, num_rows, num_keys)
    if num_rows > 1:
        scores = scores.masked_fill(keys_after(num_keys, num_rows, query.device), float("-inf"))
    # float32 softmax: a 16-bit one was measured to round some rows differently at other lengths
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)  # (b, kv, G, M, N)
    out = torch.matmul(weights.view(b, num_kv_heads, group * num_rows, num_keys), value)  # (b, kv, G·M, D)
    return out.view(b, num_kv_heads, group, num_rows, head_dim).permute(0, 3, 1, 2, 4).reshape(
        b, num_rows, num_heads, head_dim)


def grouped_gathered(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, hidden: torch.Tensor,
                     scaling: float) -> torch.Tensor:
    """Rows with their own keys (b, kv, M, W, D), hidden (b, M, W) past them: per row and KV head one
    product of the G rows a step's grouped_causal computes: (b, M, H, D)."""
    b, num_heads, num_rows, head_dim = query.shape
    num_kv_heads, width = keys.shape[1], keys.shape[3]
    group = num_heads // num_kv_heads
    queries = (query * scaling).view(b, num_kv_heads, group, num_rows, head_dim).transpose(2, 3)  # (b, kv, M, G, D)
    scores = torch.matmul(queries, keys.transpose(-1, -2))  # (b, kv, M, G, W)
    scores = scores.masked_fill(hidden.view(b, 1, num_rows, 1, width), float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
    out = torch.matmul(weights, values)  # (b, kv, M, G, D)
    return out.permute(0, 2, 1, 3, 4).reshape(b, num_rows, num_heads, head_dim)


# ---- FIXED -------------------------------------------------------------------------------------

def key_width(num_keys: int) -> int:
    """The keys a FIXED call attends over: the count rounded up to KEY_BLOCK."""
    return -(-num_keys // KEY_BLOCK) * KEY_BLOCK


@functools.lru_cache(maxsize=64)
def fixed_blocks(num_keys: int, num_rows: int, device: torch.device) -> list[tuple[int, int, int, torch.Tensor]]:
    """The rows (the last num_rows of num_keys positions) in blocks of at most PADDED_ROWS sharing a
    key width: (first row, end row, width, visible (1, 1, P, W)). Pad slots see every key."""
    blocks, first, row = [], num_keys - num_rows, 0
    while row < num_rows:
        width, stop = key_width(first + row + 1), row
        while stop < num_rows and stop - row < PADDED_ROWS and key_width(first + stop + 1) == width:
            stop += 1
        positions = torch.full((PADDED_ROWS,), width - 1, device=device)  # (P,)
        positions[: stop - row] = torch.arange(first + row, first + stop, device=device)
        visible = torch.arange(width, device=device).view(1, -1) <= positions.view(-1, 1)  # (P, W)
        blocks.append((row, stop, width, visible.view(1, 1, PADDED_ROWS, width)))
        row = stop
    return blocks


def padded_keys(key: torch.Tensor, width: int) -> torch.Tensor:
    """The first `width` keys (or values) along dim 2, zeros past the last."""
    if key.shape[2] >= width:
        return key[:, :, :width]
    return torch.cat([key, key.new_zeros(*key.shape[:2], width - key.shape[2], *key.shape[3:])], dim=2)


def padded_rows(rows: torch.Tensor) -> torch.Tensor:
    """Query rows (b, H, m, D) in PADDED_ROWS slots, zeros after them: (b, H, P, D)."""
    b, num_heads, num_rows, head_dim = rows.shape
    return torch.cat([rows, rows.new_zeros(b, num_heads, PADDED_ROWS - num_rows, head_dim)], dim=2)


def fixed_causal(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float) -> torch.Tensor:
    """Causal attention with every SDPA call of one shape (P slots × a KEY_BLOCK multiple): (b, M, H, D)."""
    b, num_heads, num_rows, head_dim = query.shape
    outs = []
    for start, stop, width, visible in fixed_blocks(key.shape[2], num_rows, query.device):
        out = F.scaled_dot_product_attention(padded_rows(query[:, :, start:stop]), padded_keys(key, width),
                                             padded_keys(value, width), attn_mask=visible, scale=scaling,
                                             enable_gqa=True)  # (b, H, P, D)
        outs.append(out[:, :, : stop - start])
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)  # (b, H, M, D)
    return out.transpose(1, 2).reshape(b, num_rows, num_heads, head_dim)


def fixed_gathered(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, hidden: torch.Tensor,
                   scaling: float) -> torch.Tensor:
    """Rows with their own keys (b, kv, M, W, D), hidden (b, M, W) past them: each row in slot 0 of
    its own FIXED call (the rows as SDPA's batch), as a step at its place runs it: (b, M, H, D)."""
    b, num_heads, num_rows, head_dim = query.shape
    num_kv_heads, width = keys.shape[1], keys.shape[3]
    padded_width = key_width(width)
    # (b·M, kv, W', D): each row its own batch entry, zeros past its keys as padded_keys gives a step
    keep = ~hidden.view(b, 1, num_rows, width, 1)
    row_keys = padded_keys((keys * keep).transpose(1, 2).reshape(b * num_rows, num_kv_heads, width, head_dim), padded_width)
    row_values = padded_keys((values * keep).transpose(1, 2).reshape(b * num_rows, num_kv_heads, width, head_dim), padded_width)
    rows = padded_rows(query.transpose(1, 2).reshape(b * num_rows, num_heads, 1, head_dim))  # (b·M, H, P, D)
    visible = torch.ones(b * num_rows, 1, PADDED_ROWS, padded_width, dtype=torch.bool, device=query.device)
    visible[:, 0, 0] = torch.nn.functional.pad(~hidden.reshape(b * num_rows, width), (0, padded_width - width))
    out = F.scaled_dot_product_attention(rows, row_keys, row_values, attn_mask=visible, scale=scaling,
                                         enable_gqa=True)  # (b·M, H, P, D)
    return out[:, :, 0].reshape(b, num_rows, num_heads, head_dim)


# ---- masks, dispatch, registration ---------------------------------------------------------------

@dataclass(frozen=True)
class MaskPlan:
    """How the rows of a masked forward read their keys: `order` (b, M, W) key indices, each row's
    visible keys first and in order; `hidden` (b, M, W) True past them."""

    order: torch.Tensor
    hidden: torch.Tensor


# The last mask planned and its plan: every layer of one forward gets the same mask object. A
# weak reference, compared by identity, so a freed mask's id reused later never matches.
_last_plan: tuple[weakref.ref, MaskPlan] | None = None


def plan_for(mask: torch.Tensor, num_keys: int) -> MaskPlan:
    """The plan for a 4D mask (b, 1, M, ≥N), bool (True = visible) or additive (0 = visible, the
    dtype's minimum = hidden), made once per forward."""
    global _last_plan
    last = _last_plan  # one read: another thread may replace it meanwhile
    if last is not None and last[0]() is mask:
        return last[1]
    plan = make_plan(mask, num_keys)
    _last_plan = (weakref.ref(mask), plan)
    return plan


def make_plan(mask: torch.Tensor, num_keys: int) -> MaskPlan:
    rows = mask[:, 0, :, :num_keys]  # (b, M, N)
    if rows.dtype == torch.bool:
        visible = rows
    else:
        visible = rows == 0
        if bool((rows[~visible] > torch.finfo(rows.dtype).min / 2).any()):
            raise ValueError("rowwise attention takes masks of 0 and −inf only, not additive biases")
    counts = visible.sum(-1, keepdim=True)  # (b, M, 1)
    width = max(1, int(counts.max()))
    order = torch.argsort((~visible).to(torch.int8), dim=-1, stable=True)[..., :width]  # (b, M, W)
    hidden = torch.arange(width, device=mask.device) >= counts  # (b, M, W)
    return MaskPlan(order, hidden)


def gather_keys(key: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Each row's keys (or values) in `order` (b, M, W): (b, kv, M, W, D). One sequence (every
    decoding forward) copies whole key vectors with index_select, far cheaper than an element-wise gather."""
    b, num_kv_heads, num_keys, head_dim = key.shape
    num_rows, width = order.shape[1:]
    if b == 1:
        return key.index_select(2, order.reshape(-1)).view(1, num_kv_heads, num_rows, width, head_dim)
    index = order.view(b, 1, num_rows, width, 1).expand(b, num_kv_heads, num_rows, width, head_dim)
    return key.unsqueeze(2).expand(b, num_kv_heads, num_rows, num_keys, head_dim).gather(3, index)


CAUSAL = {GROUPED: grouped_causal, FIXED: fixed_causal}
GATHERED = {GROUPED: grouped_gathered, FIXED: fixed_gathered}


def attend(layout: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
           attention_mask: torch.Tensor | None, scaling: float | None) -> torch.Tensor:
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    if attention_mask is None:
        return CAUSAL[layout](query, key, value, scaling)
    plan = plan_for(attention_mask, key.shape[2])
    return GATHERED[layout](query, gather_keys(key, plan.order), gather_keys(value, plan.order), plan.hidden, scaling)


def attention_for(layout: str):
    def rowwise_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                          **kwargs) -> tuple[torch.Tensor, None]:
        """transformers' attention signature: query (b, H, M, D), key and value (b, H_kv, N, D) →
        (b, M, H, D). Eval only (no dropout): it serves the target's decoding forwards. Plain softmax
        attention: a model that asks for soft-capping or attention sinks is refused, never misread."""
        if kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None:
            raise ValueError(f"{layout} computes plain softmax attention; this model needs soft-capping or sinks")
        if torch.autograd.profiler._is_profiler_enabled:  # one labelled block for `specviz profile`; free otherwise
            with torch.profiler.record_function(PROFILE_LABEL):
                return attend(layout, query, key, value, attention_mask, scaling), None
        return attend(layout, query, key, value, attention_mask, scaling), None

    return rowwise_attention


def rowwise_mask(**kwargs) -> torch.Tensor | None:
    """transformers' mask hook for these layouts: None for a plain causal forward whose queries are
    the last of its keys (the layouts read causality from the shapes), else the bool mask SDPA gets."""
    padding = kwargs.get("attention_mask")
    plain = kwargs.get("mask_function") is causal_mask_function and (padding is None or bool(padding.all()))
    if plain and kwargs.get("kv_offset", 0) == 0 and kwargs["q_offset"] + kwargs["q_length"] == kwargs["kv_length"]:
        return None
    return sdpa_mask(**{**kwargs, "allow_is_causal_skip": False})


for _layout in LAYOUTS:
    AttentionInterface.register(_layout, attention_for(_layout))
    AttentionMaskInterface.register(_layout, rowwise_mask)
