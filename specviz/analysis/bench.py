"""Benchmark harness: prompts × γ × temperature × repeats, medians with their spread.

Each repeat runs the baseline once per prompt and then speculative decoding at every γ on the
same prompt, so each speedup compares runs made seconds apart on the same machine state.
Speedups are ratios of tokens per second (model work only, as the engine measures it).

`bench --against-hf` (run_against_hf) times ours against transformers' assisted generation, whole calls end to
end, with its plain generate() as its baseline: every figure there includes each library's own overheads, so
its table (HfResult) never mixes with the one above.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

from tqdm import tqdm
from transformers import AutoModelForCausalLM

from specviz.catalogue import drafter_info
from specviz.decoding import reference
from specviz.decoding.config import DecodeConfig
from specviz.decoding.drafters import draft_head_variant
from specviz.decoding.engine import autoregressive_decode, clock, longest_text, speculative_decode, warm_up
from specviz.decoding.events import Event
from specviz.models import compact
from specviz.models.invariance import plain_copy
from specviz.models.loading import NO_REMOTE_CODE
from specviz.models.pairs import ModelPair
from specviz.models.precision import PRECISIONS
from specviz.models.presets import ASSETS_DIR
from specviz.analysis.expectations import record_metadata
from specviz.analysis.payoff import TIE_RULE, Measurement, Payoff, Spread, repeat_spread
from specviz.analysis.theory import expected_speedup
from specviz.analysis.trace import Trace, speedup, tokens_per_target_forward

DEFAULT_PROMPTS_FILE = ASSETS_DIR / "prompts.json"


@dataclass(frozen=True)
class Prompt:
    """An example prompt: the user's text, and whether it goes through the chat template."""

    text: str
    chat: bool | None = None  # None: the template when the pair has one; False: plain completion


# The engine's settings a bench runs with unless told otherwise: a longer text than a page's run, so its
# timings rest on more rounds.
BENCH_ENGINE = DecodeConfig(max_new_tokens=128)
SWEPT = ("gamma", "temperature", "tree", "seed", "inspect")  # each run's own, not the bench's (BenchConfig.record)


@dataclass(frozen=True)
class BenchConfig:
    """What to measure: the engine's settings every run shares (`engine`), and the axes swept over them (a
    run's own γ, temperature, tree budget and seed: decode_config)."""

    engine: DecodeConfig = BENCH_ENGINE
    gammas: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    temperatures: tuple[float, ...] = (0.0,)
    trees: tuple[int, ...] = (DecodeConfig.tree,)  # tree budgets (0 = a chain), each run at every γ
    repeats: int = 3  # runs of every (prompt, γ, temperature)
    chat: bool | None = None  # overrides every prompt's own chat setting when not None

    @property
    def seed(self) -> int:
        """The first run's seed; each (repeat, prompt) adds to it."""
        return self.engine.seed

    def num_timed_runs(self, num_prompts: int) -> int:
        """What timed_runs yields: per repeat, temperature and prompt, a baseline and every (γ, tree)."""
        return self.repeats * num_prompts * len(self.temperatures) * (1 + len(self.gammas) * len(self.trees))

    def decode_config(self, temperature: float, seed: int, gamma: int = DecodeConfig.gamma,
                      tree: int = DecodeConfig.tree) -> DecodeConfig:
        """One timed run's engine settings, the same for both lanes."""
        return replace(self.engine, gamma=gamma, temperature=temperature, seed=seed, tree=tree)

    def record(self) -> dict:
        """The settings as a bench record keeps them."""
        shared = {name: value for name, value in asdict(self.engine).items() if name not in SWEPT}
        return {"gammas": self.gammas, "temperatures": self.temperatures, "repeats": self.repeats, "seed": self.seed,
                "chat": self.chat, **shared, "trees": self.trees}


