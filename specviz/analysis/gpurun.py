"""The prepared GPU run's measuring side (`python -m specviz gpurun measure`), one command in one lease.

In order of what matters if time runs short: rebuild the default target from what travelled; for each
precision, whether a verify is bitwise a step (measured at load) and greedy identity against the target
alone and transformers' generate() on the example and held-out prompts, taken in turn; the bench for
every drafter at each temperature over a γ sweep in the device's default precision; the target alone
against transformers' own generate(), timed alike (is the baseline fair?); where a step, a verify and a
draft step spend their time (torch.profiler, CUDA activity on a GPU); the bench in the other precisions.
Each phase gets a share of the time left by its weight and stops between two runs once its share is
spent, saying so; what it finished is kept. Everything goes to --out as it is made: machine.json,
checks.json (exactness per precision; the target alone against generate()), records.json (`bench --json`
records, by the file name each would have in assets/bench/), first-example.json.gz (the page's first
example saved as a run, for assets/runs/), profile.txt, log.txt and table.txt, the short table, printed last.
"""

from __future__ import annotations

import io
import json
import statistics
import sys
import time
import traceback
from contextlib import redirect_stdout
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Callable, Iterator

import torch
import transformers
from torch.profiler import ProfilerActivity, profile

from specviz.analysis.bench import (BenchConfig, Prompt, encode_prompts, load_prompts, results_to_json, summarise,
                                    timed_runs)
from specviz.analysis.bench_record import describe_machine, record_name
from specviz.analysis.gpurun_table import exactness_row, format_table, generate_line
from specviz.analysis.profile import ProfileConfig, format_profile, profile_target
from specviz.analysis.selfcheck import SelfCheckConfig, greedy_partings
from specviz.analysis.trace import Trace
from specviz.catalogue import DRAFTER_CATALOGUE
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import autoregressive_decode, clock, speculative_decode
from specviz.decoding.reference import time_generate
from specviz.models.convert import default_target_id
from specviz.models.invariance import plain_copy
from specviz.models.loading import load_pair
from specviz.models.pairs import ModelPair
from specviz.models.precision import choose_device_and_dtype, precision_name
from specviz.models.presets import DEFAULT_PRESET, PairPreset, resolve_pair

PAGE_MODULES = ("gradio", "plotly")  # not on the GPU machine: the run must never import them
# Each phase's share of the time left: exactness per precision, then the default precision's bench (every
# drafter, both temperatures), the baseline against generate(), the profile, the bench per other precision.
# The H200 run (2026-11-26) showed each precision's exactness phase cut at its share: the default precision's
# matters most (the page's), the others get less.
WEIGHTS = {"exactness": 1.5, "exactness, other precision": 0.7, "bench": 3.5, "record": 0.15, "against generate": 0.5, "profile": 0.7,
           "bench, other precision": 0.6}
RECORDED_RUN = "first-example.json.gz"  # the page's first example, every default: a replay at this device's pace


@dataclass(frozen=True)
class GpuRunConfig:
    """What the run measures; its minutes cut whatever the sizes ask for."""

    pair: str | None = None  # a preset; None: the default pair
    device: str = "cuda"
    minutes: float = 7.0  # the whole run, the target's rebuild included
    precisions: tuple[str, ...] | None = None  # None: CUDA bfloat16, float16, float32; a CPU bfloat16, float32
    gammas: tuple[int, ...] = (1, 3, 6)  # greedy identity is checked at each
    bench_gammas: tuple[int, ...] = (3, 5)  # on an H200, 3 and 5 (γ = 5 best); more cells reach fewer prompts
    # tree budgets (0 = a chain): on a GPU a verify of a few dozen rows should cost about one step, so
    # the tree that pays there is measured beside the chain (issue 32: the default per machine kind)
    bench_trees: tuple[int, ...] = (0, 16)
    temperatures: tuple[float, ...] = (0.0, 0.7)
    max_new_tokens: int = 64
    num_prompts: int | None = None  # per prompt set; None: all of them, as far as the time goes
    profile_tokens: tuple[int, ...] = (1, 3, 4, 5, 7)  # a step, then verifies of γ + 1
    profile_repeats: int = 12
    drafters: tuple[str, ...] | None = None  # None: every drafter the pair runs, its own first
    skip: tuple[str, ...] = ()  # phases left out, by the start of their name ("against generate")


