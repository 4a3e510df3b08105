"""Drafters in int8 on a CPU: their linear layers and output rows as int8 matrices.

A drafter's step on a CPU is bound by memory, not arithmetic: between two rounds the target's forward
streams its weights through the caches, so each round's first draft step reads the drafter's weights back
from memory. int8 halves those bytes, and fbgemm's int8 matrix-vector kernels beat bfloat16 ones at one row
of input. Only the drafter's q changes (its weights rounded per output row, its inputs per step), which the
rejection rule keeps exact for any q.

torch's own dynamic quantization (`torch.ao.quantization.quantize_dynamic`, fbgemm kernels) is used, not
torchao, whose int8 configs run many times slower on a CPU (tensor-subclass dispatch per call).
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


class FullRangeLinear(nn.Module):
    """torch's dynamic int8 linear with its inputs rounded to all 8 bits instead of 7."""

    def __init__(self, quantized: nn.Module):
        super().__init__()
        self.quantized = quantized  # a torch.ao dynamic Linear: its packed int8 weights and bias

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        packed = self.quantized._packed_params._packed_params
        return torch.ops.quantized.linear_dynamic(inputs, packed, reduce_range=False)


def quantize_linears(module: nn.Module) -> nn.Module:
    """The module in float32 with every nn.Linear as a dynamically quantized int8 one, in place: weights in
    int8 with one scale per output row (as the head's file already stores them), inputs rounded to 8 bits per
    call with their own range. Norms, attention, embeddings and GPT-2's Conv1D layers stay float32: they are
    a small part of the bytes."""
    with warnings.catch_warnings():  # torch.ao.quantization is marked deprecated for torchao (see above)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message="torch.quantize_per", category=UserWarning)
        quantize_dynamic(module.float(), {nn.Linear: per_channel_dynamic_qconfig}, inplace=True)
    # Inputs at their full 8 bits where fbgemm multiplies and adds straight into 32 bits (AVX-512 VNNI);
    # elsewhere a 16-bit sum can saturate, which is why torch rounds them to 7 bits (costing some agreement).
    if cpu_supports("_is_vnni_supported", "_is_amx_tile_supported"):
        for parent in list(module.modules()):
            for name, child in parent.named_children():
                if isinstance(child, DynamicLinear):
                    setattr(parent, name, FullRangeLinear(child))
    return module


def is_quantized(module: nn.Module) -> bool:
    """Whether quantize_linears was applied to the module."""
    return any(isinstance(child, (DynamicLinear, FullRangeLinear)) for child in module.modules())
