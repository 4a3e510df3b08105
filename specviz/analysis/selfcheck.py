"""`python -m specviz selfcheck`: one command checks a machine (a newly lent GPU above all), under a deadline.

Its phases run in order of what matters if time runs short (SelfCheck.work); each gets a share of the time
left by its weight and stops between two runs once its share is spent, saying so, keeping what it finished.
Everything goes to --out as it is made: machine.json, checks.json (exactness per precision; the target alone
against generate()), records.json (`bench --json` records, by the file name each would have in assets/bench/),
first-example.json.gz (the page's first example saved as a run), profile.txt, log.txt and table.txt, the
short table, printed last. On an offline GPU machine `python3 -m specviz.gpu run` starts it.
"""

from __future__ import annotations

import io
import json
import sys
import time
import traceback
from collections import Counter
from contextlib import redirect_stdout
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Callable

import torch
import transformers

from specviz.analysis.architectures import EXACT, architectures_line, check_architectures
from specviz.analysis.bench import BENCH_ENGINE, BenchConfig, Prompt, load_prompts, run_against_hf
from specviz.analysis.expectations import describe_machine
from specviz.analysis.host_time import HostConfig, format_host_profile, profile_rounds, round_line
from specviz.analysis.selfcheck_measures import (SelfCheckConfig, baseline_against_generate, bench_drafters,
                                                check_exactness, format_replays, graph_replays, profile_one_run,
                                                profile_pair)
from specviz.catalogue import DRAFTER_CATALOGUE
from specviz.models.convert import default_target_id
from specviz.models.loading import load_pair
from specviz.models.pairs import ModelPair
from specviz.models.precision import choose_device_and_dtype, precision_name
from specviz.models.presets import DEFAULT_PRESET, PairPreset, resolve_pair
from specviz.models.slot_calls import GRAPHS
from specviz.models.slots import slots_switched, slots_wanted

PAGE_MODULES = ("gradio", "plotly")  # not on the GPU machine: the run must never import them
# Each phase's weight in the time left; the default precision's exactness matters most (the page's).
WEIGHTS = {"exactness": 1.5, "exactness, other precision": 0.7, "bench": 3.5, "record": 0.15, "against generate": 0.5,
           "profile": 0.7, "architectures": 0.3, "slots off": 1.0, "bench, other precision": 0.6}
HOST_PROMPTS = 4  # prompts the host-time profile runs (two passes and a counted one each)
RECORDED_RUN = "first-example.json.gz"  # the page's first example, every default: a replay at this device's pace


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

    def finish(self, cut: bool) -> dict:
        entry = self.log[-1]
        entry["used_s"], entry["cut"] = round(time.monotonic() - entry.pop("started"), 1), cut
        return entry


def precisions_for(device: torch.device, asked: tuple[str, ...] | None) -> list[str]:
    """The device's default precision first (what a visitor gets), then the others it runs fast."""
    default = precision_name(choose_device_and_dtype(str(device))[1])
    chosen = asked or (("bfloat16", "float16", "float32") if device.type == "cuda" else ("bfloat16", "float32"))
    return sorted(chosen, key=lambda name: name != default)


def prompt_sets(preset: PairPreset, num_prompts: int | None) -> dict[str, list[Prompt]]:
    """The pair's examples and, where it has them, its held-out prompts."""
    files = {"examples": preset.prompts_file, "held-out": preset.prompts_file.with_name("prompts-heldout.json")}
    return {name: load_prompts(path)[:num_prompts] for name, path in files.items() if path.is_file()}


class Output:
    """--out: every file rewritten as its content grows, so a killed run still leaves what it made."""

    def __init__(self, folder: Path, print_line: Callable[[str], None]):
        self.folder, self.print_line = folder, print_line
        folder.mkdir(parents=True, exist_ok=True)
        self.lines: list[str] = []

    def say(self, line: str) -> None:
        self.print_line(line)
        self.note(line)

    def note(self, text: str) -> None:
        """Into the log only (a traceback): the printed tail stays short."""
        self.lines.append(text)
        self.write("log.txt", "\n".join(self.lines) + "\n")

    def write(self, name: str, content) -> None:
        text = content if isinstance(content, str) else json.dumps(content, indent=1, default=str)
        (self.folder / name).write_text(text)


