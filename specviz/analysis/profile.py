"""Where a target forward's time goes: a 1-token step against a (γ+1)-token verify.

Whether speculation pays turns on v, the cost of one verify in target steps. This module times the target's
forward through the engine's own `forward_new_ids` and splits it with torch's profiler into PARTS:
projections (q, k, v, o and the MLP's matrices), attention, the output head, other ops (norms, rotary
embeddings, the mask, the cache's appends) and Python & framework, the wall time no operator accounts for.
On CUDA each part is its operators' kernel time, and the last is the time no kernel ran (launches, Python).

Profiled forwards run slower than plain ones (the profiler costs a few µs an operator), so each part is
scaled to the unprofiled median wall time: the shares are the profiler's, the total is the plain clock's.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import DynamicCache

from specviz.decoding.engine import clock
from specviz.decoding.forward import crop_cache, forward_new_ids, target_cache_for
from specviz.models.fixed_rows import PROFILE_LABEL as FIXED_ROWS_LABEL
from specviz.models.slots import PROFILE_LABEL
from specviz.models.pairs import ModelPair

PARTS = ("projections", "attention", "output head", "other ops", "Python & framework")

# Kineto's levels run VERBOSE 0 … ERROR 4, USDT 5: since torch 2.13 every profiler start and stop prints a USDT
# line to stderr (about 60 for one `specviz profile`), and only a level above all of them hides those.
QUIET_KINETO_LEVEL = "6"


def profiled(device: torch.device, **options) -> profile:
    """torch's profiler over the device's activities, its per-start chatter off unless KINETO_LOG_LEVEL says
    otherwise (Kineto reads it when a profiler first starts in the process; set it to 4 to see its errors)."""
    os.environ.setdefault("KINETO_LOG_LEVEL", QUIET_KINETO_LEVEL)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    return profile(activities=activities, **options)


@dataclass(frozen=True)
class ProfileConfig:
    """What to profile."""

    token_counts: tuple[int, ...] = (1, 2, 4, 5, 7)  # new tokens per forward: a step, then verifies of γ + 1
    context_length: int = 100  # tokens already in the cache before each forward
    repeats: int = 12  # plain timed forwards per count (the median is reported)
    profiled_repeats: int = 3  # forwards under the profiler per count (their parts are averaged)
    trees: tuple[int, ...] = ()  # tree budgets: a verify of the last id and that many nodes under a tree mask


@dataclass(frozen=True)
class ForwardProfile:
    """One token count's forward: its median wall time and how that time splits."""

    num_tokens: int
    wall_s: float  # median of the plain forwards
    spread_s: tuple[float, float]  # their min and max
    part_s: dict[str, float]  # PARTS → seconds, summing to wall_s
    tree: int = 0  # a tree verify's budget (its rows gather their own keys); 0: a causal forward

    def share(self, part: str) -> float:
        return self.part_s[part] / self.wall_s


# Matrix products by weight: nn.Linear calls aten::linear (weight (out, in) second), GPT-2's
# Conv1D aten::addmm (weight (in, out) last), a packed float32 layer on a CPU mkldnn::_linear_pointwise
# (or specviz::fixed_rows, classified by the weight in its name).
MATRIX_OPS = ("aten::linear", "aten::addmm", "aten::mm", "aten::matmul", "mkldnn::_linear_pointwise")


def classify_op(name: str, input_shapes: list, head_shape: tuple[int, int]) -> str:
    """The part an operator at the top of the profile belongs to; `head_shape` is the output
    head's weight (rows, hidden): a matrix product with that weight is the output head."""
    if name in MATRIX_OPS:
        shapes = [tuple(shape) for shape in input_shapes]
        return "output head" if head_shape in shapes or head_shape[::-1] in shapes else "projections"
    if name.startswith(FIXED_ROWS_LABEL):  # "specviz::fixed_rows out×in [kind]": a float32 layer on a CPU (no shapes)
        weight = tuple(int(size) for size in name.split()[1].split("×"))
        return "output head" if weight == head_shape else "projections"
    if name in ("aten::scaled_dot_product_attention", PROFILE_LABEL):
        return "attention"
    return "other ops"


def split_profile(events, head_shape: tuple[int, int], on_gpu: bool = False) -> tuple[dict[str, float], float]:
    """Seconds per part of the top-level operators (children are inside their parent's time),
    and those operators' total. On a GPU an operator's time is its kernels' (its children's included):
    the host's time launching them is what the GPU waits through, counted with Python's."""
    parts = dict.fromkeys(PARTS[:-1], 0.0)
    for event in events:
        if event.cpu_parent is None and (event.name.startswith(("aten::", "mkldnn::", FIXED_ROWS_LABEL))
                                         or event.name == PROFILE_LABEL):
            seconds = (event.device_time_total if on_gpu else event.cpu_time_total) / 1e6
            parts[classify_op(event.name, event.input_shapes, head_shape)] += seconds
    return parts, sum(parts.values())


def output_shape(model: torch.nn.Module) -> tuple[int, int]:
    """The output head's weight (rows, hidden); (0, 0) where it is no plain matrix (an int8 draft's)."""
    weight = getattr(model.get_output_embeddings(), "weight", None)
    return tuple(weight.shape) if isinstance(weight, torch.Tensor) else (0, 0)