@dataclass(frozen=True)
class BenchResult:
    """One (γ, temperature) cell of the table, pooled over prompts and repeats."""

    gamma: int
    temperature: float
    median_speedup: float
    min_speedup: float
    max_speedup: float
    acceptance_rate: float  # α̂ pooled over all rounds
    tokens_per_target_forward: float  # τ pooled over all runs (trace.tokens_per_target_forward), bonus included
    c: float  # median draft step over median baseline target step
    verify_cost: float  # one (γ+1)-token verify over one baseline step; Leviathan's model assumes 1
    median_baseline_tokens_per_s: float
    median_speculative_tokens_per_s: float
    predicted_speedup: float  # Leviathan's formula at the pooled α̂ and c
    num_runs: int
    # Greedy runs whose tokens parted from the baseline's: 0 wherever a verify is bitwise a step
    # (specviz.models.invariance; a device where it is not rounds differently at near-ties). None when sampled,
    # except at top-k 1, where the target keeps one token and the rule must write the greedy text too.
    num_diverged: int | None = None
    tree: int = 0  # the tree budget (DecodeConfig.tree; 0 = a chain)
    # each run's speedup in the order measured (timed_runs): repeat by repeat, the prompts in order within each,
    # so run i is prompt i mod num_prompts; repeats of one prompt say how far timing alone moves a run
    speedups: tuple[float, ...] = ()
    num_prompts: int = 0  # how many prompts the runs span (0: not known)


def load_prompts(path: str | Path | None = None) -> list[Prompt]:
    """A JSON list (strings, or {"prompt": text, "chat": bool} objects), or one prompt per line."""
    path = Path(path) if path else DEFAULT_PROMPTS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:  # missing, a folder, not text: said, never a traceback
        raise ValueError(f"cannot read the prompts file {path}: {getattr(error, 'strerror', None) or error}") from error
    try:
        entries = json.loads(text) if path.suffix == ".json" else [line for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not JSON ({error.msg}, line {error.lineno}): give a JSON list of prompts, or "
                         "one prompt per line in a file not named .json") from error
    prompts = [to_prompt(entry) for entry in entries] if isinstance(entries, list) else []
    if not prompts or not all(p is not None and p.text.strip() for p in prompts):
        raise ValueError(f"{path} holds no usable prompts")
    return prompts


def to_prompt(entry) -> Prompt | None:
    if isinstance(entry, str):
        return Prompt(entry)
    if isinstance(entry, dict) and isinstance(entry.get("prompt"), str) and entry.get("chat") in (None, True, False):
        return Prompt(entry["prompt"], entry.get("chat"))
    return None


def summarise(gamma: int, temperature: float, pairs: list[tuple[Trace, Trace]], tree: int = 0,
              num_prompts: int = 0, single_token: bool = False) -> BenchResult:
    """Pool (baseline, speculative) trace pairs, in the order timed_runs measured them, into one table row.
    Partings are counted where both lanes must write one text: greedy, or sampled at top-k 1 (`single_token`)."""
    speedups = [speedup(base, spec) for base, spec in pairs]
    accepted = sum(spec.num_accepted for _, spec in pairs)
    examined = sum(spec.num_examined for _, spec in pairs)
    alpha = accepted / examined if examined else 0.0
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
        tokens_per_target_forward=tokens_per_target_forward(spec for _, spec in pairs),
        c=cost_ratio,
        verify_cost=verify_s / target_step_s if target_step_s else 0.0,
        median_baseline_tokens_per_s=statistics.median(base.tokens_per_s for base, _ in pairs),
        median_speculative_tokens_per_s=statistics.median(spec.tokens_per_s for _, spec in pairs),
        predicted_speedup=expected_speedup(alpha, gamma, cost_ratio),
        num_runs=len(pairs),
        num_diverged=(sum(base.token_ids != spec.token_ids for base, spec in pairs)
                      if temperature == 0 or single_token else None),
        tree=tree,
        speedups=tuple(speedups),
        num_prompts=num_prompts,
    )


def encode_prompts(pair: ModelPair, prompts: list[Prompt], chat: bool | None) -> list[list[int]]:
    return [pair.encode(prompt.text, prompt.chat if chat is None else chat) for prompt in prompts]


SEED_MODULUS = 2**63  # torch seeds must stay below 2^64; a page's seed may be up to 2^63 − 1
TimedRun = tuple[int | None, int, float, Trace, Trace | None]  # (γ, tree budget, temperature, baseline, speculative)