class SelfCheck:
    """One run: its settings, what it has found so far, and the files it keeps up to date. `cli_main`, the
    command line's entry that records the first example, is handed down: analysis never imports the CLI."""

    def __init__(self, config: SelfCheckConfig, out: Output, cli_main: Callable[[list[str]], int] | None = None):
        self.config, self.out, self.started, self.cli_main = config, out, time.monotonic(), cli_main
        self.device, self.preset = choose_device_and_dtype(config.device)[0], resolve_pair(config.pair)
        self.precisions = precisions_for(self.device, config.precisions)
        own = self.preset.unnamed_drafter()
        self.drafters = list(config.drafters or [own] + [info.name for info in DRAFTER_CATALOGUE if info.name != own])
        self.sets = prompt_sets(self.preset, config.num_prompts)
        bench_on = "held-out" if "held-out" in self.sets else "examples"  # held-out: prompts no training phase saw
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
            # to the target alone; generate() runs the target's kernels at its own row counts, which in slots
            # (a call's rows always SLOTS) are not the lanes': it may part from both at a near-tie
            self.exact &= not any(parting["against"] == "target alone" for parting in result["partings"])
        self.out.say(exactness_row(result))
        return result["cut"]

    def bench(self, precision: str, deadline: float, drafters: list[str] | None = None, suffix: str = "") -> bool:
        """Every drafter's record (or `drafters`'), each kept as it is made, its name marked with `suffix`."""

        def keep(name: str, record: dict) -> None:
            self.records[name.replace(".json", f"{suffix}.json")] = record
            self.out.write("records.json", self.records)

        found = bench_drafters(self.pair_in(precision), self.bench_set, self.config, deadline,
                               self.drafters if drafters is None else drafters, keep=keep)
        return any(record["selfcheck"]["cut"] for record in found.values())

    def record(self, deadline: float) -> bool:
        """The page's first example with every default, saved by `generate --save`, so that a page with no GPU
        replays a GPU run at its real pace."""
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
        """The target alone against generate() in the first half of the time; in the second, the lanes against
        what a user of transformers runs (plain generate() and its assisted generation with the draft model),
        greedy, added to the pair's own drafter's record as `bench --against-hf` adds it."""
        pair = self.pair_in(self.precisions[0])
        result = baseline_against_generate(pair, self.bench_set[1], self.config,
                                           time.monotonic() + (deadline - time.monotonic()) / 2)
        self.checks["baseline_vs_generate"] = result
        self.out.write("checks.json", self.checks)
        self.out.say(generate_line(result))
        if pair.draft is None:
            self.out.say("against transformers' assisted generation: the pair has no draft model")
            return result["cut"]
        engine = replace(BENCH_ENGINE, max_new_tokens=self.config.max_new_tokens, drafter=self.drafters[0])
        bench = BenchConfig(engine, gammas=self.config.bench_gammas, temperatures=(0.0,), repeats=1)
        hf = [asdict(r) for r in run_against_hf(pair, self.bench_set[1], bench, progress=False, deadline=deadline)]
        self.checks["against_hf"] = hf
        self.out.write("checks.json", self.checks)
        own = next(iter(self.records), None)  # the default precision's own-drafter record, made first
        if own is not None:
            self.records[own]["against_hf"] = hf
            self.out.write("records.json", self.records)
        self.out.say(hf_line(hf))
        return result["cut"] or time.monotonic() > deadline

    def profile(self, deadline: float) -> bool:
        pair = self.pair_in(self.precisions[0])
        parts: list[str] = []  # profile.txt's sections, the file rewritten after each: a cut run keeps what it has

        def add_part(part: str) -> None:
            parts.append(part)
            self.out.write("profile.txt", "\n\n".join(parts) + "\n")

        text, self.profile_line = profile_pair(pair, self.config)
        add_part(text)
        self.out.say(self.profile_line)
        rounds_text, rounds_line = profile_one_run(pair, self.sets["examples"][0], self.config)
        add_part(f"{rounds_line}\n{rounds_text}")
        self.out.say(rounds_line)
        # a round's time outside the models' forwards (the host's) and its host reads: on a GPU what sets the pace
        host = profile_rounds(pair, self.bench_set[1][:HOST_PROMPTS],
                              HostConfig(drafter=self.drafters[0], max_new_tokens=self.config.max_new_tokens))
        self.checks["host_time"] = {**asdict(host), "host_s": host.host_s, "precision": pair.precision}
        self.out.write("checks.json", self.checks)
        add_part(format_host_profile(host, f"{pair.name}, {host.drafter}, γ {host.gamma}, greedy, on {pair.device} "
                                           f"in {pair.precision}, {HOST_PROMPTS} {self.bench_set[0]} prompts"))
        self.out.say(f"{round_line(host)}; {host.reads:.1f} host reads a round; c {host.c:.3f}")
        # each captured call alone, replayed back to back: is a call the host's launch or the device's kernels?
        replays = graph_replays(pair)
        if replays:
            self.checks["graph_replays"] = replays
            self.out.write("checks.json", self.checks)
            add_part(f"CUDA graphs replayed alone, 50 back to back\n{format_replays(replays)}")
        return time.monotonic() > deadline

    def architectures(self, deadline: float) -> bool:
        """Hub architectures as tiny random models, on this device in its default precision: the verdict each gets
        when it loads (exact, not guaranteed, refused) against the one expected, and greedy identity where exact."""
        dtype = choose_device_and_dtype(str(self.device), self.precisions[0])[1]
        results, cut = check_architectures(self.device, dtype, deadline)
        self.checks["architectures"] = results
        self.out.write("checks.json", self.checks)
        self.exact &= not any(result["verdict"] == EXACT and result["parted"] for result in results)
        self.out.say(architectures_line(results))
        return cut

    def slots_off(self, deadline: float) -> bool:
        """The pair's own drafter benched again with slots off, on the same prompts and machine: what slots
        cost or gain, side by side."""
        with slots_switched(False):  # the pair loaded anew: whether a target runs in slots is fixed at load
            return self.bench(self.precisions[0], deadline, self.drafters[:1], "--slots-off")

    def work(self) -> list[tuple[str, Callable[[float], bool], float]]:
        """(phase, its work given its deadline, its weight), in order of what matters: per precision, whether a
        verify is bitwise a step and greedy identity; the bench for every drafter in the default precision; the
        first example recorded as a run; the target alone against generate() (is the baseline fair?); where a
        forward's time goes; hub architectures as tiny models (analysis.architectures); in slots, the pair's own
        drafter benched with slots off; the other precisions' bench."""
        first, others = self.precisions[0], self.precisions[1:]
        phases = ([(f"exactness {p}", partial(self.exactness, p),
                    WEIGHTS["exactness" if p == first else "exactness, other precision"]) for p in self.precisions]
                  + [(f"bench {first}", partial(self.bench, first), WEIGHTS["bench"]),
                     ("record the first example", self.record, WEIGHTS["record"]),
                     (f"against generate {first}", self.against_generate, WEIGHTS["against generate"]),
                     (f"profile {first}", self.profile, WEIGHTS["profile"]),
                     (f"architectures {first}", self.architectures, WEIGHTS["architectures"])]
                  + ([(f"slots off, bench {first}", self.slots_off, WEIGHTS["slots off"])] if slots_wanted() else [])
                  + [(f"bench {p}", partial(self.bench, p), WEIGHTS["bench, other precision"]) for p in others])
        return [phase for phase in phases if not phase[0].startswith(self.config.skip or "\0")]

    def run_phase(self, name: str, work: Callable[[float], bool]) -> None:
        deadline = self.phases.start(name)
        try:
            cut = work(deadline)
        except Exception as error:  # noqa: BLE001 — one phase's failure is a finding; the rest still run
            self.out.say(f"{name}: FAILED: {type(error).__name__}: {error}")
            self.out.note(traceback.format_exc())
            cut = True
        entry = self.phases.finish(cut)
        self.out.say(f"{name}: {entry['used_s']} s of {entry['budget_s']} s{' (cut)' if cut else ''}")

    def write_table(self) -> None:
        """After every phase, so a run killed at its limit still leaves its table."""
        machine = self.machine
        machine["page_modules_imported"] = [name for name in PAGE_MODULES if name in sys.modules]
        # Which SDPA kernels the run allowed (loading turns cuDNN's off on CUDA); the profile names the one used.
        machine["sdpa_backends"] = {name: getattr(torch.backends.cuda, f"{name}_sdp_enabled")()
                                    for name in ("flash", "mem_efficient", "math", "cudnn")}
        machine["cuda_graphs"] = dict(GRAPHS)  # how many calls slots captured, and the first capture that failed
        machine["phases"] = self.phases.log
        self.out.write("machine.json", machine)
        cuda = f"CUDA {machine['cuda']}, " if machine.get("cuda") else ""
        header = (f"selfcheck: {self.preset.name} on {self.device} ({machine['gpu'] or machine['cpu']}, {cuda}torch "
                  f"{machine['torch']}, transformers {machine['transformers']}): "
                  f"{time.monotonic() - self.started:.0f} s of {self.config.minutes * 60:.0f}; setup {machine['setup_s']:.0f} s"
                  + graphs_said(machine["cuda_graphs"]))
        self.out.write("table.txt", format_table(header, self.checks, self.records, self.profile_line, self.phases.log))

    def run(self) -> bool:
        """Rebuild the target, then every phase in turn; True when no lane parted where lanes must be identical."""
        if self.preset.name == DEFAULT_PRESET:
            self.out.say(f"target: {default_target_id()} ({time.monotonic() - self.started:.0f} s)")
        self.machine = {**describe_machine(self.device), "setup_s": round(time.monotonic() - self.started, 1)}
        work = self.work()
        self.phases = Phases(self.config.minutes * 60 - (time.monotonic() - self.started), [w for _, _, w in work])
        for name, step, _ in work:
            self.run_phase(name, step)
            self.write_table()
        return self.exact


