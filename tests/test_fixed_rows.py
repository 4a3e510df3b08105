"""The float32 kernel for a CPU call's 4 rows (specviz.models.fixed_rows): built here, used by a float32 target's
linear layers, each output row independent of the rows beside it, and the product it should be."""

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
