"""Precision and device: which dtype the weights load in, what each costs here, and which the host picks."""

from __future__ import annotations

import os

import torch

from specviz.models.errors import ModelLoadError
from specviz.models.int8 import cpu_supports

PRECISIONS: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}
"""The weights' precision a user can pick; in both a verify rounds exactly like a step (specviz.models.invariance).
bfloat16: half the bytes per step; the GPU's fast type, and on a CPU fast only with native bf16 matmuls (even
there slower than float32 for specviz). float32: on a CPU its linear layers run a kernel for 4 rows at one row's
cost (specviz.models.fixed_rows; the default target read from its GGUF blocks, a fifth of the bytes), so a
verify of up to 4 tokens costs about a step."""
CUDA_PRECISIONS: dict[str, torch.dtype] = {"float16": torch.float16}
"""Only on CUDA (`--dtype float16`, the default on a card without bf16): a CPU computes it in software."""
PRECISION_ENV = "SPECVIZ_PRECISION"  # float32 or bfloat16: the host's default instead of the device's
# oneDNN ISA limits (ONEDNN_MAX_CPU_ISA) below the first with bf16 dot products
ONEDNN_ISAS_WITHOUT_BF16 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}


def cpu_has_native_bf16() -> bool:
    """AMX or AVX512-BF16, not kept from torch by the host's ATEN_CPU_CAPABILITY (torch's own kernels) or
    ONEDNN_MAX_CPU_ISA (its matmuls): where bf16 matmuls run several times faster than float32. Without them
    (AVX2 only) torch emulates bf16 and a few-token verify costs several steps."""
    if not cpu_supports("_is_amx_tile_supported", "_is_avx512_bf16_supported"):
        return False
    if not torch.backends.cpu.get_cpu_capability().upper().startswith(("AVX512", "AMX")):
        return False
    return os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").strip().upper() not in ONEDNN_ISAS_WITHOUT_BF16


def cpu_has_amx() -> bool:
    """Native bf16 through AMX tiles (an Intel Xeon since Sapphire Rapids), not held back by the host:
    oneDNN's AMX kernels are a kernel family of their own, with their own speed and their own rounding
    by row count (the reason every call has one shape), so its records are kept apart from AVX512-BF16's."""
    if not (cpu_has_native_bf16() and cpu_supports("_is_amx_tile_supported")):
        return False
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").strip().upper()
    return isa in {"ALL", "DEFAULT"} or "AMX" in isa


def cuda_has_native_bf16() -> bool:
    """bf16 in the GPU's own matrix units (Ampere and later). torch's default check also says yes where
    bf16 is only emulated (a T4: sm 7.5), where float16 is the fast 16-bit type (current device)."""
    return torch.cuda.is_bf16_supported(including_emulation=False)


DEVICE_DEFAULTS = {"cuda": "bfloat16", "cpu": "float32"}
"""The precision each device type gets when none is asked for (default_precision says why; a GPU without native
bf16 takes float16 instead). The page and the README read it to mark a record's precision as the default."""


def device_default(device_type: str) -> str:
    """DEVICE_DEFAULTS for a device type or a bench record's kind ("cuda", "cpu-amx", "cpu-avx2", …)."""
    return DEVICE_DEFAULTS["cuda" if device_type == "cuda" else "cpu"]


def default_precision(device: torch.device) -> str:
    """The precision a run gets when none is asked for: $SPECVIZ_PRECISION if set; bf16 on CUDA (float16 on a GPU
    without native bf16); float32 on every CPU. A CPU's float32 products run specviz's own kernels
    (specviz.models.fixed_rows: 4 rows at about one row's cost, the default target read from its own 4-bit
    blocks, specviz.models.gguf_rows), which decode faster than oneDNN's bf16 kernels even where the CPU has
    native bf16 (2 cores, one thread, held-out prompts, against plain transformers' generate() in bfloat16):
    on an Intel Xeon with AMX specviz's target alone ran 1.45× plain in float32 (26.5 tok/s, 2026-12-05) and 1.20× in bfloat16
    (22.0 tok/s, its products through oneDNN's packed kernel); with oneDNN held below AMX (AVX512-BF16) 1.40× against
    1.05× (0.83× before the products were packed); on an AMD EPYC with native bf16 (2026-12-07) 1.59× (27.5 tok/s)
    against 1.52× (25.8 tok/s); and plain transformers itself ran about as fast in float32 as in bfloat16 on both
    Xeon kinds (assets/bench/)."""
    from_env = os.environ.get(PRECISION_ENV, "").strip()
    if from_env:
        return from_env
    if device.type == "cuda" and not cuda_has_native_bf16():
        return "float16"
    return device_default(device.type)


def choose_device_and_dtype(device: str | None = None, precision: str | None = None) -> tuple[torch.device, torch.dtype]:
    """The device (CUDA when present) and the precision asked for, or the device's default."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    precision = precision or default_precision(device)
    if precision in CUDA_PRECISIONS and device.type == "cuda":  # older cards: their fast 16-bit type
        return device, CUDA_PRECISIONS[precision]
    check_precision(precision)
    return device, PRECISIONS[precision]


def check_precision(precision: str) -> None:
    """A precision a user may ask for, or a message naming the ones there are."""
    if precision in CUDA_PRECISIONS:
        raise ModelLoadError(f"{precision} runs on CUDA only; here choose one of: {', '.join(PRECISIONS)}")
    if precision not in PRECISIONS:
        raise ModelLoadError(f"unknown precision {precision!r}; choose one of: {', '.join(PRECISIONS)}")


def precision_name(dtype: torch.dtype) -> str:
    """float32, bfloat16, float16: the name a run reports beside its timings."""
    return str(dtype).removeprefix("torch.")
