"""Where, when and how a bench record was measured: the machine (its kind, CPU, native bf16, the host's
limits, threads and versions), the prompt set, the batch-invariance measured at load, the date and
the command line. `bench --json` writes it beside its cells; specviz.analysis.expectations reads it.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shlex
import sys
from pathlib import Path

import torch
import transformers

from specviz.models.int8 import cpu_supports
from specviz.models.invariance import Invariance
from specviz.models.precision import cpu_has_amx, cpu_has_native_bf16, cuda_has_native_bf16
from specviz.models.presets import ASSETS_DIR

# The prompt files a record can name, by the words the README and the page use for them.
PROMPT_SETS = {"prompts.json": "examples", "prompts-heldout.json": "held-out", "prompts-copy-heavy.json": "copy-heavy",
               "prompts-varied.json": "varied"}
# The host's settings that change what a bench measures; a record names those that were set.
RECORDED_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "SPECVIZ_SLOTS",
                "SPECVIZ_PRECISION", "OMP_NUM_THREADS")


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