def context_ids(pair: ModelPair, config: ProfileConfig) -> torch.Tensor:
    """Real text as the context (an example-like prompt, repeated), long enough for every count."""
    needed = config.context_length + max(config.token_counts)
    text = "Explain how a bicycle stays upright while it moves, and why a stopped one falls over. "
    if pair.tokenizer is not None:
        ids = pair.tokenizer(text * (needed // 8 + 1), add_special_tokens=False)["input_ids"][:needed]
    else:
        ids = [(7 * i) % pair.vocab_size for i in range(needed)]
    return torch.tensor([ids], device=pair.device)  # (1, needed)


def sample_tree(budget: int) -> tuple[int, ...]:
    """A tree of `budget` nodes to time a verify with (each node's parent, -1 for the text's last id): two
    children per node, since a verify's cost follows its rows and their key widths more than its shape."""
    return tuple(-1 if node < 2 else (node - 2) // 2 for node in range(budget))


def time_forward(pair: ModelPair, all_ids: torch.Tensor, cache: DynamicCache, context_length: int,
                 parents: tuple[int, ...] = ()) -> float:
    """One forward of the ids past the context (the trailing ones tree nodes with these parents), the
    cache cropped back first: seconds."""
    crop_cache(cache, context_length)
    start = clock(pair.device)
    forward_new_ids(pair.target, all_ids, cache, pair.vocab_size, parents=parents)
    return clock(pair.device) - start


def profile_count(pair: ModelPair, ids: torch.Tensor, cache: DynamicCache, num_tokens: int,
                  config: ProfileConfig, tree: int = 0) -> ForwardProfile:
    parents = sample_tree(tree)
    all_ids = ids[:, : config.context_length + num_tokens]  # (1, context + n)
    head_shape = output_shape(pair.target)  # (rows, hidden)
    walls = [time_forward(pair, all_ids, cache, config.context_length, parents) for _ in range(config.repeats)]
    on_gpu = pair.device.type == "cuda"
    profiled_parts = []
    for _ in range(config.profiled_repeats):
        crop_cache(cache, config.context_length)
        with profiled(pair.device, record_shapes=True) as profiler:
            start = clock(pair.device)
            forward_new_ids(pair.target, all_ids, cache, pair.vocab_size, parents=parents)
            profiled_wall = clock(pair.device) - start
        parts, ops_s = split_profile(profiler.events(), head_shape, on_gpu)
        parts["Python & framework"] = max(0.0, profiled_wall - ops_s)
        profiled_parts.append(parts)
    wall = statistics.median(walls)
    mean_parts = {part: statistics.fmean(p[part] for p in profiled_parts) for part in PARTS}
    scale = wall / sum(mean_parts.values())
    return ForwardProfile(num_tokens, wall, (min(walls), max(walls)),
                          {part: seconds * scale for part, seconds in mean_parts.items()}, tree)


def profile_target(pair: ModelPair, config: ProfileConfig = ProfileConfig()) -> list[ForwardProfile]:
    """Profile the target's forward at each token count over the same cached context."""
    if pair.device.type not in ("cpu", "cuda"):
        raise ValueError(f"the profile reads CPU or CUDA time, not {pair.device.type}'s")
    if min(config.token_counts) < 1 or config.repeats < 1 or config.profiled_repeats < 1:
        raise ValueError("token counts and repeats must be at least 1")
    if min(config.trees, default=1) < 1:
        raise ValueError("tree budgets must be at least 1 node")
    # (new tokens, tree budget) per forward: each token count, then a tree verify of the last id and each budget
    shapes = [(num_tokens, 0) for num_tokens in config.token_counts] + [(1 + tree, tree) for tree in config.trees]
    if config.context_length < 1 or config.context_length + max(shapes)[0] > pair.context_length:
        raise ValueError(f"context plus new tokens must fit the target's {pair.context_length} positions")
    ids = context_ids(pair, config)
    with torch.inference_mode(), target_cache_for(pair) as cache:  # the lanes' cache: in slots (CUDA), graphed
        forward_new_ids(pair.target, ids[:, : config.context_length], cache, pair.vocab_size)
        for num_tokens, tree in shapes:  # warm every shape once: first calls allocate
            time_forward(pair, ids[:, : config.context_length + num_tokens], cache, config.context_length,
                         sample_tree(tree))
        return [profile_count(pair, ids, cache, num_tokens, config, tree) for num_tokens, tree in shapes]


def format_profile(profiles: list[ForwardProfile], heading: str) -> str:
    """A table: per token count, wall time, cost in steps (v) and the time of each part."""
    step_s = next((p.wall_s for p in profiles if p.num_tokens == 1), profiles[0].wall_s)
    lines = [heading,
             f"{'tokens':>12} {'ms (min–max)':>18} {'steps':>6}  " + "  ".join(f"{part:>18}" for part in PARTS)]
    for p in profiles:
        spread = f"{p.wall_s * 1e3:.1f} ({p.spread_s[0] * 1e3:.1f}–{p.spread_s[1] * 1e3:.1f})"
        cells = "  ".join(f"{p.part_s[part] * 1e3:9.1f} ms {p.share(part):4.0%}" for part in PARTS)
        tokens = f"{p.num_tokens} (tree {p.tree})" if p.tree else str(p.num_tokens)
        lines.append(f"{tokens:>12} {spread:>18} {p.wall_s / step_s:>6.2f}  {cells}")
    if any(p.tree for p in profiles):
        lines.append("(tree N: a verify of the last id and N draft-tree nodes, two children a node, each row reading "
                     "only its own path's keys)")
    return "\n".join(lines)