def graphs_said(graphs: dict) -> str:
    """The header's word on CUDA graphs (specviz.models.slot_calls): none on a CPU, else how many, or why not."""
    if graphs["failed"]:
        return f"; CUDA graphs FAILED, slots ran eagerly: {graphs['failed'][:200]}"
    return f"; {graphs['captured']} CUDA graphs captured" if graphs["captured"] else ""


def best_rows(records: dict[str, dict]) -> list[str]:
    """Per record and temperature, the cell with the best median speedup."""
    lines = [f"{'record':<52} {'T':>3} {'γ':>2} {'speedup (min–max)':>19} {'α̂':>5} {'c':>5} {'v':>5} "
             f"{'target tok/s':>12} {'parted':>6}"]
    for name, record in records.items():
        for temperature in sorted({r["temperature"] for r in record["results"]}):
            cells = [r for r in record["results"] if r["temperature"] == temperature]
            r = max(cells, key=lambda cell: cell["median_speedup"])
            parted = "—" if r["num_diverged"] is None else f"{r['num_diverged']}/{r['num_runs']}"
            spread = f"{r['median_speedup']:.2f}× ({r['min_speedup']:.2f}–{r['max_speedup']:.2f})"
            lines.append(f"{name.removesuffix('.json'):<52} {temperature:>3g} {r['gamma']:>2} {spread:>19} "
                         f"{r['acceptance_rate']:>5.2f} {r['c']:>5.3f} {r['verify_cost']:>5.2f} "
                         f"{r['median_baseline_tokens_per_s']:>12.1f} {parted:>6}")
    return lines


