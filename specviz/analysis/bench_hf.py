"""Ours against transformers' own assisted generation (`bench --against-hf`): both sides timed end
to end, whole calls, per (T, γ), with transformers' plain generate() as its own baseline.

Kept apart from specviz.analysis.bench, whose speedups are model work only as the engine measures
it: here every figure includes each library's own overheads, so the two tables never mix.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from tqdm import tqdm

from specviz.catalogue import drafter_info
from specviz.decoding import reference
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import clock, speculative_decode, warm_up
from specviz.models.pairs import ModelPair
from specviz.analysis.bench import BenchConfig, Prompt, encode_prompts
from specviz.analysis.trace import Trace


@dataclass(frozen=True)
class HfResult:
    """End-to-end wall time of whole calls, ours and transformers', per (temperature, γ)."""

    temperature: float
    gamma: int | None  # None: transformers' default schedule (dynamic γ, confidence threshold)
    median_hf_tokens_per_s: float
    median_ours_tokens_per_s: float  # our speculative lane at this γ (None row: the best γ's)
    median_ours_over_hf: float  # ratio of tokens/s, per run, then the median
    min_ours_over_hf: float
    max_ours_over_hf: float
    median_hf_speedup: float  # HF assisted over HF plain generate()
    num_runs: int


def hf_generate_s(pair: ModelPair, ids: list[int], temperature: float, config: BenchConfig, seed: int,
                  gamma: int | None, assisted: bool) -> tuple[float, int]:
    """One transformers generate() call, timed end to end: (seconds, new tokens).

    gamma None: transformers' default schedule for the draft model's γ.
    """
    decode_config = config.decode_config(temperature, seed, gamma or 1)
    return reference.time_generate(pair, ids, decode_config, assisted, constant_gamma=gamma is not None)


def ours_s(pair: ModelPair, ids: list[int], decode_config: DecodeConfig) -> tuple[float, int]:
    """Our speculative lane, timed end to end like a generate() call (events and all)."""
    started = clock(pair.device)  # as transformers' side is timed: after the GPU's queued work
    trace = Trace.from_events(speculative_decode(pair, ids, decode_config))
    return clock(pair.device) - started, trace.num_tokens


def run_against_hf(pair: ModelPair, prompts: list[Prompt], config: BenchConfig, progress: bool = True) -> list[HfResult]:
    """Ours vs `generate(assistant_model=draft)` at every γ (constant schedule) and with HF's
    default schedule; with the prompt-lookup drafter, vs `generate(prompt_lookup_num_tokens=γ)`.

    Every call is timed end to end; plain `generate()` is HF's own baseline. Ours at each γ is
    re-run here (not taken from run_bench) so both sides are measured minutes apart at most.
    """
    # transformers' default γ schedule exists for a draft model; prompt lookup always takes a γ.
    # A drafter transformers lacks (the head) is compared with its assisted generation on the draft model.
    with_default = drafter_info(config.engine.drafter).hf_equivalent != "prompt_lookup_num_tokens"
    if pair.draft is None and with_default:
        raise ValueError("--against-hf compares with transformers' assisted generation, which needs a draft model")
    prompt_ids = encode_prompts(pair, prompts, config.chat)
    total = config.repeats * len(prompts) * len(config.temperatures) * (1 + with_default + 2 * len(config.gammas))
    bar = tqdm(total=total, desc="vs transformers", disable=not progress, unit="call")
    warm_up(pair)
    warm_up_config = replace(config, engine=replace(config.engine, max_new_tokens=4))
    hf_generate_s(pair, prompt_ids[0], 0.0, warm_up_config, 0, 2, assisted=True)  # HF's own warm-up
    cells: dict[tuple[float, int | None], list[tuple[float, float, float]]] = {}
    for repeat in range(config.repeats):
        for temperature in config.temperatures:
            for index, ids in enumerate(prompt_ids):
                seed = config.seed + 1000 * repeat + index
                plain_s, plain_n = hf_generate_s(pair, ids, temperature, config, seed, None, assisted=False)
                bar.update(1)
                if with_default:
                    default_s, default_n = hf_generate_s(pair, ids, temperature, config, seed, None, assisted=True)
                    bar.update(1)
                best_ours = 0.0
                for gamma in config.gammas:
                    mine_s, mine_n = ours_s(pair, ids, config.decode_config(temperature, seed, gamma))
                    hf_s, hf_n = hf_generate_s(pair, ids, temperature, config, seed, gamma, assisted=True)
                    bar.update(2)
                    ours_rate, hf_rate = mine_n / mine_s, hf_n / hf_s
                    best_ours = max(best_ours, ours_rate)
                    cells.setdefault((temperature, gamma), []).append((hf_rate, ours_rate, (plain_n / plain_s)))
                if with_default:
                    cells.setdefault((temperature, None), []).append((default_n / default_s, best_ours, plain_n / plain_s))
    bar.close()
    results = []
    for (temperature, gamma), rows in cells.items():
        ratios = [ours / hf for hf, ours, _ in rows]
        results.append(HfResult(
            temperature=temperature,
            gamma=gamma,
            median_hf_tokens_per_s=statistics.median(hf for hf, _, _ in rows),
            median_ours_tokens_per_s=statistics.median(ours for _, ours, _ in rows),
            median_ours_over_hf=statistics.median(ratios),
            min_ours_over_hf=min(ratios),
            max_ours_over_hf=max(ratios),
            median_hf_speedup=statistics.median(hf / plain for hf, _, plain in rows),
            num_runs=len(rows),
        ))
    return sorted(results, key=lambda r: (r.temperature, r.gamma is None, r.gamma or 0))


def format_hf_table(results: list[HfResult]) -> str:
    header = f"{'T':>4} {'HF γ':>12} {'HF tok/s':>9} {'HF/plain':>9} {'ours tok/s':>10} {'ours / HF (min–max)':>24}"
    lines = [header, "-" * len(header)]
    for r in results:
        gamma = "default" if r.gamma is None else f"{r.gamma} const"
        spread = f"{r.median_ours_over_hf:.2f}× ({r.min_ours_over_hf:.2f}–{r.max_ours_over_hf:.2f})"
        lines.append(
            f"{r.temperature:>4g} {gamma:>12} {r.median_hf_tokens_per_s:>9.1f} {r.median_hf_speedup:>8.2f}× "
            f"{r.median_ours_tokens_per_s:>10.1f} {spread:>24}"
        )
    if any(r.gamma is None for r in results):
        lines.append("(HF 'default' rows compare with our best γ per prompt)")
    lines.append("(every call timed end to end)")
    return "\n".join(lines)
