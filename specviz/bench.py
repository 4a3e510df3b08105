"""Benchmark harness: prompts × γ × temperature × repeats, medians with their spread.

Each repeat runs the baseline once per prompt and then speculative decoding at every γ on the
same prompt, so each speedup compares runs made seconds apart on the same machine state.
Speedups are ratios of tokens per second (model work only, as the engine measures it).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterable

from specviz.engine import DecodeConfig, autoregressive_decode, speculative_decode, warm_up
from specviz.models import ASSETS_DIR, ModelPair
from specviz.theory import best_gamma, expected_speedup
from specviz.trace import Trace, speedup

DEFAULT_PROMPTS_FILE = ASSETS_DIR / "prompts.json"


@dataclass(frozen=True)
class BenchConfig:
    """What to measure."""

    gammas: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    temperatures: tuple[float, ...] = (0.0,)
    repeats: int = 3  # runs of every (prompt, γ, temperature)
    max_new_tokens: int = 128
    top_k: int = 0  # applied to both models, as in the app
    top_p: float = 1.0
    seed: int = 0
    # Benchmarks ignore EOS so every run produces the same number of tokens to time.
    stop_at_eos: bool = False


@dataclass(frozen=True)
class BenchResult:
    """One (γ, temperature) cell of the table, pooled over prompts and repeats."""

    gamma: int
    temperature: float
    median_speedup: float
    min_speedup: float
    max_speedup: float
    acceptance_rate: float  # α̂ pooled over all rounds
    mean_tokens_per_round: float
    c: float  # median draft step over median baseline target step
    verify_cost: float  # one (γ+1)-token verify over one baseline step; Leviathan's model assumes 1
    median_baseline_tokens_per_s: float
    median_speculative_tokens_per_s: float
    predicted_speedup: float  # Leviathan's formula at the pooled α̂ and c
    num_runs: int


def load_prompts(path: str | Path | None = None) -> list[str]:
    """A JSON list of strings, or a text file with one prompt per line."""
    path = Path(path) if path else DEFAULT_PROMPTS_FILE
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        prompts = json.loads(text)
    else:
        prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts or not all(isinstance(p, str) and p.strip() for p in prompts):
        raise ValueError(f"{path} holds no usable prompts")
    return prompts


def summarise(gamma: int, temperature: float, pairs: list[tuple[Trace, Trace]]) -> BenchResult:
    """Pool (baseline, speculative) trace pairs into one table row."""
    speedups = [speedup(base, spec) for base, spec in pairs]
    accepted = sum(spec.num_accepted for _, spec in pairs)
    examined = sum(spec.num_examined for _, spec in pairs)
    alpha = accepted / examined if examined else 0.0
    rounds = [e for _, spec in pairs for e in spec.rounds]
    tokens_per_round = sum(len(e.emitted_ids) for e in rounds) / len(rounds) if rounds else 0.0
    draft_step_s = statistics.median(spec.mean_draft_step_s for _, spec in pairs)
    target_step_s = statistics.median(base.mean_target_step_s for base, _ in pairs)
    cost_ratio = draft_step_s / target_step_s if target_step_s else 0.0
    verify_s = statistics.median(spec.mean_target_step_s for _, spec in pairs)
    return BenchResult(
        gamma=gamma,
        temperature=temperature,
        median_speedup=statistics.median(speedups),
        min_speedup=min(speedups),
        max_speedup=max(speedups),
        acceptance_rate=alpha,
        mean_tokens_per_round=tokens_per_round,
        c=cost_ratio,
        verify_cost=verify_s / target_step_s if target_step_s else 0.0,
        median_baseline_tokens_per_s=statistics.median(base.tokens_per_s for base, _ in pairs),
        median_speculative_tokens_per_s=statistics.median(spec.tokens_per_s for _, spec in pairs),
        predicted_speedup=expected_speedup(alpha, gamma, cost_ratio),
        num_runs=len(pairs),
    )


def run_bench(pair: ModelPair, prompts: list[str], config: BenchConfig, progress: bool = True) -> list[BenchResult]:
    """Measure every cell; returns one BenchResult per (γ, temperature)."""
    from tqdm import tqdm

    prompt_ids = [pair.encode(prompt) for prompt in prompts]
    total = config.repeats * len(prompts) * len(config.temperatures) * (1 + len(config.gammas))
    bar = tqdm(total=total, desc="bench", disable=not progress, unit="run")
    runs: dict[tuple[int, float], list[tuple[Trace, Trace]]] = {}
    warm_up(pair)
    for repeat in range(config.repeats):
        for temperature in config.temperatures:
            for index, ids in enumerate(prompt_ids):
                base_config = DecodeConfig(
                    temperature=temperature,
                    top_k=config.top_k,
                    top_p=config.top_p,
                    max_new_tokens=config.max_new_tokens,
                    seed=config.seed + 1000 * repeat + index,
                    stop_at_eos=config.stop_at_eos,
                )
                baseline = Trace.from_events(autoregressive_decode(pair, ids, base_config))
                bar.update()
                for gamma in config.gammas:
                    speculative = Trace.from_events(speculative_decode(pair, ids, replace(base_config, gamma=gamma)))
                    runs.setdefault((gamma, temperature), []).append((baseline, speculative))
                    bar.update()
    bar.close()
    return [summarise(gamma, temperature, pairs) for (gamma, temperature), pairs in runs.items()]


def recommend_gamma(results: Iterable[BenchResult], temperature: float) -> int:
    """The measured best γ at this temperature (highest median speedup)."""
    cells = [r for r in results if r.temperature == temperature]
    return max(cells, key=lambda r: r.median_speedup).gamma


def theory_gamma(result: BenchResult) -> int:
    return best_gamma(result.acceptance_rate, result.c)


def format_table(results: list[BenchResult]) -> str:
    """Plain-text table, one row per (temperature, γ), then the recommended γ per temperature."""
    header = f"{'T':>4} {'γ':>3} {'speedup (min–max)':>22} {'α̂':>6} {'tok/round':>9} {'c':>6} {'verify':>6} {'predicted':>9} {'base tok/s':>10} {'spec tok/s':>10}"
    lines = [header, "-" * len(header)]
    for r in sorted(results, key=lambda r: (r.temperature, r.gamma)):
        spread = f"{r.median_speedup:.2f}× ({r.min_speedup:.2f}–{r.max_speedup:.2f})"
        lines.append(
            f"{r.temperature:>4g} {r.gamma:>3} {spread:>22} {r.acceptance_rate:>6.3f} {r.mean_tokens_per_round:>9.2f} "
            f"{r.c:>6.3f} {r.verify_cost:>6.2f} {r.predicted_speedup:>8.2f}× {r.median_baseline_tokens_per_s:>10.1f} {r.median_speculative_tokens_per_s:>10.1f}"
        )
    for temperature in sorted({r.temperature for r in results}):
        best = recommend_gamma(results, temperature)
        cell = next(r for r in results if r.temperature == temperature and r.gamma == best)
        lines.append(
            f"T={temperature:g}: recommended γ = {best} (measured median {cell.median_speedup:.2f}×; "
            f"theory's best γ for α̂={cell.acceptance_rate:.2f}, c={cell.c:.3f} is {theory_gamma(cell)})"
        )
    return "\n".join(lines)


def results_to_json(pair: ModelPair, prompts: list[str], config: BenchConfig, results: list[BenchResult]) -> dict:
    return {
        "pair": pair.name,
        "device": str(pair.device),
        "num_prompts": len(prompts),
        "config": asdict(config),
        "results": [asdict(r) for r in sorted(results, key=lambda r: (r.temperature, r.gamma))],
        "recommended_gamma": {str(t): recommend_gamma(results, t) for t in config.temperatures},
    }
