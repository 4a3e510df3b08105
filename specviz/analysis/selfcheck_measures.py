"""What the self-check measures, each given its pair and a deadline (specviz.analysis.selfcheck runs them in
turn); SelfCheckConfig says how much of each."""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, replace
from itertools import zip_longest
from typing import Callable, Iterator

import torch

from specviz.analysis.bench import (BENCH_ENGINE, BenchConfig, Prompt, encode_prompts, ours_rate, pool, results_to_json,
                                    timed_runs)
from specviz.analysis.expectations import record_name
from specviz.analysis.profile import ProfileConfig, format_profile, profile_target, profiled
from specviz.analysis.trace import Trace, first_parting
from specviz.catalogue import DRAFTER_CATALOGUE
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import autoregressive_decode, clock, speculative_decode
from specviz.decoding.reference import generate_kwargs, time_generate
from specviz.models.invariance import plain_copy
from specviz.models.pairs import ModelPair
from specviz.models.slot_calls import POOL


@dataclass(frozen=True)
class SelfCheckConfig:
    """What the self-check measures; its minutes cut whatever the sizes ask for."""

    pair: str | None = None  # a preset; None: the default pair
    device: str | None = None  # None: CUDA when present, else the CPU
    minutes: float = 7.0  # the whole run, the target's rebuild included
    precisions: tuple[str, ...] | None = None  # None: CUDA bfloat16, float16, float32; a CPU bfloat16, float32
    gammas: tuple[int, ...] = (1, 3, 6)  # greedy identity is checked at each
    bench_gammas: tuple[int, ...] = (3, 5)  # around a GPU's best γ; more cells reach fewer prompts
    bench_trees: tuple[int, ...] = (0, 16)  # (0 = a chain) beside it: each machine kind's default
    temperatures: tuple[float, ...] = (0.0, 0.7)
    max_new_tokens: int = 64
    num_prompts: int | None = None  # per prompt set; None: all of them, as far as the time goes
    profile_tokens: tuple[int, ...] = (1, 3, 4, 5, 7)  # a step, then verifies of γ + 1
    profile_repeats: int = 12
    drafters: tuple[str, ...] | None = None  # None: every drafter the pair runs, its own first
    skip: tuple[str, ...] = ()  # phases left out, by the start of their name ("against generate")


def taken_in_turn(sets: dict[str, list[Prompt]]) -> Iterator[tuple[str, int, Prompt]]:
    """(set, index, prompt), one from each set in turn, so a cut leaves every set checked a little."""
    for index, prompts in enumerate(zip_longest(*sets.values())):
        yield from ((name, index, prompt) for name, prompt in zip(sets, prompts) if prompt is not None)


def greedy_partings(pair: ModelPair, ids: list[int], config: SelfCheckConfig) -> Iterator[tuple[int, str, int | None]]:
    """(γ, against, position) for each comparison of a greedy speculative run with the target alone and with
    transformers' generate(): where the lane left their tokens, None where it never did."""
    decode = DecodeConfig(max_new_tokens=config.max_new_tokens)
    baseline = Trace.from_events(autoregressive_decode(pair, ids, decode))
    theirs = transformers_greedy(pair, ids, decode)
    for gamma in config.gammas:
        ours = Trace.from_events(speculative_decode(pair, ids, replace(decode, gamma=gamma)))
        for against, other in (("target alone", baseline.token_ids), ("transformers", theirs)):
            yield gamma, against, first_parting(ours.token_ids, other)


@torch.inference_mode()
def transformers_greedy(pair: ModelPair, ids: list[int], config: DecodeConfig) -> list[int]:
    """The target's own generate(), greedy, as a reference independent of our engine."""
    input_ids = torch.tensor([ids], device=pair.device)  # (1, n)
    kwargs = generate_kwargs(pair, config, config.max_new_tokens, assisted=False)
    output = pair.target.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
    return output[0, len(ids):].tolist()


def check_exactness(pair: ModelPair, sets: dict[str, list[Prompt]], config: SelfCheckConfig, deadline: float) -> dict:
    """The verify's measured invariance and greedy identity, prompt by prompt until the deadline. Each parting
    says where a greedy lane left the target alone's tokens ("target alone") or transformers'."""
    done = dict.fromkeys(sets, 0)
    partings, num_checked, cut = [], 0, False
    for name, index, prompt in taken_in_turn(sets):
        if time.monotonic() > deadline:
            cut = True
            break
        for gamma, against, position in greedy_partings(pair, encode_prompts(pair, [prompt], None)[0], config):
            num_checked += 1
            if position is not None:
                partings.append({"prompt_index": index, "gamma": gamma, "against": against, "position": position,
                                 "prompt_set": name})
        done[name] += 1
    invariance = asdict(pair.invariance) if pair.invariance else None
    return {"precision": pair.precision, "invariance": invariance, "num_checked": num_checked,
            "num_identical": num_checked - len(partings), "partings": partings, "prompts_done": done,
            "prompts_total": {name: len(prompts) for name, prompts in sets.items()}, "cut": cut}


