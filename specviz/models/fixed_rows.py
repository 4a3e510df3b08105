"""float32 linear layers and attention for a CPU's 4-row calls at about the cost of one row: small C kernels.

On a CPU every decoding call of the target has call_rows = 4 rows (specviz.models.slots), so each of its linear
layers multiplies 4 rows by a weight. The libraries pick kernels by the row count: MKL's F.linear takes a
matrix-vector path for one row and a compute-blocked one for four (about 2× the time on an AVX2 CPU), and
oneDNN's packed kernel (specviz.models.invariance.packed) costs about 1.4× one row there. A 135 M target's
float32 step is bound by reading its weights, so four rows can cost what one does if each weight row is read
once for all four: this kernel (fixed_rows.c) does that with two 8-lane accumulators per row. Where torch runs
AVX-512 (wide_here) the products take 16-lane variants whose every lane does one 8-lane accumulator's very FMAs:
bitwise the same results in half the instructions (on an Intel AMX Xeon the 8-lane block kernels were bound by
their arithmetic).

The call's attention (specviz.models.slots.attend_rows) is a few dozen small operators a layer in torch, several
times a plain step's SDPA; the same C file computes it in one call a layer (`attend`): each row over its own
visible keys, read where the cache holds them (no gathered copies), one fixed sequence of operations per output. It
serves bfloat16 targets too (the cache's bf16 values read as the float32 they are, the result rounded once): there
the products stay oneDNN's (4 rows cost about one in bf16), and the torch attention cost a slots step 0.15× more
than a plain one on an Intel AMX Xeon. Over a long text attention outgrows the products, so the kernel takes each
run of 8 keys once for every query head of its KV head in every row of the call (GQA's group; a verify's rows read
the same keys), computes their 8 scores side by side, and takes exp 8 lanes at a time (exp_lanes, a fixed
polynomial, not libm's expf one value a call): at 2,048 keys one row's attention fell from 8.4 to 5.6 ms a step, a
4-row call's from 32 to 16 ms (AVX2 EPYC, 30 layers). The softmax's max, sum and division run 8 lanes at a time
too (a sum one score at a time waited on each add). The loops' order says when each (row, head)'s operations run,
never which.

Exact by construction, twice over: every decoding call gives it exactly 4 rows (steps, verifies, rivals, trees,
both lanes), and each output element is one fixed sequence of FMAs and adds over its own row and weight row,
whatever the other rows hold. The attention's row depends on its query and its visible keys alone: not on the
other rows, their number, or the call's key width. It is compiled with the system's C compiler ($CC, else cc or gcc; flags fixed
here) into the user cache the first time a float32 target loads on a CPU with AVX2 (well under a second).
Without a compiler or on another CPU a layer keeps oneDNN's packed kernel; a prompt's own pass (another row count)
reads the weight as loaded through F.linear, and while torch runs more than one thread a call's 4 rows take oneDNN's
packed kernel (specviz.models.invariance.packed): a run never changes its thread count, so every decoding call of a
run takes the same kernel. The attention kernel serves every float32 and bfloat16 call on a CPU where it compiles,
whatever the thread count (it runs on one). `SPECVIZ_FIXED_ROWS=0` keeps torch's operators everywhere (to compare).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Callable

import torch

from specviz.models.convert import cache_root

ROWS = 4  # the rows fixed_rows.c multiplies at once; used only while a CPU call has as many (invariance.packed)
BLOCK = 16  # the input width must be a multiple of this (two 8-lane blocks per step)
SOURCE = Path(__file__).with_name("fixed_rows.c")
# -O3: gcc keeps the 4 rows' accumulators in registers (at -O2 the linear layers ran at 1.4× MKL's one row);
# -ffp-contract=off and no fast-math: the compiler may schedule the intrinsics, never reorder the arithmetic
FLAGS = ("-O3", "-mavx2", "-mfma", "-ffp-contract=off", "-shared", "-fPIC")
SWITCH_ENV = "SPECVIZ_FIXED_ROWS"
PROFILE_LABEL = "specviz::fixed_rows"  # how a call shows in torch's profiler, with the weight's "out×in" after it


def kernel_wanted() -> bool:
    """The switch not "0" (read when a target loads)."""
    return os.environ.get(SWITCH_ENV, "").strip() != "0"


def kernel_runs_here() -> bool:
    """An x86 CPU that torch runs with AVX2 or better (the kernel's instructions)."""
    return (platform.machine().lower() in {"x86_64", "amd64"}
            and torch.backends.cpu.get_cpu_capability().upper().startswith(("AVX2", "AVX512", "AMX")))


def library_path(compiler: str) -> Path:
    """Where the compiled kernel lives: named by its source, compiler and flags, so a change compiles anew."""
    digest = hashlib.sha256(SOURCE.read_bytes() + compiler.encode() + " ".join(FLAGS).encode()).hexdigest()[:12]
    return cache_root() / "kernels" / f"fixed_rows-{digest}.so"


def compile_kernel(compiler: str, target: Path) -> None:
    """Compile fixed_rows.c into `target`, atomically (a second process never loads half a file)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(built)], check=True, capture_output=True, timeout=120)
        os.replace(built, target)


def c_compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernels, compiled first if need be; None where they cannot be had here."""
    compiler = c_compiler()
    if not kernel_runs_here() or compiler is None:
        return None
    target = library_path(compiler)
    try:
        if not target.exists():
            compile_kernel(compiler, target)
        return ctypes.CDLL(str(target))
    except (OSError, subprocess.SubprocessError):
        return None


def bound(name: str, argtypes: list) -> Callable | None:
    """One of fixed_rows.c's functions with its argument types, or None where the kernels cannot be had here."""
    compiled = library()
    if compiled is None:
        return None
    function = getattr(compiled, name)
    function.argtypes = argtypes
    function.restype = None
    return function


def wide_here() -> bool:
    """Whether torch runs AVX-512 here (not held below it by ATEN_CPU_CAPABILITY): the products' 16-lane variants,
    bitwise the 8-lane ones' results (fixed_rows.c says why) in half the instructions."""
    return torch.backends.cpu.get_cpu_capability().upper().startswith("AVX512")


def product_name(name: str) -> str:
    """A 4-row product's kernel: its 16-lane variant where wide_here()."""
    return f"{name}_wide" if wide_here() else name


@functools.cache
def rows_kernel() -> Callable | None:
    """fixed_rows.c's 4-row product, or None where the kernels cannot be had here."""
    return bound(product_name("specviz_rows4"), [ctypes.c_void_p] * 3 + [ctypes.c_long] * 2)


@functools.cache
def attention_kernel(cache_dtype: torch.dtype = torch.float32) -> Callable | None:
    """fixed_rows.c's attention for a call's rows over a float32 or bfloat16 cache, or None where the kernels cannot
    be had here."""
    name = "specviz_attend_bf16" if cache_dtype is torch.bfloat16 else "specviz_attend"
    return bound(name, [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long,
                                    ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_long] * 4 + [ctypes.c_float])


@functools.cache
def block_kernels(kind: str) -> tuple[Callable, Callable] | None:
    """fixed_rows.c's 4-row product over a GGUF kind's blocks ("Q4_1", "Q8_0") and its dequantiser, or None where
    the kernels cannot be had here (specviz.models.gguf_rows)."""
    suffix = kind.lower()
    product = bound(product_name(f"specviz_rows4_{suffix}"), [ctypes.c_void_p] * 3 + [ctypes.c_long] * 2)
    dequantise = bound(f"specviz_dequantise_{suffix}", [ctypes.c_void_p] * 2 + [ctypes.c_long] * 2)
    return None if product is None or dequantise is None else (product, dequantise)


def fixed_rows(layer: torch.nn.Linear, fallback: Callable[[torch.Tensor], torch.Tensor]):
    """A float32 linear layer's forward through the kernel for exactly ROWS contiguous rows, `fallback` for any
    other input; `fallback` itself where the kernel cannot serve this layer (the caller uses it only where a CPU
    call has ROWS rows)."""
    kernel = rows_kernel() if kernel_wanted() else None
    weight = layer.weight.detach()
    if kernel is None or weight.dtype != torch.float32 or weight.shape[1] % BLOCK or not weight.is_contiguous():
        return fallback
    bias = None if layer.bias is None else layer.bias.detach()
    num_out, num_in = weight.shape
    label = f"{PROFILE_LABEL} {num_out}×{num_in}"
    # a layer whose GGUF blocks dequantise to its weight bitwise reads them instead (specviz.models.gguf_rows)
    kind, blocks = getattr(layer, "specviz_blocks", (None, None))
    if kind is not None:
        kernel, weight = block_kernels(kind)[0], blocks
        label += f" {kind.lower()}"

    def forward(inputs: torch.Tensor) -> torch.Tensor:
        if (inputs.shape != (ROWS, num_in) or inputs.dtype != torch.float32 or not inputs.is_contiguous()
                or torch.get_num_threads() != 1):
            return fallback(inputs)
        out = inputs.new_empty(ROWS, num_out)  # (4, out)
        if torch.autograd.profiler._is_profiler_enabled:  # `specviz profile` sees the call (ctypes calls hide)
            with torch.profiler.record_function(label):
                kernel(inputs.data_ptr(), weight.data_ptr(), out.data_ptr(), num_out, num_in)
        else:
            kernel(inputs.data_ptr(), weight.data_ptr(), out.data_ptr(), num_out, num_in)
        return out if bias is None else out.add_(bias)

    forward.specviz_fixed_rows = True
    return forward


def attention_serves(dtype: torch.dtype, head_dim: int) -> bool:
    """Whether `attend` computes a CPU call's attention for a cache of this precision and head width here (then no
    row's result depends on the call's key width: specviz.models.slots.widths_free)."""
    return (kernel_wanted() and dtype in (torch.float32, torch.bfloat16) and head_dim % 8 == 0
            and attention_kernel(dtype) is not None)


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, order: torch.Tensor, visible: torch.Tensor,
           scaling: float) -> torch.Tensor | None:
    """A call's attention through fixed_rows.c: query (1, H, S, D), key and value (1, kv, L, D), each row s over the
    keys order[s, :count] (S, W), count its visible ones (`visible` (S, 1, 1, W), a prefix) → (1, S, H, D). None
    where the kernel cannot serve (not float32 or bfloat16 on a CPU, a width D not a multiple of 8, autograd, the
    switch off). In bfloat16 the kernel reads the cache's values as float32 (exact), computes as in float32 and the
    result is rounded to bfloat16 once: no step of it depends on the other rows either.
    Called once a layer per call, so it keeps to a few tensor operations."""
    dtype = query.dtype
    if (not attention_serves(dtype, query.shape[-1]) or query.device.type != "cpu" or query.requires_grad
            or query.shape[0] != 1 or key.dtype is not dtype or value.dtype is not dtype):
        return None
    kernel = attention_kernel(dtype)
    _, num_heads, num_rows, head_dim = query.shape
    if dtype is not torch.float32:
        query = query.float()  # (1, H, S, D): 4 rows, a few kB
    if query.stride(-1) != 1:
        query = query.contiguous()
    if key.stride() != value.stride() or key.stride(-1) != 1:
        key, value = key.contiguous(), value.contiguous()
    width = order.shape[1]
    size = num_rows * num_heads * head_dim
    out = query.new_empty(size)  # (S·H·D,) float32
    scratch = scratch_floats(num_rows * num_heads * (width + head_dim))  # every (row, head)'s scores and query
    kernel(query.data_ptr(), query.stride(2), query.stride(1), key.data_ptr(), value.data_ptr(), key.stride(1),
           key.stride(2), order.contiguous().data_ptr(), visible.contiguous().data_ptr(), width, out.data_ptr(),
           scratch.data_ptr(), num_rows, num_heads, key.shape[1], head_dim, scaling)
    return out.view(1, num_rows, num_heads, head_dim).to(dtype)


_scratch = threading.local()


def scratch_floats(count: int) -> torch.Tensor:
    """This thread's scratch for the attention kernel, at least `count` float32s: kept, not allocated a call (over a
    long text it is hundreds of kB, which malloc maps and unmaps each time); one per thread, as two visitors' runs
    may decode at once."""
    buffer = getattr(_scratch, "buffer", None)
    if buffer is None or buffer.numel() < count:
        buffer = _scratch.buffer = torch.empty(max(count, 2 * (buffer.numel() if buffer is not None else 0)))
    return buffer


def kernel_status() -> str:
    """Where the kernel is, or why a float32 target's layers keep oneDNN's here (what `specviz setup` says)."""
    if not kernel_runs_here():
        return "not used on this CPU (it needs x86 with AVX2); oneDNN's packed kernel serves"
    kernel = rows_kernel()
    if kernel is None:
        return "no C compiler could build it ($CC, cc or gcc); oneDNN's packed kernel serves"
    return f"compiled, {library_path(c_compiler())}"
