"""Where a speculative round's time goes outside the models' forwards: the host's share of a round.

On a GPU a small target's step takes a few milliseconds, and what the host does between forwards (reading
results back, sampling and the acceptance rule, trimming caches, building the round's event) sets the pace:
while the host works, the GPU waits. On a CPU the tiny pair's forwards are cheap in the same way, so the same
measure shows the host's work here, and the default pair shows it beside a real model's forwards.

Two passes over the same prompts, after one untimed warm-up pass:
- Timed. A round's wall time is the time the lane's generator took to yield its RoundEvent (nothing runs
  between events here). Model time is the time inside the models' modules (each model's body and output head,
  the head drafter, the scorers), read by forward hooks that nest, so a module inside another is counted once.
  Host time is the difference. Each stage of the round (drafting, verify and decide, settling the caches,
  building the event) is timed the same way, its wall minus its model time, by wrapping the engine's own
  functions for the pass: no profiler, whose per-operator cost would be larger than what it measures here.
- Counted. Every read of a tensor's value on the host (`.item()`, `.tolist()`, `int()`, `float()`, `bool()`,
  an index) during a round, by a TorchFunctionMode, with the line that asked. On a GPU each read waits for
  the device to finish; on a CPU it is cheap. Counting costs time, so this pass is not timed.

c, the drafter's cost, is the bench's: a draft forward's time over the target alone's step, from the same
prompts' baseline and speculative lanes (analysis.bench.summarise).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import statistics
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Iterator
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode

from specviz.analysis.bench import Prompt, encode_prompts, summarise
from specviz.analysis.trace import Trace
from specviz.decoding import engine, rounds
from specviz.decoding.config import DecodeConfig
from specviz.decoding.events import RoundEvent
from specviz.models.pairs import ModelPair

# A tensor's value read on the host: on a GPU each waits for the device to finish its queued work.
HOST_READS = (torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__int__, torch.Tensor.__float__,
              torch.Tensor.__bool__, torch.Tensor.__index__)
# The round's stages, each the engine functions it runs (names in specviz.decoding.engine), the event last.
STAGES = {"drafting": ("draft_chain", "draft_branches"), "verify and decide": ("verify_round",),
          "settle caches": ("settle_round",)}
EVENT_STAGE = "build the event"


@dataclass(frozen=True)
class HostConfig:
    """Which lane to profile, on which prompts."""

    drafter: str
    gamma: int = 3
    max_new_tokens: int = 48


@dataclass(frozen=True)
class HostProfile:
    """Per round, averaged over every round of the timed pass."""

    drafter: str
    gamma: int
    num_rounds: int
    tokens_per_round: float
    wall_s: float
    model_s: float
    stage_s: dict[str, tuple[float, float]]  # stage → (wall, host) seconds per round
    reads: float  # host reads per round
    read_sites: tuple[tuple[str, float], ...] = field(default_factory=tuple)  # (file:line, reads per round), most first
    c: float = 0.0  # the bench's: a draft forward over the target alone's step

    @property
    def host_s(self) -> float:
        return self.wall_s - self.model_s


class ModelClock:
    """Seconds spent inside the hooked modules, a module called inside another counted once."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.depth = 0
        self.started = 0.0

    def enter(self, *_) -> None:
        if self.depth == 0:
            self.started = time.perf_counter()
        self.depth += 1

    def leave(self, *_) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.seconds += time.perf_counter() - self.started


def model_modules(pair: ModelPair) -> list[torch.nn.Module]:
    """What runs a model's arithmetic: each model's body and output head, the head drafter, the scorers."""
    modules = [part for model in (pair.target, pair.draft) if model is not None
               for part in (model.base_model, model.get_output_embeddings())]
    extras = (pair.head, getattr(pair, "head_scorer", None), getattr(pair, "draft_scorer", None))
    return modules + [module for module in extras if isinstance(module, torch.nn.Module)]


@contextlib.contextmanager
def clocked(pair: ModelPair) -> Iterator[ModelClock]:
    """Hooks on the pair's model modules for the block's length."""
    model_clock = ModelClock()
    handles = [hook for module in model_modules(pair)
               for hook in (module.register_forward_pre_hook(model_clock.enter),
                            module.register_forward_hook(model_clock.leave))]
    try:
        yield model_clock
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def staged(model_clock: ModelClock) -> Iterator[dict[str, list[float]]]:
    """The engine's round functions wrapped for the block's length: stage → [wall, model] seconds."""
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])

    def timed(stage: str, function: Callable) -> Callable:
        def run(*args, **kwargs):
            wall, model = time.perf_counter(), model_clock.seconds
            try:
                return function(*args, **kwargs)
            finally:
                totals[stage][0] += time.perf_counter() - wall
                totals[stage][1] += model_clock.seconds - model
        return run

    with contextlib.ExitStack() as stack:
        for stage, names in STAGES.items():
            for name in names:
                stack.enter_context(mock.patch.object(engine, name, timed(stage, getattr(engine, name))))
        stack.enter_context(mock.patch.object(rounds.VerifiedRound, "event",
                                              timed(EVENT_STAGE, rounds.VerifiedRound.event)))
        yield totals