def bench_until(pair: ModelPair, prompts: list[Prompt], config: BenchConfig, deadline: float) -> tuple[list, int, bool]:
    """The bench's timed runs until the deadline, each temperature with its share: (results, prompts reached, cut)."""
    results, reached, cut = [], 0, False
    prompt_ids = encode_prompts(pair, prompts, config.chat)
    for number, temperature in enumerate(config.temperatures):
        stop_at = time.monotonic() + (deadline - time.monotonic()) / (len(config.temperatures) - number)
        runs = []
        for run in timed_runs(pair, prompt_ids, replace(config, temperatures=(temperature,))):
            runs.append(run)
            if time.monotonic() > stop_at:
                cut = True
                break
        reached = max(reached, sum(speculative is None for *_, speculative in runs))  # one baseline per prompt
        results += pool(runs, len(prompt_ids))
    return results, reached, cut


def bench_drafters(pair: ModelPair, prompts: tuple[str, list[Prompt]], config: SelfCheckConfig, deadline: float,
                   drafters: list[str], keep: Callable[[str, dict], None] = lambda name, record: None) -> dict[str, dict]:
    """One `bench --json` record per drafter the pair can run, each with its share of the time; `keep`
    hears each as it is made (a later drafter's failure must not lose it)."""
    set_name, chosen = prompts
    records = {}
    runnable = [info for name in drafters for info in DRAFTER_CATALOGUE if info.name == name and not pair.lacks_for(info)]
    for number, info in enumerate(runnable):  # the pair's own drafter first
        budget_s = (deadline - time.monotonic()) / (len(runnable) - number)
        stop_at = time.monotonic() + budget_s
        engine = replace(BENCH_ENGINE, max_new_tokens=config.max_new_tokens, drafter=info.name)
        bench = BenchConfig(engine, gammas=config.bench_gammas, temperatures=config.temperatures, repeats=1,
                            trees=config.bench_trees)
        results, reached, cut = bench_until(pair, chosen, bench, stop_at)
        if not results:
            continue
        measured = replace(bench, temperatures=tuple(sorted({r.temperature for r in results})))
        record = results_to_json(pair, chosen[:reached], measured, results)
        record["prompts"] = {**record["prompts"], "set": set_name, "first": reached, "of": len(chosen)}
        record["selfcheck"] = {"cut": cut, "budget_s": round(budget_s, 1)}
        name = record_name(record)
        name = name if info.name == drafters[0] else name.replace(".json", f"--{info.name}.json")
        records[name] = record
        keep(name, record)
    return records


def baseline_against_generate(pair: ModelPair, prompts: list[Prompt], config: SelfCheckConfig, deadline: float) -> dict:
    """Is the baseline fair (not slowed)? The target alone in the engine over transformers' greedy generate()
    in tokens per second, whole calls timed alike, prompt by prompt until the deadline: on the same target (the
    engine's loop against transformers'), and on the target as transformers loads it (what exactness costs)."""
    decode, cut = DecodeConfig(max_new_tokens=config.max_new_tokens), False
    plain = replace(pair, target=plain_copy(pair.target), invariance=None)
    ratios: dict[str, list[float]] = {"ours_over_generate": [], "ours_over_plain_generate": []}
    for ids in encode_prompts(pair, prompts, None):
        if time.monotonic() > deadline:
            cut = True
            break
        ours = ours_rate(autoregressive_decode, pair, ids, decode)
        for name, against in (("ours_over_generate", pair), ("ours_over_plain_generate", plain)):
            theirs_s, theirs_n = time_generate(against, ids, decode, assisted=False)
            ratios[name].append(ours / (theirs_n / theirs_s))
    spread = {name: {"median": statistics.median(r), "min": min(r), "max": max(r)} if r else {}
              for name, r in ratios.items()}
    return {"precision": pair.precision, **spread, "num_prompts": len(ratios["ours_over_generate"]), "cut": cut}