class Phases:
    """The run's clock: each phase's deadline is its weight's share of the time left."""

    def __init__(self, total_s: float, weights: list[float]):
        self.end = time.monotonic() + total_s
        self.weights = list(weights)  # the phases still to come
        self.log: list[dict] = []

    def start(self, name: str) -> float:
        """The deadline of the next phase (monotonic seconds)."""
        weight = self.weights.pop(0)
        share = max(0.0, self.end - time.monotonic()) * weight / (weight + sum(self.weights))
        self.log.append({"phase": name, "budget_s": round(share, 1), "started": time.monotonic(), "cut": False})
        return time.monotonic() + share

    def finish(self, cut: bool) -> None:
        entry = self.log[-1]
        entry["used_s"], entry["cut"] = round(time.monotonic() - entry.pop("started"), 1), cut


def precisions_for(device: torch.device, asked: tuple[str, ...] | None) -> list[str]:
    """The device's default precision first (what a visitor gets), then the others it runs fast."""
    default = precision_name(choose_device_and_dtype(str(device))[1])
    chosen = asked or (("bfloat16", "float16", "float32") if device.type == "cuda" else ("bfloat16", "float32"))
    return sorted(chosen, key=lambda name: name != default)


def prompt_sets(preset: PairPreset, num_prompts: int | None) -> dict[str, list[Prompt]]:
    """The pair's examples and, where it has them, its held-out prompts."""
    files = {"examples": preset.prompts_file, "held-out": preset.prompts_file.with_name("prompts-heldout.json")}
    return {name: load_prompts(path)[:num_prompts] for name, path in files.items() if path.is_file()}


def taken_in_turn(sets: dict[str, list[Prompt]]) -> Iterator[tuple[str, int, Prompt]]:
    """(set, index, prompt), one from each set in turn, so a cut leaves every set checked a little."""
    for index in range(max(map(len, sets.values()))):
        for name, prompts in sets.items():
            if index < len(prompts):
                yield name, index, prompts[index]


def check_exactness(pair: ModelPair, sets: dict[str, list[Prompt]], config: GpuRunConfig, deadline: float) -> dict:
    """The verify's measured invariance and greedy identity, prompt by prompt until the deadline."""
    check = SelfCheckConfig(gammas=config.gammas, max_new_tokens=config.max_new_tokens)
    done = dict.fromkeys(sets, 0)
    partings, num_checked, cut = [], 0, False
    for name, index, prompt in taken_in_turn(sets):
        if time.monotonic() > deadline:
            cut = True
            break
        found, checked = greedy_partings(pair, encode_prompts(pair, [prompt], None), check)
        partings += [{**asdict(parting), "prompt_set": name, "prompt_index": index} for parting in found]
        num_checked, done[name] = num_checked + checked, done[name] + 1
    invariance = asdict(pair.invariance) if pair.invariance else None
    return {"precision": pair.precision, "invariance": invariance, "num_checked": num_checked,
            "num_identical": num_checked - len(partings), "partings": partings, "prompts_done": done,
            "prompts_total": {name: len(prompts) for name, prompts in sets.items()}, "cut": cut}


def bench_until(pair: ModelPair, prompts: list[Prompt], config: BenchConfig, deadline: float) -> tuple[list, int, bool]:
    """The bench's timed runs until the deadline, each temperature with its share: (results, prompts reached, cut)."""
    results, reached, cut = [], 0, False
    for number, temperature in enumerate(config.temperatures):
        share = (deadline - time.monotonic()) / (len(config.temperatures) - number)
        stop_at = time.monotonic() + share
        one = replace(config, temperatures=(temperature,))
        runs: dict[tuple[int, int], list] = {}  # (γ, tree budget) → (baseline, speculative) pairs
        num_baselines = 0  # one per prompt (a single repeat)
        for gamma, tree, _, baseline, speculative in timed_runs(pair, encode_prompts(pair, prompts, config.chat), one):
            if speculative is None:
                num_baselines += 1
                reached = max(reached, num_baselines)
            else:
                runs.setdefault((gamma, tree), []).append((baseline, speculative))
            if time.monotonic() > stop_at:
                cut = True
                break
        results += [summarise(gamma, temperature, pairs, tree) for (gamma, tree), pairs in runs.items()]
    return results, reached, cut


