"""What a visitor of a public deployment may ask the server to load: the hosting policy.

Pure policy, no UI: `load_pair` asks `check_model_id` about both model ids of a custom pair
before it loads anything or looks in its pair cache. Presets are chosen by the operator and
skip these checks. A model's own code is never run, whatever the policy (`trust_remote_code=False` on every
load: loading.NO_REMOTE_CODE).

Environment variables (`HostingPolicy.from_env` reads them at each load; "a Space" is a Hugging Face
Space, which sets ``SPACE_ID``; elsewhere the CLI or a local ``python app.py`` is run by its operator):

- ``SPECVIZ_ALLOW_LOCAL_MODELS`` (1/0): load custom models from the server's own folders. Default: off
  on a Space, on elsewhere.
- ``SPECVIZ_MAX_MODEL_BYTES``: largest hub model (weights plus config and tokenizer files, as the hub's
  metadata gives them) a custom pair may name, per model; 0 means no cap. Default: 2_000_000_000 on a
  Space (a free CPU Space has 16 GB, and float32 on CPU doubles bf16 weights: two such models plus the
  default pair fit), 0 elsewhere.
- ``SPECVIZ_MAX_PAIRS``: most model pairs kept in memory, the pinned default pair included. Default: 2.
- ``SPECVIZ_MAX_NEW_TOKENS``: most new tokens a run may ask for. Default: 256 on a Space, 512 elsewhere.
- ``SPECVIZ_MAX_PROMPT_TOKENS``: most prompt tokens (chat template included) a run may have the target
  read; 0 means the models' own context length. Default: 2048 on a Space (a long prompt keeps a CPU
  busy for minutes), 0 elsewhere.
- ``SPECVIZ_MAX_RUN_S``: seconds of wall time after which the app stops a run (both lanes together) and
  says so; 0 means no limit. Default: 120 on a Space, 0 elsewhere.
- ``SPECVIZ_QUEUE_SIZE``: most visitors waiting in the app's queue; more are told it is busy. Default:
  16 on a Space, 64 elsewhere.
- ``SPECVIZ_MAX_SESSIONS``: most visitors' sessions whose page state gradio keeps in memory; the oldest
  is dropped beyond it (its page then needs a new run before the inspector answers). Each session, even
  one API call's, holds a copy of the page's config: gradio's own default of 10,000 would let a stream
  of visitors take gigabytes. Default: 500 on a Space, 1000 elsewhere.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from huggingface_hub import HfApi
from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

from specviz.models.errors import ModelLoadError

DEFAULT_MAX_PAIRS = 2
MAX_ID_LENGTH = 1024  # any longer is no model id, hub or local
MAX_PART_LENGTH = 96  # the hub's limit for an owner or a name
HUB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$", re.ASCII)  # ASCII: no look-alike letters
EXAMPLE_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
# Which files from_pretrained fetches: one weight format (safetensors when the repo has any,
# as transformers prefers them, else .bin) plus the small root files of config and tokenizer.
WEIGHT_FORMATS = (".safetensors", ".bin")
ROOT_FILE_SUFFIXES = (".json", ".txt", ".model", ".jinja", ".tiktoken")


@dataclass(frozen=True)
class HostingPolicy:
    """What custom model ids may do on this server; see the module docstring for the variables."""

    allow_local_models: bool = True
    max_model_bytes: int = 0  # per hub model; 0: no cap
    max_cached_pairs: int = DEFAULT_MAX_PAIRS
    max_new_tokens: int = 512  # per run
    max_prompt_tokens: int = 0  # per run in the app, chat template included; 0: the models' context length
    max_run_s: int = 0  # wall time per run in the app; 0: no limit
    queue_size: int = 64  # visitors waiting for the model; more get "busy, try again"
    max_sessions: int = 1000  # visitors' page states gradio keeps; the oldest dropped beyond it

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "HostingPolicy":
        environ = os.environ if environ is None else environ
        on_space = bool(environ.get("SPACE_ID"))
        return cls(
            allow_local_models=read_flag(environ, "SPECVIZ_ALLOW_LOCAL_MODELS", default=not on_space),
            max_model_bytes=read_count(environ, "SPECVIZ_MAX_MODEL_BYTES", 2_000_000_000 if on_space else 0, 0),
            max_cached_pairs=read_count(environ, "SPECVIZ_MAX_PAIRS", DEFAULT_MAX_PAIRS, 1),
            max_new_tokens=read_count(environ, "SPECVIZ_MAX_NEW_TOKENS", 256 if on_space else 512, 1),
            max_prompt_tokens=read_count(environ, "SPECVIZ_MAX_PROMPT_TOKENS", 2048 if on_space else 0, 0),
            max_run_s=read_count(environ, "SPECVIZ_MAX_RUN_S", 120 if on_space else 0, 0),
            queue_size=read_count(environ, "SPECVIZ_QUEUE_SIZE", 16 if on_space else 64, 1),
            max_sessions=read_count(environ, "SPECVIZ_MAX_SESSIONS", 500 if on_space else 1000, 1),
        )


def read_flag(environ: Mapping[str, str], name: str, default: bool) -> bool:
    value = environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in TRUE_WORDS or value in FALSE_WORDS:
        return value in TRUE_WORDS
    # a misconfigured server must fail loudly, not fall back to a guess about its safety
    raise ValueError(f"{name} must be 1 or 0, got {value!r}")


def read_count(environ: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    value = environ.get(name, "").strip().replace("_", "")
    if not value:
        return default
    if not value.isdigit() or int(value) < minimum:
        raise ValueError(f"{name} must be an integer ≥ {minimum}, got {environ[name]!r}")
    return int(value)


def is_hub_id(model_id: str) -> bool:
    """owner/name in the hub's characters; the shape alone, never the disk."""
    parts = model_id.split("/")
    # the hub's own rules; they also keep "a/." and "a/-x" from naming a folder or an option
    return (bool(HUB_ID_PATTERN.fullmatch(model_id)) and ".." not in model_id
            and all(len(part) <= MAX_PART_LENGTH and part[0] not in ".-" and part[-1] not in ".-" for part in parts))


