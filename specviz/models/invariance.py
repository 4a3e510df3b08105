"""A target forward in which every row rounds as it would alone: batch invariance (DESIGN.md §3).

Greedy speculative decoding equals the target alone only if the logits a (γ+1)-token verify gives
position i are bitwise those a 1-token step at position i gives. Two kinds of op break that in
16-bit on CPUs and GPUs alike, because their kernels change with the number of rows computed:
- attention: SDPA's kernels and reduction order change with the query count and key length;
- some matrix products: oneDNN/cuBLAS pick a kernel (and so a summation order) by M, the number
  of rows (measured: SmolLM2's down_proj, 576 × 1536, differs from M = 3 on an AMD EPYC with
  avx512_bf16; F.linear at K = 576 never does there; in float32 MKL's every shape does).

So the target gets (make_batch_invariant):
- `rowwise_attention`, registered with transformers' AttentionInterface, so the baseline, the
  verify, transformers' own `generate()` and the reference lane all run it. In 16-bit, one matrix
  product per KV head over all its query rows, masked keys trailing, softmax in float32 (measured
  invariant: grouped_causal). In float32, MKL's products change their summation order with the row
  count and the key count, so every product has one fixed shape: a row sits among PADDED_ROWS
  slots and attends over its key count rounded up to KEY_BLOCK (padded_causal), by construction.
  Rows with other masks (rival guesses, padding) read their own keys, gathered, in the same shapes;
- in float32 on a CPU, every linear layer runs through oneDNN with its weights packed once: MKL's
  F.linear costs ~2× at 4 rows what it costs at 1, oneDNN's packed kernel ~1.0-1.2× (the whole
  verify: v 1.49 → 0.93 on AVX-512, 1.55 → 1.16 on AVX2, measured), and its rows are M-invariant
  for most shapes;
- a row padding for every linear layer whose rows a quick probe shows to depend on M: such a
  layer always runs at PADDED_ROWS rows (a step pads its one row with zeros; a verify of 2-8
  rows likewise), so every row of a step or a verify is computed by the same kernel.
A prompt's own pass (more than MAX_PADDED_ROWS rows) uses the plain kernels: both lanes run the
same prompt pass, so they read the same cache either way. measure() says, per loaded target,
whether a verify is bitwise a step on this machine (a device whose kernels defeat all this, say
a GPU, is reported, not assumed). SPECVIZ_BATCH_INVARIANT=0 leaves targets as transformers loads
them, to compare.
"""

from __future__ import annotations

import copy
import functools
import os
import weakref
from dataclasses import dataclass

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.masking_utils import AttentionMaskInterface, causal_mask_function, sdpa_mask
from transformers.pytorch_utils import Conv1D

ATTENTION = "specviz_rowwise"  # the name transformers knows the attention by
PADDED_ROWS = 8  # a padded layer always computes this many rows: covers γ ≤ 5 with 2 rival guesses
KEY_BLOCK = 64  # float32 attention runs over key counts rounded up to this (padded_causal)
MAX_PADDED_ROWS = 32  # more rows than this is a prompt's own pass: plain kernels
SWITCH_ENV = "SPECVIZ_BATCH_INVARIANT"  # "0": leave 16-bit targets as transformers loads them (to compare)
PROFILE_LABEL = "specviz::rowwise_attention"  # how the attention shows in torch's profiler


def grouped_causal(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float) -> torch.Tensor:
    """Causal attention where the M queries are the last M of the N keys: (b, M, H, D).

    One matrix product per KV head over all its query rows (G·M of them), with the keys hidden
    from a row masked to −inf *after* it, so every row sums over its own visible keys in the same
    order as a 1-token step would, and the hidden ones add exact zeros at the end."""
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


@functools.lru_cache(maxsize=64)
def causal_blocks(num_keys: int, num_rows: int, group: int, device: torch.device) -> list[tuple]:
    """float32's fixed shapes: the rows (the last num_rows of num_keys positions) in chunks of at
    most PADDED_ROWS that share a key width (their length rounded up to KEY_BLOCK), each with its
    (G·P, W) mask of keys after a row. Pad slots see every key (their results are dropped)."""
    blocks, first, row = [], num_keys - num_rows, 0
    while row < num_rows:
        width = key_width(first + row + 1)
        stop = row
        while stop < num_rows and stop - row < PADDED_ROWS and key_width(first + stop + 1) == width:
            stop += 1
        positions = torch.full((PADDED_ROWS,), width - 1, device=device)  # (P,)
        positions[: stop - row] = torch.arange(first + row, first + stop, device=device)
        hidden = torch.arange(width, device=device).view(1, -1) > positions.view(-1, 1)  # (P, W)
        blocks.append((row, stop, width, hidden.repeat(group, 1)))  # (G·P, W)
        row = stop
    return blocks