def timed_runs(pair: ModelPair, prompt_ids: list[list[int]], config: BenchConfig) -> Iterator[TimedRun]:
    """Every timed run as it finishes: (None, 0, T, baseline, None) for a baseline run, then (γ, tree, T,
    that baseline, speculative) for each γ and tree budget; a consumer may stop between any two."""
    # the caches' most positions: the longest prompt with its new tokens and the widest round (engine.longest_text)
    widest = config.decode_config(0.0, config.seed, max(config.gammas, default=1), max(config.trees, default=0))
    warm_up(pair, max((longest_text(pair, len(ids), widest) for ids in prompt_ids), default=0), widest.gamma - 1)
    for repeat in range(config.repeats):
        for temperature in config.temperatures:
            for index, ids in enumerate(prompt_ids):
                seed = (config.seed + 1000 * repeat + index) % SEED_MODULUS
                base_config = config.decode_config(temperature, seed)
                baseline = Trace.from_events(autoregressive_decode(pair, ids, base_config))
                yield None, 0, temperature, baseline, None
                for gamma in config.gammas:
                    for tree in config.trees:
                        settings = replace(base_config, gamma=gamma, tree=tree)
                        yield gamma, tree, temperature, baseline, Trace.from_events(speculative_decode(pair, ids, settings))


def run_bench(pair: ModelPair, prompts: list[Prompt], config: BenchConfig, progress: bool = True) -> list[BenchResult]:
    """Measure every cell; returns one BenchResult per (γ, tree budget, temperature)."""
    runs = timed_runs(pair, encode_prompts(pair, prompts, config.chat), config)
    total = config.num_timed_runs(len(prompts))
    return pool(tqdm(runs, total=total, desc="bench", disable=not progress, unit="run"), len(prompts),
                config.engine.top_k == 1)


def pool(runs: Iterable[TimedRun], num_prompts: int = 0, single_token: bool = False) -> list[BenchResult]:
    """Timed runs (timed_runs' order, over num_prompts prompts) pooled into one BenchResult per (γ, tree budget,
    temperature), in the order first measured. `single_token`: the runs sampled at top-k 1, where the target keeps
    one token (barring an exact tie at the top), so a sampled run must write the greedy text as well (its partings
    are counted too)."""
    cells: dict[tuple[int, int, float], list[tuple[Trace, Trace]]] = {}
    for gamma, tree, temperature, baseline, speculative in runs:
        if speculative is not None:
            cells.setdefault((gamma, tree, temperature), []).append((baseline, speculative))
    return [summarise(gamma, temperature, pairs, tree, num_prompts, single_token)
            for (gamma, tree, temperature), pairs in cells.items()]


def payoff_of(results: Iterable[BenchResult], temperature: float) -> Payoff:
    """The one verdict on this temperature's cells of every tree budget, so the rule picks the budget as it
    picks γ, at the α̂, c and v of the best cell."""
    cells = [r for r in results if r.temperature == temperature]
    best = max(cells, key=lambda r: r.median_speedup)
    return Payoff(best.acceptance_rate, best.c, best.verify_cost, tuple(measurement_of(r) for r in cells))


def measurement_of(result: BenchResult, spread: Spread | None = None) -> Measurement:
    """A cell as the one rule reads it: a cell of one run takes `spread`, as the page's one run does; a cell of
    several prompts each run more than once is judged by its own repeats' spread, not by the prompts' range."""
    if result.num_runs > 1:
        spread = repeat_spread(result.speedups, result.num_prompts,
                               f"repeats of each of this bench's {result.num_prompts} prompts")
    return Measurement(result.gamma, result.median_speedup, result.min_speedup, result.max_speedup, result.num_runs,
                       spread, result.tree)


def recommendation_record(results: Iterable[BenchResult], temperature: float) -> dict:
    """The recommendation as the JSON keeps it, with the formula's best γ as a prediction beside it."""
    payoff = payoff_of(results, temperature)
    return {
        "gamma": payoff.recommended_gamma,
        "tree": payoff.recommended_tree,
        "text": payoff.choice_text() or payoff.recommendation_text(),
        "rule": TIE_RULE,
        "best_median_gamma": payoff.best.gamma,
        "best_median_tree": payoff.best.tree,
        "tied": [m.label for m in payoff.ties],
        "tied_gammas": [m.gamma for m in payoff.ties],
        "at_range_edge": payoff.at_range_edge,
        "formula_predicts_gamma": payoff.predicted_gamma,
        "formula_predicts_speedup": payoff.predicted_speedup,
    }