def profile_pair(pair: ModelPair, config: SelfCheckConfig) -> tuple[str, str]:
    """The target's step against verifies, then one draft model step: the tables, and the run table's line."""
    profile = ProfileConfig(token_counts=config.profile_tokens, repeats=config.profile_repeats,
                            trees=tuple(budget for budget in config.bench_trees if budget))  # a verify's cost per budget
    where = f"{pair.name} on {pair.device} in {pair.precision}"
    target = profile_target(pair, profile)
    step_s = next((p.wall_s for p in target if p.num_tokens == 1), target[0].wall_s)
    text = format_profile(target, f"target, {where}")
    line = f"target step {step_s * 1e3:.2f} ms; " + ", ".join(
        f"{f'tree {p.tree}' if p.tree else f'{p.num_tokens} tokens'} {p.wall_s / step_s:.2f}"
        for p in target if p.num_tokens > 1) + " steps"
    if pair.draft is not None:
        draft_only = replace(pair, target=pair.draft, invariance=None)
        draft = profile_target(draft_only, replace(profile, token_counts=(1,), trees=()))
        text += "\n\n" + format_profile(draft, f"draft model step, {where}{' (int8)' if pair.int8_drafters else ''}")
        line += f"; draft model step {draft[0].wall_s * 1e3:.2f} ms (c {draft[0].wall_s / step_s:.3f})"
    return text, line


def profile_one_run(pair: ModelPair, prompt: Prompt, config: SelfCheckConfig) -> tuple[str, str]:
    """One speculative run of the page's defaults under torch's profiler: where a round spends what the
    forward profile does not see (Python, syncs, sampling, the drafter). Its top ops, and its wall time
    against its GPU time in one line."""
    ids = encode_prompts(pair, [prompt], None)[0]
    decode = DecodeConfig(max_new_tokens=config.max_new_tokens)
    Trace.from_events(speculative_decode(pair, ids, decode))  # warm-up: kernels chosen, caches made
    started = clock(pair.device)
    with profiled(pair.device) as profiler:
        trace = Trace.from_events(speculative_decode(pair, ids, decode))
    wall_s = clock(pair.device) - started
    averages = profiler.key_averages()
    # the kernels' own time, as the table's "Self CUDA time total" counts it (CPU ops carry their kernels' too)
    gpu_s = sum(event.self_device_time_total for event in averages if event.device_type.name == "CUDA") / 1e6
    text = averages.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60)
    line = (f"one speculative run ({trace.num_tokens} tokens, {len(trace.rounds)} rounds) under the profiler: "
            f"{wall_s * 1e3:.0f} ms wall, {gpu_s * 1e3:.0f} ms of GPU kernels")
    return text, line


def time_replays(graph, repeats: int, synchronize: Callable[[], None]) -> tuple[float, float]:
    """(seconds a replay takes the host to launch, seconds a replay takes back to back, the device's work done):
    where the second is far above the first, the device's kernels set a call's pace, not the host."""
    synchronize()
    started = time.perf_counter()
    for _ in range(repeats):
        graph.replay()
    launched = time.perf_counter() - started
    synchronize()
    return launched / repeats, (time.perf_counter() - started) / repeats


def graph_replays(pair: ModelPair, repeats: int = 50) -> list[dict]:
    """Each graph the pool's free slot caches hold for the pair's networks (the target, the draft model, the head),
    replayed `repeats` times in a row (time_replays): what one call costs the host and the device, without the
    round's bookkeeping around it. The replays rewrite a free cache's throwaway slots, as its captures did. []
    without graphs (a CPU, ZeroGPU)."""
    networks = {"target": pair.target, "draft model": pair.draft, "head": pair.head.body if pair.head else None}
    synchronize = torch.cuda.synchronize if pair.device.type == "cuda" else (lambda: None)
    with torch.inference_mode():  # as runs replay them (a stand-in graph on a CPU writes inference tensors)
        return [entry for name, network in networks.items() if network is not None
                for entry in network_replays(name, network, repeats, synchronize)]


def network_replays(name: str, network: torch.nn.Module, repeats: int, synchronize: Callable[[], None]) -> list[dict]:
    """graph_replays for one network: the graphs of its first free cache (a second one holds the same calls)."""
    caches = POOL.free.get(network) or []
    graphs = sorted(caches[0].graphs.items(), key=lambda item: (item[0][0], str(item[0][1]))) if caches else []
    found = []
    for (width, variant), captured in graphs:
        launch_s, replay_s = time_replays(captured.graph, repeats, synchronize)
        found.append({"network": name, "width": width, "variant": str(variant), "launch_ms": launch_s * 1e3,
                      "replay_ms": replay_s * 1e3, "repeats": repeats})
    return found


def format_replays(replays: list[dict]) -> str:
    """graph_replays as a table: a call's launch on the host and its replay back to back, in ms."""
    lines = [f"{'graph':<34} {'width':>6} {'launch ms':>10} {'replay ms':>10}"]
    lines += [f"{(entry['network'] + ' ' + entry['variant'])[:34]:<34} {entry['width']:>6} {entry['launch_ms']:>10.3f} "
              f"{entry['replay_ms']:>10.3f}" for entry in replays]
    return "\n".join(lines)