def key_width(num_keys: int) -> int:
    """Keys a float32 row attends over: its own count rounded up to KEY_BLOCK (zeros past the cache)."""
    return -(-num_keys // KEY_BLOCK) * KEY_BLOCK


def padded_keys(key: torch.Tensor, width: int) -> torch.Tensor:
    """The first `width` keys (or values), zeros past the last: (b, kv, W, D)."""
    if key.shape[2] >= width:
        return key[:, :, :width]
    return torch.cat([key, key.new_zeros(*key.shape[:2], width - key.shape[2], key.shape[3])], dim=2)


def padded_causal(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float) -> torch.Tensor:
    """grouped_causal with every matrix product of one fixed shape, (G·P, D) × (D, W): float32's
    kernels (MKL) change their summation order with the row count *and* the key count, so a row is
    always computed among PADDED_ROWS slots (zeros beside it) over its key count rounded up to
    KEY_BLOCK (zeros past the cache). A step and a verify row then run the very same product: (b, M, H, D)."""
    b, num_heads, num_rows, head_dim = query.shape
    num_kv_heads, num_keys = key.shape[1], key.shape[2]
    group = num_heads // num_kv_heads
    queries = (query * scaling).view(b, num_kv_heads, group, num_rows, head_dim)
    outs = []
    for start, stop, width, hidden in causal_blocks(num_keys, num_rows, group, query.device):
        rows = queries[:, :, :, start:stop]  # (b, kv, G, m, D)
        filler = rows.new_zeros(b, num_kv_heads, group, PADDED_ROWS - (stop - start), head_dim)
        rows = torch.cat([rows, filler], dim=3).view(b * num_kv_heads, group * PADDED_ROWS, head_dim)
        keys = padded_keys(key, width).reshape(b * num_kv_heads, width, head_dim)
        values = padded_keys(value, width).reshape(b * num_kv_heads, width, head_dim)
        scores = torch.bmm(rows, keys.transpose(1, 2)).masked_fill(hidden, float("-inf"))  # (b·kv, G·P, W)
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
        out = torch.bmm(weights, values).view(b, num_kv_heads, group, PADDED_ROWS, head_dim)
        outs.append(out[:, :, :, : stop - start])  # (b, kv, G, m, D)
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=3)  # (b, kv, G, M, D)
    return out.permute(0, 3, 1, 2, 4).reshape(b, num_rows, num_heads, head_dim)


@functools.lru_cache(maxsize=64)
def keys_after(num_keys: int, num_rows: int, device: torch.device) -> torch.Tensor:
    """(M, N) True where a key lies after a query row, the rows being the last M of N positions:
    made once per shape (every layer of a forward, and the next round's verify, reuse it)."""
    positions = torch.arange(num_keys, device=device)  # (N,)
    return positions.view(1, -1) > positions[num_keys - num_rows :].view(-1, 1)


