"""One command for a newly lent machine (a GPU above all): is decoding exact here, and how fast?

`python -m specviz selfcheck --device cuda` runs, for each precision:
  1. exactness: whether a verify rounds bitwise like a step for this target on this device
     (specviz.models.invariance, measured when the pair loads), then greedy identity on the pair's
     example prompts at several γ, our speculative lane against the target alone and against
     transformers' own `generate()`. Where the verify is bitwise (batch-invariant) and in
     float32 any parting is a failure; elsewhere (a device whose kernels defeat the invariant
     forward) partings are reported with their first position: numerics, not the algorithm;
  2. the bench table (specviz.analysis.bench) for every drafter, greedy and sampled.
It never needs a GPU: on a CPU it checks the same things (CI does not run it; tests run a short one).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from specviz.analysis.bench import BENCH_ENGINE, BenchConfig, Prompt, encode_prompts, format_table, run_bench
from specviz.catalogue import DRAFTER_CATALOGUE
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from specviz.models.loading import load_pair
from specviz.models.pairs import ModelPair
from specviz.models.precision import PRECISIONS
from specviz.decoding.reference import generate_kwargs
from specviz.analysis.trace import Trace, first_parting


@dataclass(frozen=True)
class SelfCheckConfig:
    """How much to check; the defaults take a few minutes on a GPU."""

    pair: str | None = None  # a preset name; None: the default pair
    device: str | None = None  # None: CUDA when present
    precisions: tuple[str, ...] = tuple(PRECISIONS)
    gammas: tuple[int, ...] = (1, 3, 6)  # identity is checked at each
    max_new_tokens: int = 64
    num_prompts: int | None = None  # None: every example prompt
    bench_gammas: tuple[int, ...] = (2, 3, 4, 6)
    bench_temperatures: tuple[float, ...] = (0.0, 0.7)
    bench_repeats: int = 3


@dataclass(frozen=True)
class Parting:
    """Where a greedy lane left the target alone's tokens (or transformers')."""

    prompt_index: int
    gamma: int
    against: str  # "target alone" or "transformers"
    position: int


def greedy_partings(pair: ModelPair, prompt_ids: list[list[int]], config: SelfCheckConfig) -> tuple[list[Parting], int]:
    """Every place a greedy speculative run parts from the target alone or from transformers'
    generate(), and how many comparisons were made."""
    partings, num_checked = [], 0
    for index, ids in enumerate(prompt_ids):
        decode_config = DecodeConfig(max_new_tokens=config.max_new_tokens)
        baseline = Trace.from_events(autoregressive_decode(pair, ids, decode_config))
        theirs = transformers_greedy(pair, ids, decode_config)
        for gamma in config.gammas:
            ours = Trace.from_events(speculative_decode(pair, ids, DecodeConfig(gamma=gamma, max_new_tokens=config.max_new_tokens)))
            for against, other in (("target alone", baseline.token_ids), ("transformers", theirs)):
                num_checked += 1
                position = first_parting(ours.token_ids, other)
                if position is not None:
                    partings.append(Parting(index, gamma, against, position))
    return partings, num_checked


@torch.inference_mode()
def transformers_greedy(pair: ModelPair, ids: list[int], config: DecodeConfig) -> list[int]:
    """The target's own generate(), greedy, as a reference independent of our engine."""
    input_ids = torch.tensor([ids], device=pair.device)  # (1, n)
    kwargs = generate_kwargs(pair, config, config.max_new_tokens, assisted=False)
    output = pair.target.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
    return output[0, len(ids):].tolist()


def bench_every_drafter(pair: ModelPair, prompts: list[Prompt], config: SelfCheckConfig) -> str:
    """The bench table for each drafter on this device and precision."""
    tables = []
    for info in DRAFTER_CATALOGUE:
        if pair.lacks_for(info):
            tables.append(f"drafter {info.name}: {pair.lacks_for(info)}")
            continue
        drafter = info.name
        engine = replace(BENCH_ENGINE, max_new_tokens=config.max_new_tokens, drafter=drafter)
        bench_config = BenchConfig(engine, gammas=config.bench_gammas, temperatures=config.bench_temperatures,
                                   repeats=config.bench_repeats)
        results = run_bench(pair, prompts, bench_config, progress=False)
        tables.append(f"drafter {drafter}:\n{format_table(results)}")
    return "\n\n".join(tables)


def run_selfcheck(prompts: list[Prompt], config: SelfCheckConfig, print_line=print) -> bool:
    """Check every precision in turn; True when float32 (where asked) never parted."""
    exact = True
    for precision in config.precisions:
        pair = load_pair(config.pair, device=config.device, precision=precision)
        chosen = prompts[: config.num_prompts] if config.num_prompts else prompts
        prompt_ids = encode_prompts(pair, chosen, None)
        partings, num_checked = greedy_partings(pair, prompt_ids, config)
        print_line(f"== {pair.name} on {pair.device} in {pair.precision}: greedy identity, {len(chosen)} prompts × "
                   f"γ {', '.join(map(str, config.gammas))} against the target alone and transformers' generate()")
        for parting in partings:
            print_line(f"   parted from {parting.against} at token {parting.position + 1} (prompt {parting.prompt_index + 1}, "
                       f"γ = {parting.gamma})")
        bitwise = pair.invariance is not None and pair.invariance.exact
        print_line(f"   verify against steps: {pair.invariance.summary() if pair.invariance else 'not measured'}")
        verdict = f"{num_checked - len(partings)}/{num_checked} identical"
        if bitwise or pair.precision == "float32":
            exact &= not partings
            rule = "a verify exact by construction" if bitwise else "float32"
            print_line(f"   {verdict}: {'OK' if not partings else f'FAILED: lanes must be identical with {rule}'}")
        else:
            print_line(f"   {verdict} (this target's verify is not exact by construction here: partings at near-ties are "
                       "numerics, not the algorithm)")
        print_line(bench_every_drafter(pair, chosen, config))
    return exact
