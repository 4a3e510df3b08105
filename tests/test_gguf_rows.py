"""A float32 target's linear layers reading its GGUF file's blocks (specviz.models.gguf_rows): the kernel turns the
blocks back into the very weights transformers' GGUF reader wrote, its products are bitwise the float32 kernel's,
and a layer whose blocks do not match its weight keeps the float32 kernel."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from specviz.models import convert, fixed_rows, gguf_rows

needs_kernel = pytest.mark.skipif(not (fixed_rows.kernel_runs_here() and fixed_rows.c_compiler()),
                                  reason="the kernel needs an x86 CPU with AVX2 and a C compiler")


def random_file_blocks(kind: str, rows: int, num_in: int, seed: int = 0) -> np.ndarray:
    """Blocks as a GGUF file holds them (fp16 scales, then the integers): (rows, blocks·file bytes) uint8."""
    generator = np.random.default_rng(seed)
    num_blocks = num_in // gguf_rows.BLOCK
    raw = generator.integers(0, 256, size=(rows, num_blocks, gguf_rows.FILE_BYTES[kind]), dtype=np.uint8)
    num_scales = gguf_rows.SCALES[kind]
    scales = (generator.standard_normal((rows, num_blocks, num_scales)) * 0.02).astype(np.float16)
    scales[0, 0, 0] = np.float16(6e-8)  # a subnormal fp16 scale: widened exactly too
    raw[..., : 2 * num_scales] = scales.view(np.uint8).reshape(rows, num_blocks, 2 * num_scales)
    return raw.reshape(rows, -1)


def gguf_weights(kind: str, raw: np.ndarray) -> torch.Tensor:
    """What the gguf library (transformers' GGUF reader) dequantises these blocks to: (rows, in) float32."""
    return torch.from_numpy(dequantize(raw, GGMLQuantizationType[kind]).astype(np.float32))


@needs_kernel
@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_the_kernel_turns_blocks_back_into_the_gguf_readers_weights_bitwise(kind):
    raw = random_file_blocks(kind, 48, 576)
    weight = gguf_weights(kind, raw)
    blocks = gguf_rows.repack(kind, raw)
    assert gguf_rows.matches(kind, blocks, weight)
    changed = weight.clone()
    changed[7, 300] = torch.nextafter(changed[7, 300], torch.tensor(1.0))  # one weight one float away
    assert not gguf_rows.matches(kind, blocks, changed)


@needs_kernel
@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_a_block_product_is_the_float32_kernels_bitwise_and_a_row_ignores_the_rows_beside_it(kind):
    torch.manual_seed(0)
    raw = random_file_blocks(kind, 96, 1536, seed=1)
    layer = torch.nn.Linear(1536, 96, bias=False)
    with torch.no_grad():
        layer.weight.copy_(gguf_weights(kind, raw))
    float32 = fixed_rows.fixed_rows(layer, fallback=lambda inputs: pytest.fail("the kernel was not used"))
    layer.specviz_blocks = (kind, gguf_rows.repack(kind, raw))
    from_blocks = fixed_rows.fixed_rows(layer, fallback=lambda inputs: pytest.fail("the kernel was not used"))
    rows = torch.randn(4, 1536)
    out = from_blocks(rows)  # (4, 96)
    assert torch.equal(out, float32(rows))
    with torch.no_grad():
        reference = F.linear(rows, layer.weight)  # the same product in another order: the check can fail
    assert torch.allclose(out, reference, rtol=1e-4, atol=1e-4) and not torch.equal(out, reference)
    alone = torch.zeros(4, 1536)
    alone[0] = rows[2]
    assert torch.equal(from_blocks(alone)[0], out[2])  # a step's row, filler zeros after it


@needs_kernel
def test_the_default_targets_float32_layers_read_blocks_only_where_they_match():
    from transformers import AutoModelForCausalLM

    folder = convert.converted_dir()
    if not convert.is_converted(folder) or convert.source_gguf() is None:
        pytest.fail("the test command's set-up converts the default target from the installed GGUF")
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    linears = [name for name, layer in model.named_modules() if isinstance(layer, torch.nn.Linear)]
    with torch.no_grad():
        model.model.layers[3].mlp.up_proj.weight[5, 9] += 1e-3  # this layer's blocks no longer give its weight
    attached = gguf_rows.attach_blocks(model, folder, convert.source_gguf())
    assert attached == len(linears) - 1
    assert not hasattr(model.model.layers[3].mlp.up_proj, "specviz_blocks")
    assert model.model.layers[3].mlp.down_proj.specviz_blocks[0] == "Q4_1"
    assert model.lm_head.specviz_blocks[0] == "Q8_0"  # the tied embedding, the output head


@needs_kernel
def test_the_switch_and_other_precisions_keep_the_weights(monkeypatch):
    from transformers import AutoModelForCausalLM

    in_bfloat16 = AutoModelForCausalLM.from_pretrained(str(convert.converted_dir()), dtype=torch.bfloat16)
    assert gguf_rows.attach_blocks(in_bfloat16, convert.converted_dir(), convert.source_gguf()) == 0  # float32 only
    monkeypatch.setenv(gguf_rows.SWITCH_ENV, "0")
    model = AutoModelForCausalLM.from_pretrained(str(convert.converted_dir()), dtype=torch.float32)
    assert gguf_rows.attach_blocks(model, convert.converted_dir(), convert.source_gguf()) == 0


@needs_kernel
def test_the_loaded_default_pair_reads_blocks_in_float32():
    from specviz.models.loading import load_pair

    pair = load_pair("smollm2-135m", device="cpu", precision="float32")  # loaded once per process
    layers = [layer for layer in pair.target.modules() if isinstance(layer, torch.nn.Linear)]
    assert all(getattr(layer, "specviz_blocks", None) for layer in layers), "a float32 layer kept its weights"


@needs_kernel
@pytest.mark.skipif(not fixed_rows.wide_here(), reason="the 16-lane kernels need a CPU that torch runs with AVX-512")
@pytest.mark.parametrize("kind", ["float32", "Q4_1", "Q8_0"])
def test_the_16_lane_products_are_the_8_lane_ones_bitwise(kind):
    """Where torch runs AVX-512 the products take fixed_rows.c's 16-lane variants (two weight rows a pass): each lane
    does an 8-lane accumulator's very FMAs, so every output must equal the 8-lane kernel's bit for bit, for an odd
    number of weight rows too (the last one alone)."""
    torch.manual_seed(0)
    num_out, num_in = 97, 1536
    rows = torch.randn(4, num_in)  # (4, in)
    if kind == "float32":
        weight, names = torch.randn(num_out, num_in), ("specviz_rows4", "specviz_rows4_wide")
    else:
        weight = gguf_rows.repack(kind, random_file_blocks(kind, num_out, num_in, seed=2))  # (out, blocks' bytes)
        names = (f"specviz_rows4_{kind.lower()}", f"specviz_rows4_{kind.lower()}_wide")
    outs = []
    for name in names:
        product = fixed_rows.bound(name, [ctypes.c_void_p] * 3 + [ctypes.c_long] * 2)
        out = torch.empty(4, num_out)  # (4, out)
        product(rows.data_ptr(), weight.data_ptr(), out.data_ptr(), num_out, num_in)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    assert fixed_rows.rows_kernel() is fixed_rows.bound("specviz_rows4_wide", [ctypes.c_void_p] * 3 + [ctypes.c_long] * 2)