def gathered(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, order: torch.Tensor,
             hidden: torch.Tensor, scaling: float) -> torch.Tensor:
    """Attention for rows that see any set of keys: each row's visible keys gathered to a prefix
    (`order`: (b, M, W) key indices, visible first; `hidden`: (b, M, W) True past them), then one
    matrix product per row and KV head of the shape a 1-token step at that row's place uses
    (grouped_causal's G rows in 16-bit; padded_causal's G·P slots and rounded width in float32): (b, M, H, D)."""
    b, num_heads, num_rows, head_dim = query.shape
    num_kv_heads, num_keys = key.shape[1], key.shape[2]
    group, width = num_heads // num_kv_heads, order.shape[-1]
    slots = PADDED_ROWS if query.dtype == torch.float32 else 1
    queries = (query * scaling).view(b, num_kv_heads, group, num_rows, 1, head_dim).transpose(2, 3)  # (b, kv, M, G, 1, D)
    if slots > 1:  # each row in slot 0 of its own block, zeros in the others, keys to the rounded width
        queries = torch.cat([queries, queries.new_zeros(b, num_kv_heads, num_rows, group, slots - 1, head_dim)], dim=4)
        padded_width = key_width(width)
        order = torch.cat([order, order.new_zeros(b, num_rows, padded_width - width)], dim=-1)
        hidden = torch.cat([hidden, hidden.new_ones(b, num_rows, padded_width - width)], dim=-1)
        width = padded_width
    queries = queries.reshape(b, num_kv_heads, num_rows, group * slots, head_dim)
    index = order.view(b, 1, num_rows, width, 1).expand(b, num_kv_heads, num_rows, width, head_dim)
    keys = key.unsqueeze(2).expand(b, num_kv_heads, num_rows, num_keys, head_dim).gather(3, index)  # (b, kv, M, W, D)
    values = value.unsqueeze(2).expand(b, num_kv_heads, num_rows, num_keys, head_dim).gather(3, index)
    scores = torch.matmul(queries, keys.transpose(-1, -2))  # (b, kv, M, G·slots, W)
    mask = hidden.view(b, 1, num_rows, 1, width)
    if slots > 1:  # pad slots see every key, as in padded_causal
        mask = mask & (torch.arange(group * slots, device=query.device) % slots == 0).view(1, 1, 1, -1, 1)
    scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    out = torch.matmul(weights, values).view(b, num_kv_heads, num_rows, group, slots, head_dim)[..., 0, :]
    return out.permute(0, 2, 1, 3, 4).reshape(b, num_rows, num_heads, head_dim)


@dataclass(frozen=True)
class MaskPlan:
    """How the rows of a masked forward are computed: the leading rows whose keys are a growing
    prefix take grouped_causal over `prefix_keys` keys; the rest are gathered."""

    num_prefix: int
    prefix_keys: int
    order: torch.Tensor | None  # (b, M − num_prefix, W) key indices, visible first
    hidden: torch.Tensor | None  # (b, M − num_prefix, W) True past a row's visible keys


# The last mask planned and its plan: every layer of one forward gets the same mask object. A
# weak reference, compared by identity, so a freed mask's id reused later never matches.
_last_plan: tuple[weakref.ref, MaskPlan] | None = None


def plan_for(mask: torch.Tensor, num_keys: int) -> MaskPlan:
    """The plan for a 4D mask (b, 1, M, ≥N), bool (True = visible) or additive (0 = visible,
    the dtype's minimum = hidden), made once per forward: every layer gets the same mask object."""
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
    counts = visible.sum(-1)  # (b, M)
    positions = torch.arange(num_keys, device=mask.device)  # (N,)
    is_prefix = (visible == (positions < counts.unsqueeze(-1))).all(-1)  # (b, M)
    num_prefix = 0
    if visible.shape[0] == 1:  # one sequence: its leading rows that are plain causal rows
        steps = counts[0] - counts[0, 0] == torch.arange(counts.shape[1], device=mask.device)
        num_prefix = int((is_prefix[0] & steps).long().cumprod(0).sum())
    # the last prefix row sees them all: the prefix rows are the last of its keys
    prefix_keys = int(counts[0, 0]) + num_prefix - 1 if num_prefix else 0
    rest = visible[:, num_prefix:]  # (b, R, N)
    if rest.shape[1] == 0:
        return MaskPlan(num_prefix, prefix_keys, None, None)
    rest_counts = rest.sum(-1, keepdim=True)  # (b, R, 1)
    width = max(1, int(rest_counts.max()))
    order = torch.argsort((~rest).to(torch.int8), dim=-1, stable=True)[..., :width]  # (b, R, W)
    hidden = torch.arange(width, device=mask.device) >= rest_counts  # (b, R, W)
    return MaskPlan(num_prefix, prefix_keys, order, hidden)


def rowwise_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                      **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: query (b, H, M, D), key and value (b, H_kv, N, D) →
    (b, M, H, D). Eval only (no dropout): it serves the target's decoding forwards."""
    if torch.autograd.profiler._is_profiler_enabled:  # one labelled block for `specviz profile`; free otherwise
        with torch.profiler.record_function(PROFILE_LABEL):
            return attend(query, key, value, attention_mask, scaling)
    return attend(query, key, value, attention_mask, scaling)


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
           scaling: float | None) -> tuple[torch.Tensor, None]:
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    causal = padded_causal if query.dtype == torch.float32 else grouped_causal
    if attention_mask is None:
        return causal(query, key, value, scaling), None
    plan = plan_for(attention_mask, key.shape[2])
    parts = []
    if plan.num_prefix:
        keys = slice(0, plan.prefix_keys)
        parts.append(causal(query[:, :, : plan.num_prefix], key[:, :, keys], value[:, :, keys], scaling))
    if plan.order is not None:
        parts.append(gathered(query[:, :, plan.num_prefix :], key, value, plan.order, plan.hidden, scaling))
    return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0], None