class ReadCounter(TorchFunctionMode):
    """Counts host reads of tensors, by the specviz line that asked (the innermost one on the stack)."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: collections.Counter[str] = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in HOST_READS:
            frames = [frame for frame in traceback.extract_stack(limit=12)[:-1] if "/specviz/" in frame.filename
                      and "/analysis/host_time.py" not in frame.filename]
            where = (f"{frames[-1].filename.rsplit('/specviz/', 1)[-1]}:{frames[-1].lineno}" if frames else "torch")
            self.sites[where] += 1
        return func(*args, **(kwargs or {}))


def timed_events(pair: ModelPair, prompt_ids: list[int], config: DecodeConfig, lane: str,
                 model_clock: ModelClock | None = None) -> Iterator[tuple[object, float, float]]:
    """The lane's events, each with the seconds its generator took to yield it and the model time in them."""
    decoder = engine.speculative_decode if lane == "speculative" else engine.autoregressive_decode
    events = decoder(pair, prompt_ids, config, lane=lane)
    while True:
        started, model_before = time.perf_counter(), model_clock.seconds if model_clock else 0.0
        try:
            event = next(events)
        except StopIteration:
            return
        model_s = model_clock.seconds - model_before if model_clock else 0.0
        yield event, time.perf_counter() - started, model_s


def profile_rounds(pair: ModelPair, prompts: list[Prompt], config: HostConfig) -> HostProfile:
    """Time and count a speculative lane's rounds over the prompts (see the module's docstring)."""
    if config.gamma < 1 or config.max_new_tokens < 1 or not prompts:
        raise ValueError("γ and new tokens must each be at least 1, and there must be a prompt")
    decode_config = DecodeConfig(gamma=config.gamma, max_new_tokens=config.max_new_tokens, drafter=config.drafter,
                                 stop_at_eos=False)  # every run the same length, so rounds compare
    engine.check_drafter(pair, decode_config)
    prompt_ids = encode_prompts(pair, prompts, None)
    engine.warm_up(pair, max(engine.longest_text(pair, len(ids), decode_config) for ids in prompt_ids),
                   decode_config.gamma - 1)
    lanes = ("baseline", "speculative")
    with torch.inference_mode():
        for ids, lane in itertools.product(prompt_ids, lanes):  # untimed: first calls allocate, choose kernels
            collections.deque(timed_events(pair, ids, decode_config, lane), maxlen=0)
        traces, rounds_s = [], []  # (baseline, speculative) per prompt; (wall, model, tokens) per speculative round
        with clocked(pair) as model_clock:
            baselines = [Trace.from_events(event for event, *_ in timed_events(pair, ids, decode_config, "baseline"))
                         for ids in prompt_ids]
            with staged(model_clock) as stages:
                for ids, baseline in zip(prompt_ids, baselines):
                    timed = list(timed_events(pair, ids, decode_config, "speculative", model_clock))
                    traces.append((baseline, Trace.from_events(event for event, *_ in timed)))
                    rounds_s += [(wall, model, len(event.emitted_ids)) for event, wall, model in timed
                                 if isinstance(event, RoundEvent)]
        with ReadCounter() as counter:  # a round's reads: those made while the lane worked towards its event
            round_reads, counted = collections.Counter(), 0
            for ids in prompt_ids:
                before = counter.sites.copy()
                for event, *_ in timed_events(pair, ids, decode_config, "speculative"):
                    if isinstance(event, RoundEvent):
                        round_reads += counter.sites - before
                        counted += 1
                    before = counter.sites.copy()
    num_rounds = len(rounds_s)
    return HostProfile(
        drafter=config.drafter, gamma=config.gamma, num_rounds=num_rounds,
        tokens_per_round=statistics.fmean(tokens for *_, tokens in rounds_s),
        wall_s=statistics.fmean(wall for wall, *_ in rounds_s), model_s=statistics.fmean(model for _, model, _ in rounds_s),
        stage_s={stage: (wall / num_rounds, (wall - model) / num_rounds) for stage, (wall, model) in stages.items()},
        reads=round_reads.total() / counted,
        read_sites=tuple((site, count / counted) for site, count in round_reads.most_common()),
        c=summarise(config.gamma, 0.0, traces).c)


def round_line(profile: HostProfile) -> str:
    """A round's wall time, the part in model forwards and the rest (the host's), in one line."""
    share = profile.host_s / profile.wall_s if profile.wall_s else 0.0
    return (f"a round: {profile.wall_s * 1e3:.2f} ms, in model forwards {profile.model_s * 1e3:.2f} ms, "
            f"outside them (host) {profile.host_s * 1e3:.2f} ms ({share:.0%})")


def format_host_profile(profile: HostProfile, heading: str, sites: int = 6) -> str:
    """A table: a round's wall, model and host time, each stage's, the host reads and where they come from."""
    lines = [heading,
             f"{profile.num_rounds} rounds, {profile.tokens_per_round:.2f} tokens a round, c = {profile.c:.3f}",
             f"  {round_line(profile)}",
             f"  {'stage':<18} {'ms a round':>10} {'host ms':>8}"]
    lines += [f"  {stage:<18} {wall * 1e3:>10.2f} {host * 1e3:>8.3f}" for stage, (wall, host) in profile.stage_s.items()]
    lines.append(f"  host reads a round: {profile.reads:.2f} (each a wait for the device on a GPU)")
    lines += [f"    {count:5.2f}  {site}" for site, count in profile.read_sites[:sites]]
    return "\n".join(lines)
