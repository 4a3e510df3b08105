"""A target forward in which every row rounds as it would alone: batch invariance (DESIGN.md §3).

Greedy speculative decoding equals the target alone only if the logits a (γ+1)-token verify gives
position i are bitwise those a 1-token step gives there. Two kinds of op break that, because their
kernels change with the number of rows computed:
- attention (SDPA): specviz.models.invariant_attention has the layouts that do not;
- some matrix products: oneDNN/cuBLAS/MKL pick a kernel (and so a summation order) by M, the
  number of rows (measured: SmolLM2's down_proj, 576 × 1536, from M = 3 in bfloat16 on an AMD EPYC
  with avx512_bf16; every shape in float32 with MKL).

make_batch_invariant gives the target:
- in float32 on a CPU, every linear layer through oneDNN with its weights packed once: MKL's
  F.linear costs ~2× at 4 rows what it costs at 1, oneDNN's packed kernel ~1.0-1.2× (the whole
  verify: v 1.49 → 0.93 on AVX-512, 1.55 → 1.16 on AVX2, measured), and its rows do not depend on
  M for most shapes;
- a row padding for every linear layer whose rows a quick probe shows to depend on M: such a layer
  always runs at PADDED_ROWS rows (a step pads its one row with zeros; a verify of 2-8 rows
  likewise), so every row of a step or a verify is computed by the same kernel;
- the cheapest attention layout that measure() finds bitwise on this machine (GROUPED), else the
  one that is invariant by construction (FIXED).
A prompt's own pass (more than MAX_PADDED_ROWS rows) uses the plain matrix kernels: both lanes run
the same prompt pass, so they read the same cache. measure() says, per loaded target, whether a
verify is bitwise a step here; a device whose kernels defeat all this is reported, not assumed.
SPECVIZ_BATCH_INVARIANT=0 leaves targets as transformers loads them, to compare.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.pytorch_utils import Conv1D

from specviz.models.invariant_attention import LAYOUTS, PADDED_ROWS
from specviz.models.slot_calls import run_rows
from specviz.models.slots import SLOTS_LAYOUT, SlotCache, slots_wanted, uses_slots

MAX_PADDED_ROWS = 32  # more rows than this is a prompt's own pass: plain kernels
SWITCH_ENV = "SPECVIZ_BATCH_INVARIANT"  # "0": leave targets as transformers loads them (to compare)


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
    it (1 … MAX_PADDED_ROWS: every count a verify may run, a draft tree's included), on random inputs.
    Kernels are chosen by shape, not by data, but a changed summation order shows in a 16-bit output
    only where the rounding tips, so several trials. (Probing only up to PADDED_ROWS missed cuBLAS's
    kernel for a 17-row tree verify: tree runs parted 2 of 7 on an H200 while chains parted none.)"""
    weight = layer.weight
    generator = torch.Generator().manual_seed(0)
    for _ in range(trials):
        inputs = torch.randn(MAX_PADDED_ROWS, num_inputs(layer), generator=generator).to(weight.device, weight.dtype)
        alone = torch.cat([layer(inputs[i : i + 1]) for i in range(MAX_PADDED_ROWS)])  # (R, out)
        if any(not torch.equal(layer(inputs[:rows]), alone[:rows]) for rows in range(2, MAX_PADDED_ROWS + 1)):
            return True
    return False


def pad_varying_layers(model: torch.nn.Module, every_layer: bool = False) -> list[str]:
    """Give a padded forward to every linear layer whose rows depend on their neighbours (one probe
    per distinct shape), or to every one; return their names."""
    verdicts: dict[tuple, bool] = {}
    names = []
    for name, layer in model.named_modules():
        if not isinstance(layer, (torch.nn.Linear, Conv1D)) or getattr(layer.forward, "specviz_padded", False):
            continue
        shape = (type(layer), tuple(layer.weight.shape), layer.weight.dtype, layer.bias is not None)
        if shape not in verdicts:
            verdicts[shape] = every_layer or rows_depend_on_neighbours(layer)
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
    attention: str  # the attention the target runs (an invariant_attention layout, or transformers' own)

    def summary(self) -> str:
        """One line a newcomer reads beside the run's precision."""
        if self.bitwise:
            return (f"the target computes every token it checks with the same arithmetic whether it checks one token "
                    f"or several at once ({self.precision}; compared bit for bit when it loaded), so at temperature 0 "
                    f"both lanes write the same text by construction")
        return (f"checking several tokens in one pass rounds the target's numbers slightly differently from checking "
                f"one at a time here ({self.precision}: up to {self.max_difference:.1g} in a score), so at "
                f"temperature 0 the lanes match unless two tokens are about that close")


