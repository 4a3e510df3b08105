"""Drafters in int8 on a CPU: their linear layers and output rows as int8 matrices.

A drafter's step on a CPU is bound by memory, not arithmetic: between two rounds the target's
forward streams ~270 MB of weights through the caches, so each round's first draft step reads
the drafter's weights back from memory (the head: ~18 MB in bfloat16 with its 8,192 output rows).
int8 weights halve those bytes, and fbgemm's int8 matrix-vector kernels run faster here than
bfloat16 ones at one row of input: in the engine the head's draft step, and so c, fell by about
half (assets/bench/README.md, "Drafters in int8").

What changes is only the drafter's q (its weights rounded to int8 per output row, its inputs
rounded per step); the rejection rule keeps any q exact, so the output stays the target's.

torch's own dynamic quantization (`torch.ao.quantization.quantize_dynamic`, fbgemm kernels) is
used rather than torchao: torchao's int8 configs ran many times slower than it on a CPU
(tensor-subclass dispatch per call), and its CPU path is not what it is built for.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic


def int8_available(device: torch.device) -> bool:
    """Whether int8 drafters can run: a CPU with an fbgemm/x86 quantized engine in this torch."""
    engines = torch.backends.quantized.supported_engines
    return device.type == "cpu" and ("x86" in engines or "fbgemm" in engines)


def cpu_supports(*checks: str) -> bool:
    """Whether any of torch.cpu's capability checks (e.g. "_is_vnni_supported") says yes. They are
    private, so each is looked up with care: one a torch version lacks counts as no."""
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def full_range_is_exact() -> bool:
    """Whether fbgemm can take 8-bit inputs at their full range: with AVX-512 VNNI it multiplies
    and adds straight into 32 bits. Without it an intermediate 16-bit sum can saturate, which is
    why torch rounds inputs to 7 bits by default, which costs the head some top-1 agreement."""
    return cpu_supports("_is_vnni_supported", "_is_amx_tile_supported")


class FullRangeLinear(nn.Module):
    """torch's dynamic int8 linear with its inputs rounded to all 8 bits instead of 7."""

    def __init__(self, quantized: nn.Module):
        super().__init__()
        self.quantized = quantized  # a torch.ao dynamic Linear: its packed int8 weights and bias

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        packed = self.quantized._packed_params._packed_params
        return torch.ops.quantized.linear_dynamic(inputs, packed, reduce_range=False)


def quantize_linears(module: nn.Module) -> nn.Module:
    """The module in float32 with every nn.Linear as a dynamically quantized int8 one, in place.

    Weights: int8 with one scale per output row (as the head's file already stores them).
    Inputs: rounded to 8 bits per call, with their own range (full range where that is exact).
    Norms, attention and embeddings stay float32: they are a small part of the bytes. (GPT-2's
    layers are transformers' Conv1D, not nn.Linear, and stay float32.)
    """
    with warnings.catch_warnings():
        # torch marks torch.ao.quantization deprecated in favour of torchao (see the module note
        # for why torchao is not used); it is present and working in the pinned torch.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message="torch.quantize_per", category=UserWarning)
        quantize_dynamic(module.float(), {nn.Linear: per_channel_dynamic_qconfig}, inplace=True)
    if full_range_is_exact():
        swap_to_full_range(module)
    return module


def swap_to_full_range(module: nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, DynamicLinear):
            setattr(module, name, FullRangeLinear(child))
        else:
            swap_to_full_range(child)


def is_quantized(module: nn.Module) -> bool:
    """Whether quantize_linears was applied to the module."""
    return any(isinstance(child, (DynamicLinear, FullRangeLinear)) for child in module.modules())