def format_table(results: list[BenchResult]) -> str:
    """Plain-text table, one row per (temperature, γ), then the recommended γ per temperature."""
    header = f"{'T':>4} {'γ':>3} {'tree':>4} {'speedup (min–max)':>22} {'α̂':>6} {'τ':>6} {'c':>6} {'verify':>6} {'predicted':>9} {'base tok/s':>10} {'spec tok/s':>10} {'diverged':>8}"
    lines = [header, "-" * len(header)]
    for r in sorted(results, key=lambda r: (r.temperature, r.tree, r.gamma)):
        spread = f"{r.median_speedup:.2f}× ({r.min_speedup:.2f}–{r.max_speedup:.2f})"
        diverged = "—" if r.num_diverged is None else f"{r.num_diverged}/{r.num_runs}"
        lines.append(
            f"{r.temperature:>4g} {r.gamma:>3} {r.tree:>4} {spread:>22} {r.acceptance_rate:>6.3f} {r.tokens_per_target_forward:>6.2f} "
            f"{r.c:>6.3f} {r.verify_cost:>6.2f} {r.predicted_speedup:>8.2f}× {r.median_baseline_tokens_per_s:>10.1f} {r.median_speculative_tokens_per_s:>10.1f} {diverged:>8}"
        )
    for temperature in sorted({r.temperature for r in results}):  # the rule over every γ and tree budget
        payoff = payoff_of(results, temperature)
        best = payoff.best
        why = payoff.choice_text() or (f"best measured median {best.median:.2f}× ({best.low:.2f}–{best.high:.2f}) at "
                                       f"{best.label}.")
        lines.append(f"T={temperature:g}: recommended {payoff.recommendation_text()}: {why}")
        lines.append(f"  beside it, {payoff.prediction_text()}.")
    if results:
        lines.append(f"(the rule: {TIE_RULE})")
        lines.append("(α̂: the share of the drafts the target examined that it accepted; τ: tokens per target pass after "
                     "the prefill, accepted drafts plus the target's own correction or bonus, so 1 ≤ τ ≤ γ + 1)")
    return "\n".join(lines)


def results_to_json(pair: ModelPair, prompts: list[Prompt], config: BenchConfig, results: list[BenchResult]) -> dict:
    """The bench's record: the figures, and which machine, prompts, date and command gave them."""
    recommendations = {str(t): recommendation_record(results, t) for t in config.temperatures}  # one rule, asked once
    return {
        "pair": pair.name,
        "draft_head": draft_head_variant(pair, config.engine.full_draft_head),
        "device": str(pair.device),
        "precision": pair.precision,
        "int8_drafters": pair.int8_drafters,
        "num_prompts": len(prompts),
        "config": config.record(),
        "results": [asdict(r) for r in sorted(results, key=lambda r: (r.temperature, r.tree, r.gamma))],
        "recommended_gamma": {t: recommendation["gamma"] for t, recommendation in recommendations.items()},
        "recommended_tree": {t: recommendation["tree"] for t, recommendation in recommendations.items()},
        "recommendation": recommendations,
        "prompt_tokens": prompt_token_range(encode_prompts(pair, prompts, config.chat)),
        **record_metadata(pair.device, [prompt.text for prompt in prompts], pair.invariance),
    }


def prompt_token_range(prompt_ids: list[list[int]]) -> dict:
    """How long the prompts were as the target read them (chat template included): a page tells a long prompt's
    run from records of short ones by it."""
    lengths = [len(ids) for ids in prompt_ids] or [0]
    return {"min": min(lengths), "max": max(lengths)}


@dataclass(frozen=True)
class HfResult:
    """End-to-end wall time of whole calls, ours and transformers', per (temperature, γ). transformers' side runs
    on the target loaded plainly (plain_target: no specviz code on it), as a user of transformers has it."""

    temperature: float
    gamma: int | None  # None: transformers' default schedule (dynamic γ, confidence threshold)
    median_hf_tokens_per_s: float
    median_ours_tokens_per_s: float  # our speculative lane at this γ (None row: the best γ's)
    median_ours_over_hf: float  # ratio of tokens/s, per run, then the median
    min_ours_over_hf: float
    max_ours_over_hf: float
    median_hf_speedup: float  # HF assisted over HF plain generate()
    num_runs: int
    median_plain_tokens_per_s: float = 0.0  # transformers' plain generate() on the plainly loaded target
    median_ours_over_plain: float = 0.0  # our speculative lane over plain generate(), per run, then the median
    min_ours_over_plain: float = 0.0
    max_ours_over_plain: float = 0.0
    median_alone_over_plain: float = 0.0  # our target alone (the baseline lane) over plain generate()
    min_alone_over_plain: float = 0.0
    max_alone_over_plain: float = 0.0