def bench_drafters(pair: ModelPair, prompts: tuple[str, list[Prompt]], config: GpuRunConfig, deadline: float,
                   drafters: list[str], keep: Callable[[str, dict], None] = lambda name, record: None) -> dict[str, dict]:
    """One `bench --json` record per drafter the pair can run, each with its share of the time; `keep`
    hears each as it is made (a later drafter's failure must not lose it)."""
    set_name, chosen = prompts
    records = {}
    runnable = [info for name in drafters for info in DRAFTER_CATALOGUE if info.name == name and not pair.lacks_for(info)]
    for number, info in enumerate(runnable):  # the pair's own drafter first
        budget_s = (deadline - time.monotonic()) / (len(runnable) - number)
        stop_at = time.monotonic() + budget_s
        bench = BenchConfig(gammas=config.bench_gammas, temperatures=config.temperatures, repeats=1,
                            max_new_tokens=config.max_new_tokens, drafter=info.name, trees=config.bench_trees)
        results, reached, cut = bench_until(pair, chosen, bench, stop_at)
        if not results:
            continue
        measured = replace(bench, temperatures=tuple(sorted({r.temperature for r in results})))
        record = results_to_json(pair, chosen[:reached], measured, results)
        record["prompts"] = {**record["prompts"], "set": set_name, "first": reached, "of": len(chosen)}
        record["gpurun"] = {"cut": cut, "budget_s": round(budget_s, 1)}
        name = record_name(record)
        name = name if info.name == drafters[0] else name.replace(".json", f"--{info.name}.json")
        records[name] = record
        keep(name, record)
    return records


def baseline_against_generate(pair: ModelPair, prompts: list[Prompt], config: GpuRunConfig, deadline: float) -> dict:
    """Is the baseline fair (not slowed)? The target alone in the engine against transformers' own
    generate(), greedy, each a whole call timed alike (after the GPU's queued work): ours over theirs in
    tokens per second, prompt by prompt until the deadline. Twice: against generate() on the same target
    (the engine's loop against transformers', the same batch-invariant forward), and against generate() on
    the target as transformers loads it (SDPA, plain layers): what the exactness itself costs the baseline."""
    decode, cut = DecodeConfig(max_new_tokens=config.max_new_tokens), False
    plain = replace(pair, target=plain_copy(pair.target), invariance=None)
    ratios: dict[str, list[float]] = {"ours_over_generate": [], "ours_over_plain_generate": []}
    for ids in encode_prompts(pair, prompts, None):
        if time.monotonic() > deadline:
            cut = True
            break
        started = clock(pair.device)
        ours = Trace.from_events(autoregressive_decode(pair, ids, decode))
        ours_rate = ours.num_tokens / (clock(pair.device) - started)
        for name, against in (("ours_over_generate", pair), ("ours_over_plain_generate", plain)):
            theirs_s, theirs_n = time_generate(against, ids, decode, assisted=False)
            ratios[name].append(ours_rate / (theirs_n / theirs_s))
    spread = {name: {"median": statistics.median(r), "min": min(r), "max": max(r)} if r else {}
              for name, r in ratios.items()}
    return {"precision": pair.precision, **spread, "num_prompts": len(ratios["ours_over_generate"]), "cut": cut}


def profile_pair(pair: ModelPair, config: GpuRunConfig) -> tuple[str, str]:
    """The target's step against verifies, then one step of the draft model (full head, as loaded):
    the tables, and one line for the run's table."""
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


def profile_rounds(pair: ModelPair, prompt: Prompt, config: GpuRunConfig) -> tuple[str, str]:
    """One speculative run of the page's defaults under torch's profiler, every op (CPU and GPU): where
    a round spends what the forward profile does not see (Python, syncs, sampling, the drafter's work).
    The table (top ops by their own CPU time), and one line: the run's wall time against its GPU time."""
    ids = encode_prompts(pair, [prompt], None)[0]
    decode = DecodeConfig(max_new_tokens=config.max_new_tokens)
    Trace.from_events(speculative_decode(pair, ids, decode))  # warm-up: kernels chosen, caches made
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if pair.device.type == "cuda" else [])
    started = clock(pair.device)
    with profile(activities=activities) as profiler:
        trace = Trace.from_events(speculative_decode(pair, ids, decode))
    wall_s = clock(pair.device) - started
    averages = profiler.key_averages()
    # the kernels' own time, as the table's "Self CUDA time total" counts it (CPU ops carry their kernels' too)
    gpu_s = sum(event.self_device_time_total for event in averages if event.device_type.name == "CUDA") / 1e6
    sort_by = "self_cpu_time_total"
    text = averages.table(sort_by=sort_by, row_limit=30, max_name_column_width=60)
    line = (f"one speculative run ({trace.num_tokens} tokens, {len(trace.rounds)} rounds) under the profiler: "
            f"{wall_s * 1e3:.0f} ms wall, {gpu_s * 1e3:.0f} ms of GPU kernels")
    return text, line