def rowwise_mask(**kwargs) -> torch.Tensor | None:
    """transformers' mask hook for this attention: None for a plain causal forward whose queries
    are the last of its keys (rowwise_attention reads causality from the shapes), else the bool
    mask SDPA would get."""
    padding = kwargs.get("attention_mask")
    plain = kwargs.get("mask_function") is causal_mask_function and (padding is None or bool(padding.all()))
    if plain and kwargs.get("kv_offset", 0) == 0 and kwargs["q_offset"] + kwargs["q_length"] == kwargs["kv_length"]:
        return None
    return sdpa_mask(**{**kwargs, "allow_is_causal_skip": False})


AttentionInterface.register(ATTENTION, rowwise_attention)
AttentionMaskInterface.register(ATTENTION, rowwise_mask)


def padded(plain_forward):
    """A row-wise layer's forward that always computes PADDED_ROWS rows (zeros fill the rest; up
    to MAX_PADDED_ROWS rows run in such chunks), so a row's result never depends on how many
    rows ran beside it."""

    def forward(inputs: torch.Tensor) -> torch.Tensor:
        num_rows = inputs.shape[:-1].numel()
        if num_rows > MAX_PADDED_ROWS:
            return plain_forward(inputs)
        flat = inputs.reshape(num_rows, inputs.shape[-1])  # (M, in)
        outs = []
        for start in range(0, num_rows, PADDED_ROWS):
            chunk = flat[start : start + PADDED_ROWS]
            filler = chunk.new_zeros(PADDED_ROWS - chunk.shape[0], chunk.shape[1])
            outs.append(plain_forward(torch.cat([chunk, filler]))[: chunk.shape[0]])  # (≤P, out)
        return torch.cat(outs).reshape(*inputs.shape[:-1], -1)

    forward.specviz_padded = True
    return forward


def packed(layer: torch.nn.Linear):
    """A float32 linear layer's forward through oneDNN with its weights packed once for small row
    counts. MKL's F.linear costs ~2× per row count 4 what it costs for 1 on these CPUs (AVX2 and
    AVX-512 alike); oneDNN's packed kernel ~1.0-1.3× (the output head: 9.2 → 11.3 ms on AVX2, where
    F.linear goes 10.3 → 21.0 ms), and its rows do not depend on the row count on AVX2 at all."""
    weight = torch.ops.mkldnn._reorder_linear_weight(layer.weight.detach(), PADDED_ROWS)  # oneDNN's own layout
    bias = None if layer.bias is None else layer.bias.detach()

    def forward(inputs: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, "none", [], "")

    forward.specviz_packed = True
    return forward


def pack_linears(model: torch.nn.Module) -> int:
    """Give every nn.Linear of a float32 CPU model the packed oneDNN forward; return how many."""
    layers = [layer for layer in model.modules() if isinstance(layer, torch.nn.Linear)
              and not getattr(layer.forward, "specviz_packed", False)]
    for layer in layers:
        layer.forward = packed(layer)
    return len(layers)


def num_inputs(layer: torch.nn.Module) -> int:
    return layer.in_features if isinstance(layer, torch.nn.Linear) else layer.weight.shape[0]  # Conv1D: (in, out)


@torch.inference_mode()
def rows_depend_on_neighbours(layer: torch.nn.Module, trials: int = 4) -> bool:
    """Whether some row of this layer's output changes with the number of rows computed beside
    it (1 … PADDED_ROWS), on random inputs. Kernels are chosen by shape, not by data, but a changed
    summation order shows in a 16-bit output only where the rounding tips, so several trials."""
    weight = layer.weight
    generator = torch.Generator().manual_seed(0)
    for _ in range(trials):
        inputs = torch.randn(PADDED_ROWS, num_inputs(layer), generator=generator).to(weight.device, weight.dtype)
        alone = torch.cat([layer(inputs[i : i + 1]) for i in range(PADDED_ROWS)])  # (P, out)
        if any(not torch.equal(layer(inputs[:rows]), alone[:rows]) for rows in range(2, PADDED_ROWS + 1)):
            return True
    return False


