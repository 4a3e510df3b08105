"""The bench's own records: where, when and how each was measured, and what speed to expect on this machine.

`bench --json` writes a record (one per machine kind, precision and prompt set) with its metadata: the machine
(its kind, CPU, native bf16, the host's limits, threads and versions), the prompt set, the batch-invariance
measured at load, the date and the command line. The records kept in assets/bench/ are the only source of the
speed figures the README's table and the page's "what to expect here" give (a test holds the README's table to
them). A machine is matched by its kind (a CPU with native bfloat16, one with AVX2 only, a CUDA GPU); where no
record matches, the answer says so instead of lending another machine's figures.
`python -m specviz.analysis.expectations` prints the table's rows and what to expect here.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shlex
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import torch
import transformers

from specviz.models import fixed_rows, gguf_rows, slots
from specviz.models.convert import serves_hub_copy
from specviz.models.int8 import cpu_supports
from specviz.models.invariance import Invariance
from specviz.models.precision import (cpu_has_amx, cpu_has_native_bf16, cuda_has_native_bf16, default_precision,
                                      device_default)
from specviz.models.presets import ASSETS_DIR, DEFAULT_PRESET, preset_name
from specviz.models.slots import SLOTS_LAYOUT
from specviz.analysis.payoff import Measurement, Payoff, Spread, listing, repeat_spread
from specviz.catalogue import drafter_info

# The prompt files a record can name, by the words the README and the page use for them.
PROMPT_SETS = {"prompts.json": "examples", "prompts-heldout.json": "held-out", "prompts-copy-heavy.json": "copy-heavy",
               "prompts-varied.json": "varied", "prompts-long.json": "long"}
# The host's settings that change what a bench measures; a record names those that were set.
RECORDED_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", slots.SWITCH_ENV,
                fixed_rows.SWITCH_ENV, gguf_rows.SWITCH_ENV, "SPECVIZ_PRECISION", "OMP_NUM_THREADS")


def machine_kind(device: torch.device | str = "cpu") -> str:
    """One of KIND_WORDS: what decides a machine's speed here. On a CPU it follows torch's own view of
    the host, limits included (ATEN_CPU_CAPABILITY=avx2 on an AVX-512 CPU counts as AVX2: torch obeys it)."""
    device = torch.device(device)
    if device.type == "cuda":
        return "cuda"
    if device.type != "cpu":
        return "other"
    if cpu_has_native_bf16():
        return "cpu-amx" if cpu_has_amx() else "cpu-native-bf16"
    capability = torch.backends.cpu.get_cpu_capability().upper()
    if capability.startswith("AVX512"):
        return "cpu-avx512"
    return "cpu-avx2" if capability.startswith("AVX2") else "cpu-other"


def cpu_model() -> str:
    """The CPU's name as the OS reports it ("AMD EPYC", "Intel(R) Xeon(R) …"), or the platform's words."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def reader_name(name: str) -> str:
    """A processor's name as a reader says it: "Intel Xeon", not "Intel(R) Xeon(R) Processor"."""
    return re.sub(r"\s*\((R|TM)\)|\s+(Processor|CPU)$", "", name, flags=re.IGNORECASE)