def exactness_row(result: dict) -> str:
    invariance = result["invariance"] or {}
    verify = (f"bitwise ({invariance.get('attention')})" if invariance.get("bitwise")
              else f"not bitwise (|Δ| ≤ {invariance.get('max_difference', float('nan')):.1g})")
    done = ", ".join(f"{name} {result['prompts_done'][name]}/{total}" for name, total in result["prompts_total"].items())
    row = (f"{result['precision']:<9} {verify:<28} {result['num_identical']:>4}/{result['num_checked']:<4} "
           f"{done}{'  (cut)' if result['cut'] else ''}")
    against = Counter(parting["against"] for parting in result["partings"])
    if against:  # which reference each parting was from: the target alone (a broken promise) or generate()
        row += "; parted: " + ", ".join(f"{count} from the {name}" if name == "target alone" else f"{count} from {name}"
                                        for name, count in sorted(against.items()))
    return row


def generate_line(result: dict | None) -> str:
    if not result or not result["ours_over_generate"]:
        return "target alone vs transformers' generate(): not measured"
    spread, plain = result["ours_over_generate"], result.get("ours_over_plain_generate") or {}
    line = (f"target alone vs transformers' generate() ({result['precision']}, greedy, whole calls): "
            f"{spread['median']:.2f}× ({spread['min']:.2f}–{spread['max']:.2f}) on the same target")
    if plain:
        line += f", {plain['median']:.2f}× ({plain['min']:.2f}–{plain['max']:.2f}) on the target as transformers loads it"
    return line + f" over {result['num_prompts']} prompts{' (cut)' if result['cut'] else ''}"