def make_batch_invariant(model: torch.nn.Module, vocab_size: int, context_length: int,
                         emulated: bool = False) -> "Invariance":
    """Pack (float32 on a CPU) and pad the linear layers that need it, then give the target the first
    attention layout under which a verify measures bitwise a step; the measurement comes back.

    On CUDA the attention is always FIXED (see below): a probe cannot cover every key count.
    `emulated`: the device computes this precision in software (bfloat16 on a CPU without native
    bf16). Its kernels' order changes too rarely for a probe to see (a greedy lane parted there
    with every probe passing), so every layer is padded and the attention is FIXED: exact by
    construction, at a cost that matters little where the precision is slow anyway."""
    if os.environ.get(SWITCH_ENV, "1").strip() == "0":
        return measure(model, vocab_size, context_length)
    parameter = next(model.parameters())
    if parameter.dtype == torch.float32 and parameter.device.type == "cpu" and torch.backends.mkldnn.is_available():
        pack_linears(model)
    if getattr(model.config, "attn_logit_softcapping", None):  # the layouts compute plain softmax attention only
        pad_varying_layers(model, every_layer=emulated)
        return measure(model, vocab_size, context_length)
    if slots_wanted(parameter.device) and not getattr(model.config, "sliding_window", None):
        # Every decoding call has one shape (specviz.models.slots): no layer needs padding, no layout a probe
        model.set_attn_implementation(SLOTS_LAYOUT)
        return measure(model, vocab_size, context_length)
    pad_varying_layers(model, every_layer=emulated)
    # On CUDA, GROUPED passed the load-time probe in bfloat16 and still parted 26 of 45 greedy runs on an
    # H200 (cuBLAS picks its kernel by the key count, which the probe's two lengths do not cover): there
    # only FIXED, whose every call has one shape, is trusted (it parted none of 78 runs in float16).
    for layout in LAYOUTS[-1:] if emulated or parameter.device.type == "cuda" else LAYOUTS:
        if model.config._attn_implementation != layout:
            model.set_attn_implementation(layout)
        report = measure(model, vocab_size, context_length)
        if report.bitwise:
            break
    return report


def plain_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of a target as transformers loads it (SDPA, plain linear layers): what a batch-invariant
    forward is compared against (`specviz profile`)."""
    plain = copy.deepcopy(model)
    for layer in plain.modules():
        if "forward" in vars(layer) and any(getattr(layer.forward, mark, False) for mark in ("specviz_padded", "specviz_packed")):
            del layer.forward  # the instance's padded or packed forward; the class's plain one shows again
    if plain.config._attn_implementation in (*LAYOUTS, SLOTS_LAYOUT):
        plain.set_attn_implementation("sdpa")
    return plain


def logits_of(model: torch.nn.Module, capacity: int):
    """A forward (new ids (1, n) → float32 logits (n, vocab)) and the cache it appends to, as the lanes run
    this target: in slots (specviz.models.slots) or through transformers' forward with a DynamicCache."""
    if uses_slots(model):
        cache = SlotCache(model.config, capacity)
        return lambda new_ids: run_rows(model, cache, new_ids)[0].float(), cache
    cache = DynamicCache()
    return lambda new_ids: model(input_ids=new_ids, past_key_values=cache, use_cache=True).logits[0].float(), cache


@torch.inference_mode()
def measure(model: torch.nn.Module, vocab_size: int, context_length: int, num_tokens: int = 5, context: int = 24,
            seed: int = 0) -> Invariance:
    """Logits of one `num_tokens`-token forward against `num_tokens` 1-token forwards from the same
    cache, on random ids (as much of it as `context_length` positions hold): bitwise equal or not,
    and the largest difference."""
    num_tokens = max(2, min(num_tokens, context_length - 1))
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    bitwise, difference = True, 0.0
    for wanted in (context, 3 * context + 7):  # two cache lengths: kernels may change with the key count too
        used = max(1, min(wanted, context_length - num_tokens))
        ids = torch.randint(0, vocab_size, (1, used + num_tokens), generator=generator).to(device)  # (1, n)
        forward, cache = logits_of(model, used + num_tokens)
        forward(ids[:, :used])
        verify = forward(ids[:, used:])  # (k, vocab)
        cache.crop(-num_tokens)
        steps = torch.cat([forward(ids[:, i : i + 1]) for i in range(used, used + num_tokens)])  # (k, vocab)
        bitwise &= torch.equal(verify, steps)
        difference = max(difference, float((verify - steps).abs().max()))
    padded_layers = sum(getattr(m.forward, "specviz_padded", False) for m in model.modules())
    return Invariance(bitwise, difference, padded_layers, str(next(model.parameters()).dtype).removeprefix("torch."),
                      model.config._attn_implementation)
