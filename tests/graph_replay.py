"""A CUDA graph's behaviour on a CPU, for tests: capture records the aten operators a call runs; a replay
runs exactly those again, on the same tensors, with the Python values they were captured with.

What this catches that recomputing the call would not: an input read from a new tensor instead of the
fixed one a graph reads (the replay reads the old one), a Python number baked in at capture (a length, a
position: the replay keeps the old one), and an operator that needs the host mid-call (a `.item()`, a
boolean index, a tensor built from a Python list), which a CUDA capture refuses. It does not run CUDA's
allocator or streams: those only a GPU tests.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten
# Operators that wait for the device or read its values on the host: no CUDA graph can hold them.
NEEDS_HOST = {aten._local_scalar_dense.default, aten.nonzero.default, aten.is_nonzero.default,
              aten.equal.default, aten.masked_select.default, aten.lift_fresh.default,
              aten._unique2.default, aten.unique_consecutive.default}


def masks_by_booleans(func, args) -> bool:
    """A boolean index (x[mask]): how many it selects is known on the host only."""
    if func not in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default):
        return False
    return any(isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in args[1] if index is not None)


class Recorder(TorchDispatchMode):
    """Every operator a call dispatches, with its arguments and what it returned."""

    def __init__(self):
        super().__init__()
        self.operators: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in NEEDS_HOST or masks_by_booleans(func, args):
            raise RuntimeError(f"operation not permitted when stream is capturing: {func} needs the host")
        result = func(*args, **kwargs)
        self.operators.append((func, args, kwargs, result))
        return result


class ReplayGraph:
    """Captured as torch.cuda.graph captures: two eager runs first, then one recorded; its outputs are the
    recorded run's tensors, which each replay overwrites."""

    captured: list["ReplayGraph"] = []

    def __init__(self, call: Callable[[], tuple[torch.Tensor, ...]]):
        for _ in range(2):
            call()
        recorder = Recorder()
        with recorder:
            self.outputs = call()
        self.operators = recorder.operators
        ReplayGraph.captured.append(self)

    def replay(self) -> None:
        for func, args, kwargs, result in self.operators:
            fresh = func(*args, **kwargs)
            for old, new in zip(tree_flatten(result)[0], tree_flatten(fresh)[0]):
                if isinstance(old, torch.Tensor) and old is not new:
                    old.copy_(new)  # where the captured run's result lives, later operators read it