def hf_line(results: list[dict]) -> str:
    """Ours against transformers, greedy: the target alone and the speculative lane over plain generate(), and
    the lane over assisted generation at transformers' default schedule (against our best γ per prompt)."""
    if not results:
        return "against transformers' generate() and assisted generation: not measured"
    row = next((r for r in results if r["gamma"] is None), results[0])

    def band(key: str) -> str:
        return f"{row['median_' + key]:.2f}× ({row['min_' + key]:.2f}–{row['max_' + key]:.2f})"

    schedule = "its default schedule" if row["gamma"] is None else f"γ {row['gamma']}"
    return (f"against transformers (greedy, {row['num_runs']} prompts, whole calls): target alone "
            f"{band('alone_over_plain')} plain generate(); speculative {band('ours_over_plain')} plain generate() "
            f"and {band('ours_over_hf')} its assisted generation ({schedule})")


def format_table(header: str, checks: dict, records: dict[str, dict], profile_line: str, phases: list[dict]) -> str:
    """The short table: what a reader of the command's last lines needs, from the run's own checks and records."""
    lines = [header, "", f"{'precision':<9} {'verify vs steps':<28} {'identical':>9} prompts (examples, held-out)"]
    lines += [exactness_row(result) for result in checks["exactness"]] + [generate_line(checks["baseline_vs_generate"])]
    lines += [hf_line(checks["against_hf"])] if "against_hf" in checks else []
    lines += [architectures_line(checks["architectures"])] if "architectures" in checks else []
    lines += ["", "bench, best γ per record and temperature (1 repeat; records.json has every cell):", *best_rows(records)]
    lines += ["", f"profile: {profile_line or 'not run'}", "phases: " + "; ".join(
        f"{p['phase']} {p.get('used_s', '?')}/{p['budget_s']} s{' CUT' if p['cut'] else ''}" for p in phases)]
    return "\n".join(lines) + "\n"


def run_selfcheck(config: SelfCheckConfig, out_dir: Path, print_line: Callable[[str], None] = print,
                  cli_main: Callable[[list[str]], int] | None = None) -> bool:
    """The whole run, its table printed last; True when no lane parted where lanes must be identical."""
    transformers.utils.logging.disable_progress_bar()  # a GPU reply shows the output's tail: keep it for the table
    out = Output(out_dir, print_line)
    exact = SelfCheck(config, out, cli_main).run()
    table = out_dir / "table.txt"
    print_line(table.read_text() if table.is_file() else "selfcheck: no table was written")
    return exact