class Output:
    """--out: every file rewritten as its content grows, so a killed run still leaves what it made."""

    def __init__(self, folder: Path, print_line: Callable[[str], None]):
        self.folder, self.print_line = folder, print_line
        folder.mkdir(parents=True, exist_ok=True)
        self.lines: list[str] = []

    def say(self, line: str) -> None:
        self.print_line(line)
        self.lines.append(line)
        self.write("log.txt", "\n".join(self.lines) + "\n")

    def note(self, text: str) -> None:
        """Into the log only (a traceback): the printed tail stays short."""
        self.lines.append(text)
        self.write("log.txt", "\n".join(self.lines) + "\n")

    def write(self, name: str, content) -> None:
        text = content if isinstance(content, str) else json.dumps(content, indent=1, default=str)
        (self.folder / name).write_text(text)


class GpuRun:
    """One run: its settings, what it has found so far, and the files it keeps up to date. `cli_main` is the
    command line's entry (`generate --save` records the first example as the page would), handed down by
    the command that started the run: analysis never imports the command line above it."""

    def __init__(self, config: GpuRunConfig, out: Output, cli_main: Callable[[list[str]], int] | None = None):
        self.config, self.out, self.started, self.cli_main = config, out, time.monotonic(), cli_main
        self.device, self.preset = torch.device(config.device), resolve_pair(config.pair)
        self.precisions = precisions_for(self.device, config.precisions)
        own = self.preset.unnamed_drafter()
        self.drafters = list(config.drafters or [own] + [info.name for info in DRAFTER_CATALOGUE if info.name != own])
        self.sets = prompt_sets(self.preset, config.num_prompts)
        bench_on = "held-out" if "held-out" in self.sets else "examples"  # the figures are held-out ones
        self.bench_set = (bench_on, self.sets[bench_on])
        self.checks: dict = {"exactness": [], "baseline_vs_generate": None}
        self.records: dict[str, dict] = {}
        self.profile_line, self.exact, self.machine, self.phases = "", True, {}, Phases(0, [])

    def pair_in(self, precision: str) -> ModelPair:
        return load_pair(self.config.pair, device=str(self.device), precision=precision)

    def exactness(self, precision: str, deadline: float) -> bool:
        result = check_exactness(self.pair_in(precision), self.sets, self.config, deadline)
        self.checks["exactness"].append(result)
        self.out.write("checks.json", self.checks)
        if (result["invariance"] or {}).get("bitwise") or precision == "float32":  # lanes must be identical
            self.exact &= not result["partings"]
        self.out.say(exactness_row(result))
        return result["cut"]

    def bench(self, precision: str, deadline: float) -> bool:
        found = bench_drafters(self.pair_in(precision), self.bench_set, self.config, deadline, self.drafters,
                               keep=self.keep_record)
        return any(record["gpurun"]["cut"] for record in found.values())

    def keep_record(self, name: str, record: dict) -> None:
        self.records[name] = record
        self.out.write("records.json", self.records)

    def record(self, deadline: float) -> bool:
        """The page's first example with every default, saved as `generate --save` saves it (the machine in
        its settings), so a page with no GPU replays a GPU run at its real pace."""
        if self.cli_main is None:
            self.out.say("record the first example: no command line was given to this run")
            return False
        example = load_prompts(self.preset.prompts_file)[0]
        argv = ["generate", "--pair", self.preset.name, "--prompt", example.text,
                "--chat" if example.chat is not False else "--no-chat", "--device", str(self.device),
                "--dtype", self.precisions[0], "--threads", "0", "--save", str(self.out.folder / RECORDED_RUN), "--json"]
        printed = io.StringIO()
        with redirect_stdout(printed):  # the report, of which the log keeps the speedup
            try:
                code = self.cli_main(argv)
            except SystemExit as exit_:  # argparse's way out must not end the whole run
                code = exit_.code
        report = json.loads(printed.getvalue()) if code == 0 else {}
        self.out.say(f"recorded the first example ({self.precisions[0]}): {RECORDED_RUN}, exit {code}, "
                     f"speedup {report.get('speedup')}, identical {report.get('identical_outputs')}")
        return time.monotonic() > deadline

    def against_generate(self, deadline: float) -> bool:
        result = baseline_against_generate(self.pair_in(self.precisions[0]), self.bench_set[1], self.config, deadline)
        self.checks["baseline_vs_generate"] = result
        self.out.write("checks.json", self.checks)
        self.out.say(generate_line(result))
        return result["cut"]

    def profile(self, deadline: float) -> bool:
        pair = self.pair_in(self.precisions[0])
        text, self.profile_line = profile_pair(pair, self.config)
        self.out.write("profile.txt", text + "\n")
        self.out.say(self.profile_line)
        rounds_text, rounds_line = profile_rounds(pair, self.sets["examples"][0], self.config)
        self.out.write("profile.txt", f"{text}\n\n{rounds_line}\n{rounds_text}\n")
        self.out.say(rounds_line)
        return time.monotonic() > deadline

    def work(self) -> list[tuple[str, Callable[[float], bool], float]]:
        """(phase, its work given its deadline, its weight), in order of what matters."""
        first, others = self.precisions[0], self.precisions[1:]
        return [phase for phase in self.phases_in_order(first, others) if not phase[0].startswith(self.config.skip or "\0")]

    def phases_in_order(self, first: str, others: list[str]) -> list[tuple[str, Callable[[float], bool], float]]:
        return ([(f"exactness {p}", partial(self.exactness, p),
                  WEIGHTS["exactness" if p == first else "exactness, other precision"]) for p in self.precisions]
                + [(f"bench {first}", partial(self.bench, first), WEIGHTS["bench"]),
                   ("record the first example", self.record, WEIGHTS["record"]),
                   (f"against generate {first}", self.against_generate, WEIGHTS["against generate"]),
                   (f"profile {first}", self.profile, WEIGHTS["profile"])]
                + [(f"bench {p}", partial(self.bench, p), WEIGHTS["bench, other precision"]) for p in others])

    def run_phase(self, name: str, work: Callable[[float], bool]) -> None:
        deadline = self.phases.start(name)
        try:
            cut = work(deadline)
        except Exception as error:  # noqa: BLE001 — one phase's failure is a finding; the rest still run
            self.out.say(f"{name}: FAILED: {type(error).__name__}: {error}")
            self.out.note(traceback.format_exc())
            cut = True
        self.phases.finish(cut)
        entry = self.phases.log[-1]
        self.out.say(f"{name}: {entry['used_s']} s of {entry['budget_s']} s{' (cut)' if cut else ''}")

    def write_table(self) -> None:
        """After every phase, so a run killed at its limit still leaves its table."""
        machine = self.machine
        machine["page_modules_imported"] = [name for name in PAGE_MODULES if name in sys.modules]
        machine["phases"] = self.phases.log
        self.out.write("machine.json", machine)
        cuda = f"CUDA {machine['cuda']}, " if machine.get("cuda") else ""
        header = (f"gpurun: {self.preset.name} on {self.device} ({machine['gpu'] or machine['cpu']}, {cuda}torch "
                  f"{machine['torch']}, transformers {machine['transformers']}): "
                  f"{time.monotonic() - self.started:.0f} s of {self.config.minutes * 60:.0f}; setup {machine['setup_s']:.0f} s")
        self.out.write("table.txt", format_table(header, self.checks, self.records, self.profile_line, self.phases.log))

    def run(self) -> bool:
        """Rebuild the target, then every phase in turn; True when no lane parted where lanes must be
        identical (a bitwise verify, or float32)."""
        if self.preset.name == DEFAULT_PRESET:
            self.out.say(f"target: {default_target_id()} ({time.monotonic() - self.started:.0f} s)")
        self.machine = {**describe_machine(self.device), "setup_s": round(time.monotonic() - self.started, 1)}
        work = self.work()
        self.phases = Phases(self.config.minutes * 60 - (time.monotonic() - self.started), [w for _, _, w in work])
        for name, step, _ in work:
            self.run_phase(name, step)
            self.write_table()
        return self.exact


def run_gpurun(config: GpuRunConfig, out_dir: Path, print_line: Callable[[str], None] = print,
               cli_main: Callable[[list[str]], int] | None = None) -> bool:
    """The whole run (see the module's note); True when no lane parted where lanes must be identical."""
    transformers.utils.logging.disable_progress_bar()  # the reply shows the output's tail: keep it for the table
    return GpuRun(config, Output(out_dir, print_line), cli_main).run()
