"""The float32 kernels for a CPU call's 4 rows (specviz.models.fixed_rows): built here, used by a float32 target's
linear layers and attention, each output row independent of the rows beside it (and, for attention, of the
call's key width), and the product it should be."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from specviz.models import fixed_rows
from specviz.models.invariance import packed

needs_kernel = pytest.mark.skipif(not (fixed_rows.kernel_runs_here() and fixed_rows.c_compiler()),
                                  reason="the kernel needs an x86 CPU with AVX2 and a C compiler")


@needs_kernel
def test_the_kernel_compiles_where_a_compiler_and_avx2_are():
    assert fixed_rows.rows_kernel() is not None, fixed_rows.kernel_status()
    assert fixed_rows.library_path(fixed_rows.c_compiler()).exists()


@needs_kernel
@pytest.mark.parametrize("shape", [(576, 576), (192, 576), (1536, 576), (576, 1536), (50, 32)])
def test_a_row_is_the_same_whatever_rows_run_beside_it(shape):
    torch.manual_seed(0)
    layer = torch.nn.Linear(shape[1], shape[0], bias=True)
    forward = fixed_rows.fixed_rows(layer, fallback=lambda inputs: pytest.fail("the kernel was not used"))
    rows = torch.randn(4, shape[1])
    out = forward(rows)  # (4, out)
    with torch.no_grad():
        assert torch.allclose(out, F.linear(rows, layer.weight, layer.bias), rtol=1e-4, atol=1e-4)
    for place in range(4):
        others = torch.randn(4, shape[1]) * 100  # other rows, other magnitudes
        others[place] = rows[place]
        assert torch.equal(forward(others)[place], out[place]), place
        alone = torch.zeros(4, shape[1])
        alone[0] = rows[place]
        assert torch.equal(forward(alone)[0], out[place]), place  # a step's row, filler zeros after it


@needs_kernel
def test_a_float32_targets_layers_take_the_kernel_and_the_switch_keeps_onednn(monkeypatch):
    layer = torch.nn.Linear(64, 48, bias=False)
    assert getattr(packed(layer), "specviz_fixed_rows", False)
    monkeypatch.setenv(fixed_rows.SWITCH_ENV, "0")
    assert not getattr(packed(layer), "specviz_fixed_rows", False)
    with torch.no_grad():
        assert torch.allclose(packed(layer)(torch.ones(4, 64)), F.linear(torch.ones(4, 64), layer.weight), atol=1e-5)


def test_other_inputs_take_the_fallback():
    layer = torch.nn.Linear(32, 8, bias=False)
    calls = []
    forward = fixed_rows.fixed_rows(layer, fallback=lambda inputs: calls.append(inputs.shape) or F.linear(inputs, layer.weight))
    forward(torch.ones(3, 32))  # not a call's 4 rows: a prompt's own pass, say
    forward(torch.ones(32, 4).t())  # a call's shape, not contiguous
    assert calls == [(3, 32), (4, 32)]
    odd = torch.nn.Linear(24, 8)  # an input width the kernel's blocks do not divide
    assert fixed_rows.fixed_rows(odd, fallback=odd.forward) == odd.forward


def attention_call(rows: torch.Tensor, counts: list[int], width: int):
    """A call's attention inputs: query rows (S, H, D) laid out as a model's (1, H, S, D), each row reading the
    first `count` slots of the cache in order, in a call of `width` keys."""
    order = torch.arange(width).repeat(len(counts), 1)  # (S, W)
    visible = torch.arange(width).view(1, -1) < torch.tensor(counts).view(-1, 1)  # (S, W)
    return rows.unsqueeze(0).transpose(1, 2), order.where(visible, 0), visible.view(len(counts), 1, 1, width)


@needs_kernel
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("seen", [70, 1_001])  # a few runs of keys; a long text's, over many of them
def test_an_attention_row_is_the_same_whatever_rows_run_beside_it_and_whatever_the_width(dtype, tolerance, seen):
    torch.manual_seed(0)
    width = (seen + 3 + 63) // 64 * 64
    length = width + 100
    keys, values = torch.randn(1, 3, length, 64, dtype=dtype), torch.randn(1, 3, length, 64, dtype=dtype)  # (1, kv, L, D)
    rows = torch.randn(4, 9, 64, dtype=dtype)  # (S, H, D)
    query, order, visible = attention_call(rows, [seen, seen + 1, seen + 2, 1], width)
    with torch.inference_mode():
        out = fixed_rows.attend(query, keys, values, order, visible, 0.125)  # (1, S, H, D)
        assert out.dtype is dtype
        for place in range(3):
            scores = 0.125 * rows[place].float().view(3, 3, 64) @ keys[0, :, : seen + place].float().transpose(1, 2)
            reference = torch.softmax(scores, -1) @ values[0, :, : seen + place].float()  # (kv, G, D) in float32
            assert torch.allclose(out[0, place].float(), reference.view(9, 64), atol=tolerance)
            others = torch.randn(4, 9, 64, dtype=dtype) * 100
            others[3 - place] = rows[place]  # another place, other rows, fillers reading one key, another width
            counts = [1, 1, 1, 1]
            counts[3 - place] = seen + place
            other_query, other_order, other_visible = attention_call(others, counts, width + 64)
            alone = fixed_rows.attend(other_query, keys, values, other_order, other_visible, 0.125)
            assert torch.equal(alone[0, 3 - place], out[0, place]), place


@needs_kernel
def test_attention_leaves_autograd_and_other_precisions_to_torch(monkeypatch):
    query, order, visible = attention_call(torch.randn(4, 9, 64), [5, 5, 5, 5], 64)
    keys = torch.randn(1, 3, 80, 64)
    assert fixed_rows.attend(query.half(), keys.half(), keys.half(), order, visible, 0.125) is None
    assert fixed_rows.attend(query.bfloat16(), keys, keys, order, visible, 0.125) is None  # precisions mixed
    assert fixed_rows.attend(query.requires_grad_(), keys, keys, order, visible, 0.125) is None
    monkeypatch.setenv(fixed_rows.SWITCH_ENV, "0")
    assert fixed_rows.attend(query.detach(), keys, keys, order, visible, 0.125) is None