def pad_varying_layers(model: torch.nn.Module) -> list[str]:
    """Give a padded forward to every linear layer whose rows depend on their neighbours (one probe
    per distinct shape); return their names."""
    verdicts: dict[tuple, bool] = {}
    names = []
    for name, layer in model.named_modules():
        if not isinstance(layer, (torch.nn.Linear, Conv1D)) or getattr(layer.forward, "specviz_padded", False):
            continue
        shape = (type(layer), tuple(layer.weight.shape), layer.weight.dtype, layer.bias is not None)
        if shape not in verdicts:
            verdicts[shape] = rows_depend_on_neighbours(layer)
        if verdicts[shape]:
            layer.forward = padded(layer.forward)
            names.append(name)
    return names


@dataclass(frozen=True)
class Invariance:
    """Which guarantee a target's forward gives on this machine, measured when it loaded."""

    bitwise: bool  # a k-token verify gave bitwise the logits of k 1-token steps
    max_difference: float  # the largest |Δ logit| seen between them
    padded_layers: int  # linear layers that run padded (their kernels vary with the row count)
    precision: str

    def summary(self) -> str:
        """One line a newcomer reads beside the run's precision."""
        if self.bitwise:
            return (f"the target computes every token it checks with the same arithmetic whether it checks one token "
                    f"or several at once ({self.precision}; compared bit for bit when it loaded), so at temperature 0 "
                    f"both lanes write the same text by construction")
        return (f"checking several tokens in one pass rounds the target's numbers slightly differently from checking "
                f"one at a time here ({self.precision}: up to {self.max_difference:.1g} in a score), so at "
                f"temperature 0 the lanes match unless two tokens are about that close")


def make_batch_invariant(model: torch.nn.Module) -> list[str]:
    """Give a target the row-wise attention and pad the layers whose rows vary with M (a float32
    one on a CPU first gets its linear layers packed for oneDNN). Returns the padded layers' names."""
    if os.environ.get(SWITCH_ENV, "1").strip() == "0":
        return []
    parameter = next(model.parameters())
    if parameter.dtype == torch.float32 and parameter.device.type == "cpu" and torch.backends.mkldnn.is_available():
        pack_linears(model)
    if model.config._attn_implementation != ATTENTION:
        model.set_attn_implementation(ATTENTION)
    return pad_varying_layers(model)


def plain_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of a target as transformers loads it (SDPA, plain linear layers): what a batch-invariant
    forward is compared against (`specviz profile`)."""
    plain = copy.deepcopy(model)
    for layer in plain.modules():
        if "forward" in vars(layer) and any(getattr(layer.forward, mark, False) for mark in ("specviz_padded", "specviz_packed")):
            del layer.forward  # the instance's padded or packed forward; the class's plain one shows again
    if plain.config._attn_implementation == ATTENTION:
        plain.set_attn_implementation("sdpa")
    return plain


@torch.inference_mode()
def measure(model: torch.nn.Module, vocab_size: int, context_length: int, num_tokens: int = 5, context: int = 24,
            seed: int = 0) -> Invariance:
    """Logits of one `num_tokens`-token forward against `num_tokens` 1-token forwards from the same
    cache, on random ids (as much of it as `context_length` positions hold): bitwise equal or not,
    and the largest difference."""
    num_tokens = max(2, min(num_tokens, context_length - 1))
    context = max(1, min(context, context_length - num_tokens))
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    ids = torch.randint(0, vocab_size, (1, context + num_tokens), generator=generator).to(device)  # (1, n)
    cache = DynamicCache()
    model(input_ids=ids[:, :context], past_key_values=cache, use_cache=True)
    verify = model(input_ids=ids[:, context:], past_key_values=cache, use_cache=True).logits[0].float()  # (k, vocab)
    cache.crop(-num_tokens)
    steps = torch.cat([model(input_ids=ids[:, i : i + 1], past_key_values=cache, use_cache=True).logits[0].float()
                       for i in range(context, context + num_tokens)])  # (k, vocab)
    padded_layers = sum(getattr(m.forward, "specviz_padded", False) for m in model.modules())
    return Invariance(torch.equal(verify, steps), float((verify - steps).abs().max()), padded_layers,
                      str(next(model.parameters()).dtype).removeprefix("torch."))