def is_printable_line(model_id: str) -> bool:
    # short parts also keep Path.exists from raising "File name too long"
    return (0 < len(model_id) <= MAX_ID_LENGTH and model_id.isprintable()
            and all(len(part) <= 255 for part in model_id.split("/")))


def exists_on_disk(model_id: str) -> bool:
    try:
        return Path(model_id).exists()
    except OSError:  # a folder it may not read, a symlink loop: not a folder it can load
        return False


def local_models_refused(model_id: str) -> str:
    # One message for every id this server will not take from its disk: it names only what the
    # visitor typed, so it cannot tell whether that path exists.
    return (f"{model_id!r} is not a Hugging Face Hub model id: this server loads hub models only "
            f"(owner/name, e.g. {EXAMPLE_ID}), not folders on its disk")


def check_model_id(model_id: str, policy: HostingPolicy) -> None:
    """Refuse, with a ModelLoadError a visitor can act on, an id this server must not load: its shape, the
    local-folder rule and, for hub ids, the size from the hub's metadata, before any download."""
    if not is_printable_line(model_id):
        raise ModelLoadError(f"a model id is one short line of printable text, e.g. {EXAMPLE_ID}")
    if policy.allow_local_models:  # else the operator's own folder, or a typo the loaders explain
        if is_hub_id(model_id) and policy.max_model_bytes > 0 and not exists_on_disk(model_id):
            check_hub_model(model_id, policy)
        return
    if not is_hub_id(model_id):
        raise ModelLoadError(local_models_refused(model_id))
    check_hub_model(model_id, policy)  # hub first, so a missing model reads the same either way
    # transformers would load a folder at this relative path instead of the hub model; refusing
    # here tells a visitor that such a folder exists only when the hub also has that id
    if exists_on_disk(model_id):
        raise ModelLoadError(local_models_refused(model_id))


def check_hub_model(model_id: str, policy: HostingPolicy) -> None:
    """From the hub's metadata, before any download: the model exists and fits the size cap."""
    try:
        file_sizes = read_hub_file_sizes(model_id)
    except Exception as error:  # noqa: BLE001 — offline, no network, hub errors: refuse, never download unchecked
        raise ModelLoadError(f"could not check {model_id!r} on the Hugging Face Hub before downloading it "
                             f"({type(error).__name__}); try again later, or pick a preset pair")
    if file_sizes is None:
        raise ModelLoadError(f"no model {model_id!r} on the Hugging Face Hub (or it is private or gated): check the id")
    if policy.max_model_bytes <= 0:
        return
    size = download_bytes(file_sizes)
    if size is None:
        raise ModelLoadError(f"the Hugging Face Hub does not give the size of {model_id!r}, so this server will not "
                             f"download it")
    if size > policy.max_model_bytes:
        raise ModelLoadError(f"{model_id!r} is {size / 1e9:.2f} GB, over this server's limit of "
                             f"{policy.max_model_bytes / 1e9:.2f} GB per model: pick a smaller model")


def download_bytes(file_sizes: Mapping[str, int | None]) -> int | None:
    """Bytes from_pretrained would fetch, from the repo's file sizes; None when one is unknown."""
    weight_format = next((suffix for suffix in WEIGHT_FORMATS if any(name.endswith(suffix) for name in file_sizes)),
                         None)
    # weights in any folder count (over-counting is safe), other files only at the root
    counted = [size for name, size in file_sizes.items() if (weight_format and name.endswith(weight_format))
               or ("/" not in name and name.endswith(ROOT_FILE_SUFFIXES))]
    return None if any(size is None for size in counted) else sum(counted)


def read_hub_file_sizes(model_id: str) -> dict[str, int | None] | None:
    """{file name: bytes} of a hub model's files, or None when the hub has no such (public) model: the only
    call to the hub in this module, kept alone so tests can replace just it."""
    try:
        info = HfApi().model_info(model_id, files_metadata=True, timeout=10)
    except (RepositoryNotFoundError, RevisionNotFoundError):  # gated repos included: they subclass it
        return None
    return {sibling.rfilename: sibling.size for sibling in info.siblings or ()}