def plain_target(pair: ModelPair, precision: str | None = None):
    """The pair's target as transformers loads it: `AutoModelForCausalLM.from_pretrained` on the same folder or
    hub id, same device, same precision unless `precision` names another, none of specviz's forwards or attention
    on it (what a user would time). A target stored in specviz's compact format (the tiny pair's), which
    transformers cannot load, is copied with every specviz forward taken off instead (invariance.plain_copy)."""
    parameter = next(pair.target.parameters())
    if compact.is_compact(pair.target.name_or_path):
        return plain_copy(pair.target)
    dtype = PRECISIONS[precision] if precision else parameter.dtype
    model = AutoModelForCausalLM.from_pretrained(pair.target.name_or_path, dtype=dtype, **NO_REMOTE_CODE)
    return model.to(parameter.device).eval()


def hf_rate(pair: ModelPair, ids: list[int], temperature: float, config: BenchConfig, seed: int,
            gamma: int | None, assisted: bool) -> float:
    """One transformers generate() call's new tokens per second, timed end to end (gamma None: its default
    schedule)."""
    decode_config = config.decode_config(temperature, seed, gamma or 1)
    seconds, tokens = reference.time_generate(pair, ids, decode_config, assisted, constant_gamma=gamma is not None)
    return tokens / seconds


def ours_rate(decode: Callable[..., Iterator[Event]], pair: ModelPair, ids: list[int], config: DecodeConfig) -> float:
    """Our lane's tokens per second (`decode`: speculative_decode, or the target alone's), timed end to end like a
    generate() call (events and all)."""
    started = clock(pair.device)  # as transformers' side is timed: after the GPU's queued work
    trace = Trace.from_events(decode(pair, ids, config))
    return trace.num_tokens / (clock(pair.device) - started)