def describe_machine(device: torch.device | str = "cpu") -> dict:
    """What a reader of a record needs to know which machine it came from (the bench's JSON carries it)."""
    device = torch.device(device)
    on_cuda = device.type == "cuda"
    return {
        "kind": machine_kind(device),
        "cpu": cpu_model(),
        "num_cpus": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(device) if on_cuda else None,
        "cuda": torch.version.cuda if on_cuda else None,  # the toolkit torch was built with
        "gpu_capability": ".".join(map(str, torch.cuda.get_device_capability(device))) if on_cuda else None,
        "float32_matmul": torch.get_float32_matmul_precision() if on_cuda else None,  # "highest": no TF32
        "native_bf16": cuda_has_native_bf16() if on_cuda else cpu_has_native_bf16(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # torch's kernels, after any host limit
        "amx": cpu_supports("_is_amx_tile_supported"),
        "avx512_bf16": cpu_supports("_is_avx512_bf16_supported"),
        "env": {name: os.environ[name] for name in RECORDED_ENV if name in os.environ},
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def device_label(device: torch.device | str = "cpu") -> str:
    """The machine in a few words, for a saved run ("NVIDIA H200, CUDA 13.0, torch 2.11.0"): a replay says
    where its pace was measured."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda}, torch {torch.__version__}"
    threads = torch.get_num_threads()
    return (f"{reader_name(cpu_model())} ({machine_kind(device)}, {threads} thread{'' if threads == 1 else 's'}), "
            f"torch {torch.__version__}")


def loaded_settings(pair) -> dict:
    """What loaded and where, not what was asked: a run's settings beside the request's (the page and
    `generate --save` alike), so a replay says where and how its pace was measured."""
    settings = {"precision": pair.precision, "device": str(pair.device),
                "recorded_on": device_label(pair.device), "int8_drafters": pair.int8_drafters}
    if serves_hub_copy(getattr(pair.target, "name_or_path", "")):  # not the GGUF the drafters learned from
        settings["target_hub_copy"] = True
    if pair.invariance is not None:  # which exactness this machine gives, measured when the target loaded
        settings["bitwise_verify"] = pair.invariance.exact
        settings["exactness"] = pair.invariance.summary()
    return settings


def invocation(argv: list[str] | None = None) -> str:
    """The command line that made this process, as one would type it again: the recorded host settings
    first, and `python -m specviz …` rather than the machine's path to it."""
    argv = list(sys.argv if argv is None else argv) or ["python"]
    program = Path(argv[0])
    head = ["python", "-m", "specviz"] if program.name == "__main__.py" and program.parent.name == "specviz" else [program.name]
    settings = [f"{name}={os.environ[name]}" for name in RECORDED_ENV if name in os.environ]
    return shlex.join(settings + head + argv[1:])


def prompt_set_of(prompt_texts: list[str]) -> dict:
    """Which of the shipped prompt files these prompts are ({"file", "set"}), or a custom set."""
    for path in sorted(ASSETS_DIR.rglob("prompts*.json")):
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        texts = [entry if isinstance(entry, str) else entry.get("prompt") for entry in entries if isinstance(entry, (str, dict))]
        if texts == prompt_texts:
            name = path.relative_to(ASSETS_DIR).as_posix()
            return {"file": f"assets/{name}", "set": PROMPT_SETS.get(name, name.removesuffix(".json"))}
    return {"file": None, "set": "custom"}


def record_metadata(device: torch.device | str, prompt_texts: list[str], invariance: Invariance | None = None) -> dict:
    """The part of a bench record that says where, when and how it was measured."""
    return {
        "prompts": prompt_set_of(prompt_texts),
        "machine": describe_machine(device),
        "batch_invariant": None if invariance is None else {"bitwise": invariance.bitwise, "attention": invariance.attention},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": invocation(),
    }


def gpu_slug(name: str) -> str:
    """A GPU's name for a file name: "NVIDIA H200" → "h200", "NVIDIA H100 80GB HBM3" → "h100-80gb-hbm3"."""
    words = re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-")
    return words or "gpu"


def record_name(report: dict) -> str:
    """The file name a record is kept under in assets/bench/: machine kind (with the GPU's name on a GPU),
    precision, prompt set."""
    machine, prompt_set = report["machine"], report.get("prompts", {}).get("set", "custom")
    kind = f"{machine['kind']}-{gpu_slug(machine['gpu'])}" if machine.get("gpu") else machine["kind"]
    return f"{kind}--{report['precision']}--{prompt_set}.json"


BENCH_DIR = ASSETS_DIR / "bench"
# What a machine of each kind is, in a newcomer's words, and the order the README's table lists them in.
KIND_WORDS = {
    "cpu-amx": "CPU with AMX",  # an Intel Xeon's bf16 tiles, which oneDNN uses unless the host holds it back
    "cpu-native-bf16": "CPU with native bf16 but no AMX",  # AVX512-BF16, and no host limit keeping torch from it
    "cpu-avx512": "CPU with AVX-512 but no native bf16",
    "cpu-avx2": "CPU with AVX2 only",
    "cpu-other": "CPU without AVX2",
    "cuda": "CUDA GPU",
    "other": "accelerator specviz has no record for",
}
PROMPT_SET_WORDS = {"examples": "the example prompts", "held-out": "held-out prompts", "varied": "varied prompts",
                    "long": "long prompts"}
LONG_SET = "long"  # its records speak for runs of a long prompt alone, and only they do
LONG_PROMPT = 256  # a run's prompt of this many tokens or more is long: both lanes read it first, verifies attend over it
# The order of the README's table and of the page's sentence.
KIND_ORDER = list(KIND_WORDS)
PRECISION_ORDER = ["bfloat16", "float16", "float32"]
PROMPT_SET_ORDER = {"examples": 0, "held-out": 1}


@dataclass(frozen=True)
class Cell:
    """One (γ, T) cell of a record: median speedup over the target alone with its spread."""

    gamma: int
    temperature: float
    median: float
    low: float
    high: float
    acceptance_rate: float
    verify_cost: float
    baseline_tokens_per_s: float
    num_runs: int
    num_diverged: int | None  # greedy runs whose tokens parted from the target alone's; None when sampled
    tree: int = 0  # the draft tree's budget (0: a chain of γ)
    cost_ratio: float | None = None  # c, a draft step over a target step (None in records made before it was kept)
    speedups: tuple[float, ...] = ()  # each run's, in the bench's order (BenchResult.speedups); () in older records

    def speedup_text(self) -> str:
        return f"{self.median:.2f}× ({self.low:.2f}–{self.high:.2f})"


@dataclass(frozen=True)
class AgainstPlain:
    """A record's greedy comparison with plain transformers at one γ, whole calls timed end to end: medians over
    its runs and, for specviz's two lanes, the range over them (None in a record that kept no range)."""

    gamma: int
    alone: float  # our target alone / plain generate()
    ours: float  # our speculative lane / plain generate()
    assisted: float  # transformers' assisted generation with the same draft model / plain generate()
    alone_range: tuple[float, float] | None = None
    ours_range: tuple[float, float] | None = None

    @staticmethod
    def range_text(bounds: tuple[float, float] | None) -> str:
        return f" ({bounds[0]:.2f}–{bounds[1]:.2f})" if bounds else ""


@dataclass(frozen=True)
class BenchRecord:
    """One kept `bench --json` output."""

    file: str  # its name in assets/bench/
    pair: str  # the preset's current name
    drafter: str
    kind: str  # machine_kind of the host it ran on
    machine: str  # the CPU's (or GPU's) name, with any ISA limit the host set ("AMD EPYC limited to AVX2")
    threads: int
    precision: str
    prompt_set: str  # "examples", "held-out", …
    num_prompts: int
    repeats: int
    date: str
    command: str
    cells: tuple[Cell, ...]
    prompts_of: int | None = None  # the set's size where the run was cut before its end (a GPU lease's minutes)
    attention: str | None = None  # the target's attention when measured (specviz.models.slots on CUDA since)
    # greedy, end to end against transformers on the target loaded plainly (`bench --against-hf`), where measured
    against_plain: AgainstPlain | None = None
    against_precision: str | None = None  # transformers' side's precision there (`bench --hf-dtype`), where not ours
    prompt_tokens: tuple[int, int] | None = None  # the prompts' shortest and longest, as read (None before it was kept)

    @property
    def before_slots(self) -> bool:
        """A GPU record from before the target ran in slots on CUDA: the forward a GPU runs now was not measured."""
        return self.kind == "cuda" and self.attention != SLOTS_LAYOUT

    def chosen_cell(self, temperature: float) -> Cell | None:
        """The cell the one rule picks at this temperature (record_payoff): the highest median, or the cheapest
        setup tied with it, so every figure quoted from a record is the setup the page recommends."""
        cells = [cell for cell in self.cells if cell.temperature == temperature]
        if not cells:
            return None
        chosen = record_payoff(self, temperature).chosen
        return next(cell for cell in cells if (cell.gamma, cell.tree) == (chosen.gamma, chosen.tree))


def read_record(path: Path) -> BenchRecord:
    """A record as the bench wrote it; a file that is not one raises ValueError naming it."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        machine = report["machine"]
        cells = tuple(
            Cell(r["gamma"], float(r["temperature"]), r["median_speedup"], r["min_speedup"], r["max_speedup"],
                 r["acceptance_rate"], r["verify_cost"], r["median_baseline_tokens_per_s"], r["num_runs"],
                 r.get("num_diverged"), r.get("tree", 0), r.get("c"), tuple(r.get("speedups", ())))
            for r in report["results"]
        )
        return BenchRecord(
            file=path.name,
            pair=preset_name(report["pair"]),
            drafter=report["config"]["drafter"],
            kind=machine["kind"],
            machine=machine_words(machine),
            threads=machine["threads"],
            precision=report["precision"],
            prompt_set=report["prompts"]["set"],
            num_prompts=report["num_prompts"],
            repeats=report["config"]["repeats"],
            date=report["date"][:10],
            command=report["command"],
            cells=cells,
            prompts_of=report["prompts"].get("of"),
            attention=(report.get("batch_invariant") or {}).get("attention"),
            against_plain=against_plain_of(report),
            against_precision=other_precision(report.get("against_hf_precision"), report["precision"]),
            prompt_tokens=token_range_of(report),
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path.name} is not a bench record: {type(error).__name__}: {error}") from error


def token_range_of(report: dict) -> tuple[int, int] | None:
    tokens = report.get("prompt_tokens")
    return (tokens["min"], tokens["max"]) if tokens else None


def other_precision(theirs: str | None, ours: str) -> str | None:
    """transformers' side's precision in a record, where it is not ours (else None: nothing to say)."""
    return theirs if theirs != ours else None


def against_plain_of(report: dict) -> AgainstPlain | None:
    """A record's greedy comparison with plain transformers at the bench's first γ (its `against_hf` rows that
    timed plain generate(): the ones made since those rows carry it), else None."""
    rows = [row for row in report.get("against_hf") or () if row.get("temperature") == 0 and row.get("gamma")
            and row.get("median_alone_over_plain")]
    if not rows:
        return None
    row = min(rows, key=lambda r: r["gamma"])

    def bounds(lane: str) -> tuple[float, float] | None:
        low, high = row.get(f"min_{lane}_over_plain"), row.get(f"max_{lane}_over_plain")
        return (low, high) if low is not None and high is not None else None

    return AgainstPlain(row["gamma"], row["median_alone_over_plain"], row["median_ours_over_plain"],
                        row["median_hf_speedup"], bounds("alone"), bounds("ours"))


def machine_words(machine: dict) -> str:
    """The machine's name in a reader's words ("Intel Xeon", not "Intel(R) Xeon(R) Processor"), with the
    instruction-set limit the host set: torch's own (AVX2) or, where only oneDNN's was set, oneDNN's."""
    name = reader_name(machine.get("gpu") or machine.get("cpu") or "unknown")
    env = machine.get("env", {})
    limit = env.get("ATEN_CPU_CAPABILITY") or env.get("ONEDNN_MAX_CPU_ISA")
    return f"{name} limited to {limit.upper()}" if limit else name


def load_records(folder: Path = BENCH_DIR) -> list[BenchRecord]:
    """Every record in the folder, in name order."""
    return [read_record(path) for path in sorted(folder.glob("*.json"))]


@dataclass(frozen=True)
class Expectation:
    """What the records say about one machine kind at one precision."""

    kind: str
    precision: str
    records: tuple[BenchRecord, ...]  # those measured on this kind at this precision, examples first
    others: tuple[BenchRecord, ...]  # the default pair's records from other machines, when none matches
    gpus: tuple[BenchRecord, ...] = ()  # on a host without one: what the pair measured on a GPU
    long_records: tuple[BenchRecord, ...] = ()  # this kind's records of long prompts (LONG_SET), for such runs alone

    def text(self) -> str:
        """One or two sentences for the page, figures first, saying where they came from."""
        where = f"a {KIND_WORDS.get(self.kind, self.kind)}, in {self.precision}"
        if self.records:
            first = self.records[0]
            # records of one kind may come from other machines (a kind emulated under kernel limits) or days:
            # each figure then names its own, never the first record's for all
            one_source = len({(record.machine, record.date) for record in self.records}) == 1
            said = [record for record in self.records if record.chosen_cell(0.0) is not None]
            settings = {setting_words(record) for record in said}
            # several figures of one setting name it once (each its prompts); of several settings, each its own
            shared = len(said) > 1 and len(settings) == 1
            figures = listing([(prompts_words(record) if shared else greedy_words(record))
                               + ("" if one_source else f" ({record.machine}, {record.date})") for record in said])
            source = f" ({first.machine}, {first.date})" if one_source else ""
            measured = (f"{settings.pop()}, greedy, over the target alone, the bench measured {figures}{source}" if shared
                        else f"the bench measured {figures}, greedy, over the target alone{source}")
            # the records are one pair's (the default's): said, since the card shows this whatever pair is picked
            return (f"What to expect here with the {first.pair} pair ({where}{thread_words(first.threads, first.kind)}): "
                    f"{measured}. "
                    f"{self.noise_text()}"
                    + (f" {gpu_why_text(first)}{BEFORE_SLOTS if first.before_slots else ''}" if self.kind == "cuda"
                       else gpu_words_for(self.gpus)))
        if not self.others:
            return f"No bench record yet for this machine ({where}); python -m specviz bench measures it."
        measured = "; ".join(f"a {KIND_WORDS.get(r.kind, r.kind)} in {r.precision}: {greedy_words(r)}" for r in self.others)
        return (f"No bench record matches this machine ({where}), so specviz promises no speed here. Measured "
                f"elsewhere, greedy: {measured}. python -m specviz bench measures this one.")


    def noise_text(self) -> str:
        """One run is one noisy sample, and how noisy where a record measured it: repeats of one prompt (the
        figures' ranges above are over prompts, which differ by what they ask)."""
        widest = widest_repeat_spread(self.records, 0.0)  # the band a greedy run's verdict takes (spread_here)
        if widest is not None:
            record, spread = widest
            return (f"One run is one noisy sample: repeats of one prompt moved {spread.low_ratio:.0%}–"
                    f"{spread.high_ratio:.0%} of their median ({set_words(record)}, {record.repeats} each); the "
                    "ranges above are over prompts, which differ by what they ask, not by noise.")
        return "One run is one noisy sample."

    def against_plain_text(self, num_prompt_tokens: int = 0) -> str:
        """One line: how specviz compared with plain transformers on this machine kind, where a record timed it. A
        run of a long prompt (LONG_PROMPT tokens or more) reads the records of long prompts where there are some;
        else the line says that its prompts were shorter and that a long one gains less."""
        long_prompt = num_prompt_tokens >= LONG_PROMPT
        timed = [record for record in (*(self.long_records if long_prompt else ()), *self.records) if record.against_plain]
        if not timed:
            return ""
        record = timed[0]
        plain = record.against_plain
        # a faster target alone is specviz's kernels, not speculation: the card's speedup is over that target alone
        kernels = f" {FASTER_ALONE}" if plain.alone >= FASTER_ALONE_FROM else ""
        # both precisions named where they differ: "generate() in bfloat16" alone read as specviz's precision
        theirs_in = (f" (transformers in {record.against_precision}, specviz in {record.precision})"
                     if record.against_precision else "")
        # medians over the prompts, each lane's range beside it: a user's own prompt may land anywhere in it
        spread = (f" Prompt by prompt the target alone ranged {plain.alone_range[0]:.2f}–{plain.alone_range[1]:.2f}×, "
                  f"the lane {plain.ours_range[0]:.2f}–{plain.ours_range[1]:.2f}×."
                  if plain.alone_range and plain.ours_range else "")
        line = (f"Against plain transformers here (medians of the bench on {prompts_and_lengths(record)}, "
                f"greedy, whole calls, {record.machine}, {record.date}): specviz's target alone ran at "
                f"{plain.alone:.2f}× transformers' generate(){theirs_in}, its speculative lane at {plain.ours:.2f}× "
                f"(γ = {plain.gamma}), and transformers' own assisted generation with the draft model at "
                f"{plain.assisted:.2f}×.{spread}{kernels}")
        if long_prompt and record.prompt_set != LONG_SET:
            shorter = f"at most {record.prompt_tokens[1]:,} tokens" if record.prompt_tokens else "short"
            line += (f" Those prompts were {shorter}; this one has {num_prompt_tokens:,}, and over a long prompt specviz "
                     "gains less: both lanes read it first, and every verify row attends over all of it.")
        return line


FASTER_ALONE_FROM = 1.1  # a target alone this much faster than plain generate() says why
FASTER_ALONE = ("specviz's target alone is faster by specviz's own kernels, which both lanes run: its attention, and "
                "products whose weights are packed once at load or read from the model file's 4-bit blocks. So every "
                "speedup on this page is speculation's own, over that faster target alone.")

BEFORE_SLOTS = (" Those figures predate the CUDA graphs a GPU now runs the target with (every forward in one shape, "
                "launched as one graph, for both lanes); the speed with them is not measured yet.")


def gpu_words_for(records: Sequence[BenchRecord]) -> str:
    """People come with GPU claims: the one GPU sentence (gpu_text), said beside a CPU's figures."""
    words = gpu_text(records)
    return f" {words}" if words else ""


def gpu_text(records: Sequence[BenchRecord]) -> str:
    """The page's one GPU sentence, for the pair whose GPU records these are: what the bench measured there, greedy,
    and what the record itself says of why; "" where no record measured the pair on a GPU (nothing is claimed)."""
    record = next((r for r in records if r.kind == "cuda" and r.chosen_cell(0.0) is not None), None)
    if record is None:
        return ""
    return (f"On a GPU the bench measured this pair at {greedy_words(record)} ({record.machine}, {record.date}), "
            f"greedy. {gpu_why_text(record)}{BEFORE_SLOTS if record.before_slots else ''}")


def gpu_why_text(record: BenchRecord) -> str:
    """Why a GPU record measured what it did, in its own figures: the target alone's pace there, a draft step's share
    of a target step, and whether the one rule finds a gain beyond the noise in its cells."""
    cell = record.chosen_cell(0.0)
    if cell is None:
        return ""
    pace = (f"The target alone wrote {cell.baseline_tokens_per_s:.0f} tokens/s on that GPU "
            f"({1000 / cell.baseline_tokens_per_s:.1f} ms a token)" if cell.baseline_tokens_per_s > 0 else "On that GPU")
    share = f", a draft step cost c = {cell.cost_ratio:.2f} of a target step" if cell.cost_ratio is not None else ""
    judged = record_payoff(record, 0.0)
    if judged.pays:
        verdict = "that gain is beyond the noise of its runs."
    elif judged.chosen.over_prompts:
        verdict = "a GPU alone does not make speculation pay for this pair beyond the noise of its runs."
    else:
        why = "each prompt ran once" if record.repeats == 1 else "it kept no single runs"
        verdict = (f"some of its runs were no faster than the target alone (down to {judged.chosen.low:.2f}×): {why}, "
                   "so the record cannot tell timing noise from what a prompt asks, and claims no gain for this pair "
                   "on a GPU.")
    return f"{pace}{share}, and {verdict}"


def record_payoff(record: BenchRecord, temperature: float) -> Payoff:
    """The one rule (specviz.analysis.payoff) over a record's cells at one temperature: the γ the bench picks."""
    cells = [cell for cell in record.cells if cell.temperature == temperature]
    best = max(cells, key=lambda cell: cell.median)
    measured = tuple(Measurement(cell.gamma, cell.median, cell.low, cell.high, cell.num_runs,
                                 cell_spread(record, cell), cell.tree) for cell in cells)
    return Payoff(best.acceptance_rate, best.cost_ratio or 0.0, best.verify_cost, measured)


def temperature_words(temperature: float) -> str:
    """"greedy", or "T = 0.7": a cell's temperature in a reader's words."""
    return "greedy" if temperature == 0 else f"T = {temperature:g}"


def record_words(record: BenchRecord, temperature: float) -> str:
    """Where a record measured, in a reader's words: "held-out prompts, a CPU with AVX2 only in float32, greedy, …"."""
    kind = temperature_words(temperature)
    return (f"{set_words(record)}, a {KIND_WORDS.get(record.kind, record.kind)} "
            f"in {record.precision}, {kind}, {record.date}")


@lru_cache(maxsize=32)
def bench_pick(pair: str, precision: str, temperature: float, drafter: str,
               device: str | None = None) -> tuple[Payoff, str] | None:
    """The bench's pick of γ for this pair and drafter on this machine at this temperature (the one rule over the
    first matching record's cells, examples first, as spread_here reads), with where it was measured in words;
    None where no record measured that setup here (the page then names no γ rather than another machine's)."""
    expectation = expect_here(device, precision, pair)
    records = expectation.records if expectation is not None else ()
    for record in records:
        if (not drafter or record.drafter == drafter) and any(c.temperature == temperature for c in record.cells):
            payoff = record_payoff(record, temperature)
            chosen = payoff.chosen
            pick = ("the bench's pick" if chosen.beats_target
                    else "the bench's best median, though not beyond the noise," if chosen.over_prompts
                    else "the bench's best median, though not faster on every prompt,")
            spread = (f"at the median of {chosen.num_runs} runs (prompts ranged {chosen.low:.2f}–{chosen.high:.2f}×)"
                      if chosen.over_prompts else f"({chosen.low:.2f}–{chosen.high:.2f}× over {chosen.num_runs} runs)")
            return payoff, (f"{pick} for this pair and drafter on this machine: {chosen.median:.2f}× {spread} on "
                            f"{record_words(record, temperature)}")
    return None


@lru_cache(maxsize=16)
def gpu_text_for(pair: str) -> str:
    """The one GPU sentence for a pair by name, from the kept records ("" where they cannot be read)."""
    try:
        records = load_records()
    except ValueError:
        return ""
    return gpu_text(gpu_records(records, pair))


def gpu_records(records: Sequence[BenchRecord], pair: str = DEFAULT_PRESET) -> tuple[BenchRecord, ...]:
    """The pair's records measured on a GPU in its default precision there, held-out and examples first."""
    ordered = sorted((r for r in records if r.pair == preset_name(pair)),
                     key=lambda r: (PROMPT_SET_ORDER.get(r.prompt_set, 9), r.file))
    return tuple(r for r in ordered
                 if r.kind == "cuda" and r.precision == device_default("cuda") and r.prompt_set != LONG_SET)


def greedy_words(record: BenchRecord) -> str:
    """The record's chosen greedy cell, named as what it is (its γ, tree and drafter): a replay of another setting
    measures another figure, and the page must not read as if the two disagreed."""
    cell = record.chosen_cell(0.0)
    if cell is None:
        return ""
    return f"{cell.speedup_text()} {setting_words(record)} on {set_words(record)}"


def setting_words(record: BenchRecord) -> str:
    """"at γ = 3 with the EAGLE-style head": the setting of the record's chosen greedy cell (the caller's has one)."""
    cell = record.chosen_cell(0.0)
    return f"at γ = {cell.gamma}{f', a tree of {cell.tree}' if cell.tree else ''} with the {drafter_info(record.drafter).label}"


def prompts_words(record: BenchRecord) -> str:
    """"1.34× (0.90–1.82) on the example prompts": the chosen greedy cell's figure, its setting said once elsewhere."""
    return f"{record.chosen_cell(0.0).speedup_text()} on {set_words(record)}"


def prompts_and_lengths(record: BenchRecord) -> str:
    """"long prompts of 292–2,501 tokens": the record's prompts, with their lengths where the record kept them."""
    if record.prompt_tokens is None:
        return set_words(record)
    shortest, longest = record.prompt_tokens
    return f"{set_words(record)} of {shortest:,}–{longest:,} tokens"


def set_words(record: BenchRecord) -> str:
    """The record's prompts in a reader's words: "the example prompts", "held-out prompts"."""
    return PROMPT_SET_WORDS.get(record.prompt_set, record.prompt_set)


def thread_words(threads: int, kind: str = "") -> str:
    """", one thread": how many CPU threads ran it; nothing on a GPU, where the host's threads do not set the pace."""
    if kind == "cuda":
        return ""
    return ", one thread" if threads == 1 else f", {threads} threads"


def expect(kind: str, precision: str, records: list[BenchRecord], pair: str = DEFAULT_PRESET) -> Expectation:
    """The pair's one-thread records (the page's setup) of this machine kind and precision; when none match,
    its records of other machines, named as such."""
    of_pair = [r for r in records if r.pair == preset_name(pair) and (r.threads == 1 or r.kind == "cuda")]
    ordered = sorted(of_pair, key=lambda r: (PROMPT_SET_ORDER.get(r.prompt_set, 9), r.file))
    here = [r for r in ordered if r.kind == kind and r.precision == precision]
    matching = tuple(r for r in here if r.prompt_set != LONG_SET)
    long_records = tuple(r for r in here if r.prompt_set == LONG_SET)
    gpus = () if kind == "cuda" else gpu_records(of_pair, pair)
    if matching:
        return Expectation(kind, precision, matching, (), gpus, long_records)
    elsewhere = [r for r in sorted(of_pair, key=table_order)
                 if r.prompt_set == "examples" and r.precision == device_default(r.kind)]
    return Expectation(kind, precision, (), tuple(elsewhere), long_records=long_records)


@lru_cache(maxsize=16)
def expect_here(device: str | None = None, precision: str | None = None,
                pair: str = DEFAULT_PRESET) -> Expectation | None:
    """What to expect on this host at this precision (its default if None); None when the records cannot be
    read (the page then says nothing rather than something wrong)."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    try:
        records = load_records()
    except ValueError:
        return None
    return expect(machine_kind(device), default_precision(device) if precision is None else precision, records, pair)


def cell_spread(record: BenchRecord, cell: Cell) -> Spread | None:
    """How far one run of a record's cell moved over repeats of the same prompt (payoff.repeat_spread), where the
    record kept every run and ran each prompt more than once; None otherwise."""
    if len(cell.speedups) != cell.num_runs:
        return None
    kind = temperature_words(cell.temperature)
    prompts = (set_words(record).removeprefix("the ") if record.prompt_set in PROMPT_SET_WORDS
               else f"prompts ({record.prompt_set})")
    repeats = cell.num_runs // record.num_prompts
    if cell.temperature > 0:  # a new seed each repeat: the band holds how far two samples' speeds differ too
        kind += " (each time a new seed)"
    source = (f"the bench ran each of its {record.num_prompts} {prompts} {repeats} times, {kind}, "
              f"{machine_words_of(record, cell)}, {record.date}, each run against its own prompt's median; the "
              f"prompts themselves ranged {cell.low:.2f}–{cell.high:.2f}×, since what a text asks sets how many "
              f"drafts are accepted")
    return repeat_spread(cell.speedups, record.num_prompts, source)


def machine_words_of(record: BenchRecord, cell: Cell) -> str:
    """"on a CPU with AVX2 only in float32, γ = 3": where a cell was measured, in a reader's words."""
    return f"on a {KIND_WORDS.get(record.kind, record.kind)} in {record.precision}, γ = {cell.gamma}"


def spread_cell(record: BenchRecord, temperature: float) -> Cell | None:
    """The record's first cell at this temperature that can say how far one run moves (two runs or more)."""
    cell = next((cell for cell in record.cells if cell.temperature == temperature), None)
    return None if cell is None or cell.median <= 0 or cell.num_runs < 2 else cell


def run_spread(record: BenchRecord, temperature: float) -> Spread | None:
    """How far one run moved in a record's cell at this temperature, as ratios to a median: over repeats of the
    same prompt where the record kept them (cell_spread: the noise of one measurement; the prompts' own range is
    a different question, which "What to expect here" answers); in older records, the lowest and highest run
    over prompts × repeats (wider, never narrower). None without either."""
    cell = spread_cell(record, temperature)
    if cell is None:
        return None
    repeats = cell_spread(record, cell)
    if repeats is not None:
        return repeats
    kind = temperature_words(temperature)
    return Spread(cell.low / cell.median, cell.high / cell.median,
                  f"the bench's {cell.num_runs} {kind} runs of {set_words(record)} {machine_words_of(record, cell)}, "
                  f"{cell.speedup_text()}, {record.date}")


def widest_repeat_spread(records: Sequence[BenchRecord], temperature: float) -> tuple[BenchRecord, Spread] | None:
    """The widest band that repeats of one prompt measured at this temperature among these records, with its record;
    None where none kept its runs."""
    measured = [(record, spread) for record in records
                if (cell := spread_cell(record, temperature)) is not None
                and (spread := cell_spread(record, cell)) is not None]
    return max(measured, key=lambda found: found[1].high_ratio - found[1].low_ratio, default=None)


@lru_cache(maxsize=16)
def spread_here(pair: str, precision: str, temperature: float, device: str | None = None) -> Spread | None:
    """The spread one run of this pair shows here: the widest that repeats of one prompt measured in the matching
    records, since a record's few repeats can miss swings of the clock that another's caught (on one AVX2 EPYC, the
    example prompts' 3 runs each moved 96–105 % of their median, the held-out prompts' 2 each 91–109 %); where no
    record kept its runs, the first matching record's whole range over prompts (examples first). None where none
    matches, and the verdict then has no band rather than an assumed one."""
    expectation = expect_here(device, precision, pair)
    records = expectation.records if expectation is not None else ()
    widest = widest_repeat_spread(records, temperature)
    if widest is not None:
        return widest[1]
    return next(filter(None, (run_spread(record, temperature) for record in records)), None)


SPEED_TABLE_HEADER = (
    "| machine | precision | prompts × repeats | greedy (T = 0) | sampled (T = 0.7) | target alone | greedy runs parted "
    "| against plain transformers, greedy | record |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def speed_table_cells(record: BenchRecord) -> dict[str, str]:
    """The figures of one README row, by column."""
    greedy, sampled = record.chosen_cell(0.0), record.chosen_cell(0.7)
    base = greedy or sampled
    repeats = max(1, base.num_runs // record.num_prompts) if base and record.num_prompts else record.repeats
    cut = record.prompts_of is not None and record.prompts_of > record.num_prompts
    prompts = f"{record.prompt_set} (first {record.num_prompts} of {record.prompts_of})" if cut else record.prompt_set
    return {
        "prompts × repeats": f"{prompts} × {repeats}",
        "greedy (T = 0)": greedy.speedup_text() if greedy else "—",
        "sampled (T = 0.7)": sampled.speedup_text() if sampled else "—",
        "target alone": f"{base.baseline_tokens_per_s:.1f} tok/s" if base else "—",
        "greedy runs parted": f"{greedy.num_diverged}/{greedy.num_runs}" if greedy and greedy.num_diverged is not None else "—",
        "against plain transformers, greedy": against_plain_text(record),
        "record": f"[{record.file.removesuffix('.json')}](assets/bench/{record.file})",
    }


def against_plain_text(record: BenchRecord) -> str:
    """One README cell: the target alone and the speculative lane against plain generate(), and transformers'
    assisted generation beside them, whole calls timed end to end ("—" where the record did not time them)."""
    if record.against_plain is None:
        return "—"
    plain = record.against_plain
    theirs_in = f" (transformers in {record.against_precision})" if record.against_precision else ""
    return (f"γ {plain.gamma}: alone {plain.alone:.2f}×{plain.range_text(plain.alone_range)}, speculative "
            f"{plain.ours:.2f}×{plain.range_text(plain.ours_range)}; transformers' assisted {plain.assisted:.2f}×{theirs_in}")


def speed_table_row(record: BenchRecord) -> str:
    cells = speed_table_cells(record)
    machine = f"{KIND_WORDS.get(record.kind, record.kind)}: {record.machine}{thread_words(record.threads, record.kind)}"
    default = record.precision == device_default(record.kind)
    precision = f"**{record.precision}** (default)" if default else record.precision
    return "| " + " | ".join([machine, precision, *cells.values()]) + " |"


def table_order(record: BenchRecord) -> tuple:
    return (KIND_ORDER.index(record.kind) if record.kind in KIND_ORDER else len(KIND_ORDER), record.threads,
            PRECISION_ORDER.index(record.precision) if record.precision in PRECISION_ORDER else 9,
            PROMPT_SET_ORDER.get(record.prompt_set, 9), record.file)


def speed_table(records: list[BenchRecord], pair: str = DEFAULT_PRESET) -> str:
    """The README's table: one row per record of the pair."""
    rows = [speed_table_row(r) for r in sorted(records, key=table_order) if r.pair == preset_name(pair)]
    return "\n".join([SPEED_TABLE_HEADER, *rows])


def main() -> None:
    records = load_records()
    print(speed_table(records))
    expectation = expect_here()
    print("\n" + (expectation.text() if expectation else "the records could not be read"))


if __name__ == "__main__":
    main()