def run_against_hf(pair: ModelPair, prompts: list[Prompt], config: BenchConfig, progress: bool = True,
                   deadline: float | None = None, hf_dtype: str | None = None) -> list[HfResult]:
    """Ours vs what a user of transformers runs, prompt by prompt in one process: plain `generate()` and
    `generate(assistant_model=draft)` at every γ (constant schedule) and with HF's default schedule, on the target
    loaded plainly; with prompt lookup, `generate(prompt_lookup_num_tokens=γ)`. Ours (the target alone and the
    speculative lane at every γ) is re-run here, so every ratio compares calls made seconds apart. `deadline`
    (time.monotonic()): no prompt is started after it, once one has run. `hf_dtype`: transformers' target in that
    precision (default ours)."""
    # transformers' default γ schedule exists for a draft model; prompt lookup always takes a γ.
    # A drafter transformers lacks (the head) is compared with its assisted generation on the draft model.
    with_default = drafter_info(config.engine.drafter).hf_equivalent != "prompt_lookup_num_tokens"
    if pair.draft is None and with_default:
        raise ValueError("--against-hf compares with transformers' assisted generation, which needs a draft model")
    theirs = replace(pair, target=plain_target(pair, hf_dtype), invariance=None)
    prompt_ids = encode_prompts(pair, prompts, config.chat)
    total = config.repeats * len(prompts) * len(config.temperatures) * (2 + with_default + 2 * len(config.gammas))
    bar = tqdm(total=total, desc="vs transformers", disable=not progress, unit="call")
    warm_up(pair)
    warm_up_config = replace(config, engine=replace(config.engine, max_new_tokens=4))
    hf_rate(theirs, prompt_ids[0], 0.0, warm_up_config, 0, 2, assisted=True)  # HF's own warm-up
    hf_rate(theirs, prompt_ids[0], 0.0, warm_up_config, 0, None, assisted=False)
    # (HF assisted, ours, HF plain, ours alone) tokens/s
    cells: dict[tuple[float, int | None], list[tuple[float, float, float, float]]] = {}
    for repeat in range(config.repeats):
        for temperature in config.temperatures:
            for index, ids in enumerate(prompt_ids):
                if deadline is not None and cells and time.monotonic() > deadline:
                    break
                seed = config.seed + 1000 * repeat + index
                plain = hf_rate(theirs, ids, temperature, config, seed, None, assisted=False)
                alone = ours_rate(autoregressive_decode, pair, ids, config.decode_config(temperature, seed))
                default = hf_rate(theirs, ids, temperature, config, seed, None, assisted=True) if with_default else 0.0
                bar.update(2 + with_default)
                ours_at = {}
                for gamma in config.gammas:
                    settings = config.decode_config(temperature, seed, gamma)
                    ours_at[gamma] = ours_rate(speculative_decode, pair, ids, settings)
                    hf = hf_rate(theirs, ids, temperature, config, seed, gamma, assisted=True)
                    bar.update(2)
                    cells.setdefault((temperature, gamma), []).append((hf, ours_at[gamma], plain, alone))
                if with_default:  # against our best γ on this prompt
                    best = max(ours_at.values(), default=0.0)
                    cells.setdefault((temperature, None), []).append((default, best, plain, alone))
    bar.close()
    results = []
    for (temperature, gamma), rows in cells.items():
        ratios = [ours / hf for hf, ours, _, _ in rows]
        over_plain = [ours / plain for _, ours, plain, _ in rows]
        alone_over_plain = [alone / plain for _, _, plain, alone in rows]
        results.append(HfResult(
            temperature=temperature,
            gamma=gamma,
            median_hf_tokens_per_s=statistics.median(hf for hf, _, _, _ in rows),
            median_ours_tokens_per_s=statistics.median(ours for _, ours, _, _ in rows),
            median_ours_over_hf=statistics.median(ratios),
            min_ours_over_hf=min(ratios),
            max_ours_over_hf=max(ratios),
            median_hf_speedup=statistics.median(hf / plain for hf, _, plain, _ in rows),
            num_runs=len(rows),
            median_plain_tokens_per_s=statistics.median(plain for _, _, plain, _ in rows),
            median_ours_over_plain=statistics.median(over_plain),
            min_ours_over_plain=min(over_plain),
            max_ours_over_plain=max(over_plain),
            median_alone_over_plain=statistics.median(alone_over_plain),
            min_alone_over_plain=min(alone_over_plain),
            max_alone_over_plain=max(alone_over_plain),
        ))
    return sorted(results, key=lambda r: (r.temperature, r.gamma is None, r.gamma or 0))


def format_hf_table(results: list[HfResult]) -> str:
    header = (f"{'T':>4} {'HF γ':>12} {'plain tok/s':>11} {'HF tok/s':>9} {'HF/plain':>9} {'ours tok/s':>10} "
              f"{'ours / HF (min–max)':>22} {'ours / plain':>22} {'alone / plain':>22}")
    lines = [header, "-" * len(header)]
    band = lambda median, low, high: f"{median:.2f}× ({low:.2f}–{high:.2f})"  # noqa: E731
    for r in results:
        gamma = "default" if r.gamma is None else f"{r.gamma} const"
        lines.append(
            f"{r.temperature:>4g} {gamma:>12} {r.median_plain_tokens_per_s:>11.1f} {r.median_hf_tokens_per_s:>9.1f} "
            f"{r.median_hf_speedup:>8.2f}× {r.median_ours_tokens_per_s:>10.1f} "
            f"{band(r.median_ours_over_hf, r.min_ours_over_hf, r.max_ours_over_hf):>22} "
            f"{band(r.median_ours_over_plain, r.min_ours_over_plain, r.max_ours_over_plain):>22} "
            f"{band(r.median_alone_over_plain, r.min_alone_over_plain, r.max_alone_over_plain):>22}"
        )
    if any(r.gamma is None for r in results):
        lines.append("(HF 'default' rows compare with our best γ per prompt)")
    lines.append("(every call timed end to end; transformers' side on the target loaded plainly; 'alone': our target"
                 " alone)")
    return "\n".join(lines)


