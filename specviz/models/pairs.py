"""Model pairs: presets, loading (transformers + accelerate), device and dtype, compatibility.

A pair loads once while it stays cached (`load_pair` keeps at most SPECVIZ_MAX_PAIRS pairs, the
default pinned; see specviz.models.hosting) and is shared by every run and every user of the app.
"""

from __future__ import annotations

import gc
import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from specviz.models import convert, hosting
from specviz.models.invariance import Invariance, make_batch_invariant
from specviz.catalogue import DEFAULT_DRAFTER, DrafterInfo, drafter_info
from specviz.models.draft_head import WEIGHTS_FILE as HEAD_WEIGHTS_FILE, load_head
from specviz.models.int8 import cpu_supports, int8_available, quantize_linears
from specviz.models.rows import RowScorer

ASSETS_DIR = Path(__file__).resolve().parents[2] / "assets"
EMBEDDED_DRAFT_DIR = ASSETS_DIR / "smollm2-draft"
TINY_CODE_DIR = ASSETS_DIR / "tiny-code-pair"
EMBEDDED_HEAD_DIR = ASSETS_DIR / "smollm2-head"  # the head drafter trained on the default target
HEAD_ROWS_FILE = "head_rows.json"  # a draft's most useful output rows (specviz.training.distil writes it)


@dataclass(frozen=True)
class PairPreset:
    """A named draft → target pair users can pick."""

    name: str
    target_id: str  # hub id or local folder
    draft_id: str
    note: str  # one line for menus
    # Finds (or first builds) the target's folder at load time: the default target is converted
    # from an installed wheel into a cache, which must not happen at import.
    locate_target: Callable[[], str] | None = None
    prompts_file: Path = ASSETS_DIR / "prompts.json"  # the bench's and the app's example prompts
    head_dir: Path | None = None  # a head drafter trained on this target (specviz.decoding.head), if any
    # The drafter a run on this pair gets when none is named: the winner of the pair's bench (README).
    default_drafter: str = DEFAULT_DRAFTER
    # Whether the draft and the head run in int8 on a CPU (specviz.models.int8): they are bound by
    # memory there, and int8 halves their bytes (measured on the default pair only). Off elsewhere:
    # the tiny pair's GPT-2 draft has Conv1D layers, which int8 leaves alone, and hub pairs stay as
    # transformers loads them.
    int8_drafters: bool = False

    def unnamed_drafter(self) -> str:
        """The drafter a run gets when none is named: default_drafter when what it reads is here (a
        head's weights), else the catalogue's default (so custom pairs, built with no head, get it too)."""
        if drafter_info(self.default_drafter).reads_target and not (
                self.head_dir is not None and (self.head_dir / HEAD_WEIGHTS_FILE).is_file()):
            return DEFAULT_DRAFTER
        return self.default_drafter

    def resolved_target_id(self) -> str:
        if self.locate_target is None:
            return self.target_id
        try:
            return self.locate_target()
        except convert.TargetUnavailableError as error:
            raise ModelLoadError(str(error)) from error


PRESETS: dict[str, PairPreset] = {
    preset.name: preset
    for preset in (
        PairPreset(
            "embedded",
            convert.HUB_ID,
            str(EMBEDDED_DRAFT_DIR),
            "SmolLM2-135M-Instruct with specviz's head and distilled draft, offline",
            locate_target=convert.default_target_id,
            head_dir=EMBEDDED_HEAD_DIR,
            default_drafter="head",  # wins or ties every bfloat16 bench row (README): greedy, int8 drafters, 1.47×/1.33× vs 1.40×/1.25×
            int8_drafters=True,
        ),
        PairPreset(
            "tiny-code",
            str(TINY_CODE_DIR / "target"),
            str(TINY_CODE_DIR / "draft"),
            "specviz's tiny Python-code pair (fast, offline)",
            prompts_file=TINY_CODE_DIR / "prompts.json",
        ),
        PairPreset(
            "pythia",
            "EleutherAI/pythia-1.4b-deduped",
            "EleutherAI/pythia-160m-deduped",
            "Pythia 160M → 1.4B (the seed article's pair), needs network",
        ),
        PairPreset(
            "smollm2",
            "HuggingFaceTB/SmolLM2-1.7B-Instruct",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            "SmolLM2 135M → 1.7B Instruct, needs network",
        ),
        PairPreset(
            "qwen2.5",
            "Qwen/Qwen2.5-1.5B-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "Qwen2.5 0.5B → 1.5B Instruct, needs network",
        ),
    )
}
DEFAULT_PRESET = "embedded"


class ModelLoadError(ValueError):
    """A model could not be loaded (unknown id, no network, out of memory, bad folder)."""


class IncompatiblePairError(ValueError):
    """Draft and target do not share one tokenizer, so their token ids mean different things."""


@dataclass
class ModelPair:
    """A target, its draft, and what the engine needs to know about them."""

    target: torch.nn.Module
    draft: torch.nn.Module | None  # None is allowed for drafters that need no model
    tokenizer: object | None  # a transformers tokenizer; the engine itself only sees ids
    device: torch.device  # where inputs go and sampling happens
    vocab_size: int  # shared vocabulary: logits are sliced to this many entries
    context_length: int  # most positions both models accept
    eos_id: int | None
    name: str = "custom"
    # Output rows the drafter may restrict itself to (sorted ids), from the draft's folder;
    # None: the draft's whole head. Any q keeps the rejection rule exact.
    draft_head_rows: torch.Tensor | None = None
    # The head drafter (specviz.decoding.head) and its output rows, for a target one was trained on.
    head: torch.nn.Module | None = None
    head_rows: torch.Tensor | None = None
    head_error: str | None = None  # why a head shipped for this target did not load
    # The draft's and the head's output rows as layers (specviz.models.rows), built once at load;
    # a pair assembled by hand has none and its drafters build plain ones.
    draft_scorer: RowScorer | None = None
    head_scorer: RowScorer | None = None
    int8_drafters: bool = False  # whether the draft and the head run in int8 (specviz.models.int8)
    # Whether a verify rounds exactly like a step for this target here (specviz.models.invariance),
    # measured when the pair was built.
    invariance: Invariance | None = None

    def lacks_for(self, info: DrafterInfo) -> str | None:
        """Why this pair cannot run the drafter, in words; None when it can."""
        if info.needs_draft_model and self.draft is None:
            return f"this pair has no draft model, which the {info.label} drafter needs: choose another drafter"
        if info.reads_target and self.head is None and self.head_error:
            return f"{self.head_error}: choose the draft model or prompt lookup, or train it again (`python -m specviz train --recipe head`)"
        if info.reads_target and self.head is None:
            return (f"no {info.label} was trained for this pair's target: choose the draft model or prompt lookup "
                    f"(the default pair's head is trained with `python -m specviz train --recipe head`)")
        return None

    @property
    def precision(self) -> str:
        """The target's weights' precision (both models load in one)."""
        return precision_name(next(self.target.parameters()).dtype)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def uses_chat(self, chat: bool | None) -> bool:
        """chat=None means: the template when the pair has one (instruct targets want it)."""
        return self.has_chat_template and chat is not False

    def format_prompt(self, prompt_text: str, chat: bool | None = None) -> str:
        """The text the models see: the user's words, inside the chat template when it applies."""
        if not self.uses_chat(chat):
            return prompt_text
        messages = [{"role": "user", "content": prompt_text}]
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def encode(self, prompt_text: str, chat: bool | None = None) -> list[int]:
        """Prompt text → ids, with the messages a user needs for empty or too-long prompts."""
        if not prompt_text or not prompt_text.strip():
            raise ValueError("the prompt is empty: type some text to continue")
        ids = self.tokenizer(self.format_prompt(prompt_text, chat), add_special_tokens=False)["input_ids"]
        if not ids:
            raise ValueError("the prompt is empty after tokenizing: type some text to continue")
        if len(ids) >= self.context_length:
            templated = " (with the chat template)" if self.uses_chat(chat) else ""
            raise ValueError(
                f"the prompt is {len(ids)} tokens long{templated}, but these models see at most {self.context_length} "
                f"tokens: shorten it to at most {self.context_length - 1} tokens"
            )
        return ids

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)

    @classmethod
    def from_models(cls, target, draft, tokenizer=None, name: str = "custom", draft_head_rows=None) -> "ModelPair":
        """Wrap two loaded models; used by load_pair and by tests with tiny random models. The
        target gets its batch-invariant forward here (specviz.models.invariance), so every lane,
        transformers' generate() included, runs it; the pair records which guarantee holds."""
        vocab_sizes = [target.config.vocab_size] + ([draft.config.vocab_size] if draft is not None else [])
        if tokenizer is not None:
            vocab_sizes.append(len(tokenizer))
        eos_id = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else target.config.eos_token_id
        if isinstance(eos_id, list):
            eos_id = eos_id[0]
        models = [target] + ([draft] if draft is not None else [])
        device = next(target.parameters()).device
        vocab_size = min(vocab_sizes)
        if draft_head_rows is not None:
            draft_head_rows = draft_head_rows[draft_head_rows < vocab_size].to(device)
        context_length = min(context_length_of(model) for model in models)
        return cls(
            target=target,
            draft=draft,
            tokenizer=tokenizer,
            device=device,
            vocab_size=vocab_size,
            context_length=context_length,
            eos_id=eos_id,
            name=name,
            draft_head_rows=draft_head_rows,
            invariance=make_batch_invariant(target, vocab_size, context_length, emulated=runs_emulated(target)),
        )


def read_head_rows(draft_id: str) -> torch.Tensor | None:
    """The draft folder's head_rows.json (sorted token ids), if it has one."""
    path = Path(draft_id) / HEAD_ROWS_FILE
    if not path.is_file():
        return None
    try:
        rows = json.loads(path.read_text())
        return torch.tensor(sorted(set(int(row) for row in rows)), dtype=torch.long)
    except (ValueError, TypeError) as error:
        raise ModelLoadError(f"the draft's {HEAD_ROWS_FILE} is unreadable ({error}): delete it to use the whole head") from error


def context_length_of(model) -> int:
    config = model.config
    for attribute in ("max_position_embeddings", "n_positions", "seq_length"):
        value = getattr(config, attribute, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2048


PRECISIONS: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}
"""The weights' precision a user can pick. In both the target's forward is made batch-invariant
(specviz.models.invariance), so a verify rounds exactly like a step and greedy lanes are identical
by construction (measured per target at load). bfloat16: half the bytes per step; fast only where
the CPU or GPU has native bf16 matmuls. float32: exact arithmetic to the last bit of float32; on a
CPU its linear layers run oneDNN's packed kernels, which make a verify about as cheap as a step."""
PRECISION_ENV = "SPECVIZ_PRECISION"  # float32 or bfloat16: the host's default instead of the device's


# oneDNN ISA limits (ONEDNN_MAX_CPU_ISA) below the first with bf16 dot products
ONEDNN_ISAS_WITHOUT_BF16 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}


def cpu_has_native_bf16() -> bool:
    """AMX or AVX512-BF16, and no host limit that keeps torch from them: where bf16 matmuls run
    several times faster than float32. Without them (AVX2 only) torch emulates bf16 and a 4-token
    verify costs ~3 steps (measured). The limits a host sets count, as torch obeys them:
    ATEN_CPU_CAPABILITY (torch's own kernels) and ONEDNN_MAX_CPU_ISA (its matmuls)."""
    if not cpu_supports("_is_amx_tile_supported", "_is_avx512_bf16_supported"):
        return False
    if not torch.backends.cpu.get_cpu_capability().upper().startswith(("AVX512", "AMX")):
        return False
    return os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").strip().upper() not in ONEDNN_ISAS_WITHOUT_BF16


def runs_emulated(model: torch.nn.Module) -> bool:
    """Whether a model's precision runs in software here: 16-bit on a CPU without native bf16."""
    parameter = next(model.parameters())
    return parameter.device.type == "cpu" and parameter.dtype != torch.float32 and not cpu_has_native_bf16()


def default_precision(device: torch.device) -> str:
    """The precision a run gets when none is asked for (see the README's bench for the numbers):
    $SPECVIZ_PRECISION if set; bf16 on CUDA and on CPUs with native bf16; else float32."""
    from_env = os.environ.get(PRECISION_ENV, "").strip()
    if from_env:
        return from_env
    if device.type == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "bfloat16" if cpu_has_native_bf16() else "float32"


def choose_device_and_dtype(device: str | None = None, precision: str | None = None) -> tuple[torch.device, torch.dtype]:
    """The device (CUDA when present) and the precision asked for, or the device's default."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    precision = precision or default_precision(device)
    if precision == "float16" and device.type == "cuda":  # older cards: their fast 16-bit type
        return device, torch.float16
    check_precision(precision)
    return device, PRECISIONS[precision]


def check_precision(precision: str) -> None:
    """A precision a user may ask for, or a message naming the ones there are."""
    if precision not in PRECISIONS:
        raise ModelLoadError(f"unknown precision {precision!r}; choose one of: {', '.join(PRECISIONS)}")


def precision_name(dtype: torch.dtype) -> str:
    """float32, bfloat16, float16: the name a run reports beside its timings."""
    return str(dtype).removeprefix("torch.")


def default_drafter_for(pair_name: str | None) -> str:
    """The page's and the API's drafter when none is named, by pair name ("custom" and unknown names
    get the catalogue's default; the unknown ones are refused later, where the pair loads)."""
    preset = PRESETS.get(pair_name or DEFAULT_PRESET)
    return preset.unnamed_drafter() if preset is not None else DEFAULT_DRAFTER


def resolve_pair(preset: str | None = None, target: str | None = None, draft: str | None = None) -> PairPreset:
    """A preset by name, or two ids; both ids are needed for a custom pair."""
    if target or draft:
        if not (target and draft):
            raise ModelLoadError("a custom pair needs both a target and a draft model id")
        return PairPreset("custom", target.strip(), draft.strip(), "custom pair")
    name = preset or DEFAULT_PRESET
    if name not in PRESETS:
        raise ModelLoadError(f"unknown model pair {name!r}; choose one of: {', '.join(PRESETS)}")
    return PRESETS[name]


def load_tokenizer(model_id: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_id, local_files_only=is_local(model_id))
    except Exception as error:  # transformers raises OSError, ValueError, HTTP errors...
        raise ModelLoadError(describe_load_failure(model_id, error)) from error


def is_local(model_id: str) -> bool:
    return Path(model_id).exists()


def describe_load_failure(model_id: str, error: Exception) -> str:
    if is_local(model_id):
        return f"could not load the model folder {model_id!r}: {error}"
    if looks_like_path(model_id):
        return f"no model folder at {model_id!r}"
    return (
        f"could not load {model_id!r} from the Hugging Face Hub: check the id, and note that hub "
        f"models need network access (the embedded and tiny-code pairs work offline). Details: {type(error).__name__}: {error}"
    )


def looks_like_path(model_id: str) -> bool:
    return model_id.startswith((".", "/", "~")) or model_id.count("/") > 1


def shares_target_tokenizer(draft_id: str) -> bool:
    """A local draft folder without tokenizer files uses its target's: the shipped draft keeps none
    (3.5 MB of assets/ the head's weights need), so there is nothing to compare."""
    folder = Path(draft_id)
    return folder.is_dir() and not any((folder / name).exists() for name in ("tokenizer.json", "tokenizer_config.json"))


def check_tokenizers(target_id: str, target_tokenizer, draft_id: str, draft_tokenizer) -> None:
    """Speculative decoding compares token ids across models: the vocabularies must agree."""
    if target_tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        raise IncompatiblePairError(
            f"the target {target_id!r} ({len(target_tokenizer)} tokens, {type(target_tokenizer).__name__}) and "
            f"the draft {draft_id!r} ({len(draft_tokenizer)} tokens, {type(draft_tokenizer).__name__}) use "
            f"different vocabularies; speculative decoding needs one tokenizer shared by both models"
        )


def load_model(model_id: str, device: torch.device, dtype: torch.dtype, spread: bool = False):
    """from_pretrained in eval mode; `spread` lets accelerate place a too-big target across devices."""
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": dtype, "local_files_only": is_local(model_id)}
    if spread and device.type == "cuda":
        kwargs["device_map"] = "auto"  # accelerate fills the GPU first, then CPU memory
    try:
        model = AutoModelForCausalLM.from_pretrained(model_id, **kwargs)
    except torch.OutOfMemoryError as error:
        raise ModelLoadError(f"out of memory loading {model_id!r}: pick a smaller pair") from error
    except Exception as error:
        raise ModelLoadError(describe_load_failure(model_id, error)) from error
    if "device_map" not in kwargs:
        model = model.to(device)
    return model.eval()


def check_hub_access(model_ids: list[str], timeout_s: float = 3.0) -> None:
    """Fail in seconds, not minutes, when hub models are needed and the hub cannot be reached.

    Without network, from_pretrained retries for about a minute per model before giving up.
    Local folders, models already in the hub cache, offline mode and proxies skip the check.
    """
    import os

    from huggingface_hub import constants, try_to_load_from_cache

    remote = [model_id for model_id in model_ids if not is_local(model_id) and not looks_like_path(model_id)]
    proxied = any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"))
    if not remote or constants.HF_HUB_OFFLINE or proxied:
        return
    uncached = []
    for model_id in remote:
        try:
            cached = try_to_load_from_cache(model_id, "config.json")
        except Exception:  # noqa: BLE001 — a malformed id: from_pretrained will explain it
            cached = None
        if not isinstance(cached, str):
            uncached.append(model_id)
    if not uncached:
        return
    if not convert.hub_reachable(timeout_s):
        raise ModelLoadError(
            f"no network: cannot download {', '.join(map(repr, uncached))} from the Hugging Face Hub "
            f"({convert.hub_host()[0]} is unreachable); the embedded and tiny-code pairs work offline"
        )


# Loaded pairs, least recently used first; at most policy.max_cached_pairs, the default pinned.
_cache: OrderedDict[tuple, ModelPair] = OrderedDict()
_cache_lock = threading.Lock()  # guards _cache, held only for a moment: hits never wait for a load
_load_lock = threading.Lock()  # one load at a time bounds memory; callers of one pair wait for it


def load_pair(
    preset: str | None = None,
    target: str | None = None,
    draft: str | None = None,
    device: str | None = None,
    policy: hosting.HostingPolicy | None = None,
    precision: str | None = None,
    int8_drafters: bool | None = None,
) -> ModelPair:
    """Load (once while it stays cached) a preset or a custom pair, checking that the tokenizers agree.

    A custom pair's ids pass the hosting policy first (the environment's, unless given); presets
    are the operator's choice and skip it. `int8_drafters` None: the preset's choice (on a CPU).
    """
    spec = resolve_pair(preset, target, draft)
    policy = policy or hosting.HostingPolicy.from_env()
    if spec.name == "custom":
        hosting.check_model_id(spec.target_id, policy)
        hosting.check_model_id(spec.draft_id, policy)
    torch_device, dtype = choose_device_and_dtype(device, precision)
    int8 = (spec.int8_drafters if int8_drafters is None else int8_drafters) and int8_available(torch_device)
    key = (spec.name, spec.target_id, spec.draft_id, str(torch_device), dtype, int8)
    pair = find_cached_pair(key)
    if pair is not None:
        return pair
    with _load_lock:
        pair = find_cached_pair(key)  # another caller may have loaded it while this one waited
        if pair is None:
            evict_pairs(keep=policy.max_cached_pairs - 1)  # free memory before the new pair needs it
            pair = build_pair(spec, torch_device, dtype, int8)
            with _cache_lock:
                _cache[key] = pair
        return pair


def find_cached_pair(key: tuple) -> ModelPair | None:
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)  # most recently used
        return _cache.get(key)


def is_pinned(key: tuple) -> bool:
    return key[0] == DEFAULT_PRESET  # the pair most visitors use is never evicted


def evict_pairs(keep: int) -> None:
    """Drop least recently used pairs until at most `keep` remain (pinned ones always stay)."""
    with _cache_lock:
        evictable = [key for key in _cache if not is_pinned(key)]
        evicted = [_cache.pop(key) for key in evictable[: max(0, len(_cache) - keep)]]
    if not evicted:
        return
    # a run still using an evicted pair keeps it alive until it ends; then the collector frees it
    del evicted
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def build_pair(spec: PairPreset, device: torch.device, dtype: torch.dtype, int8_drafters: bool = False) -> ModelPair:
    target_id = spec.resolved_target_id()
    check_hub_access([target_id, spec.draft_id])
    target_tokenizer = load_tokenizer(target_id)
    if not shares_target_tokenizer(spec.draft_id):
        check_tokenizers(target_id, target_tokenizer, spec.draft_id, load_tokenizer(spec.draft_id))
    target_model = load_model(target_id, device, dtype, spread=True)
    draft_model = load_model(spec.draft_id, device, dtype)
    if shares_target_tokenizer(spec.draft_id) and draft_model.config.vocab_size != target_model.config.vocab_size:
        raise IncompatiblePairError(
            f"the draft folder {spec.draft_id!r} has no tokenizer of its own and its vocabulary "
            f"({draft_model.config.vocab_size} tokens) is not the target's ({target_model.config.vocab_size}); "
            f"speculative decoding needs one tokenizer shared by both models"
        )
    pair = ModelPair.from_models(
        target_model, draft_model, target_tokenizer, name=spec.name, draft_head_rows=read_head_rows(spec.draft_id)
    )
    if spec.head_dir is not None and (spec.head_dir / "config.json").exists():
        try:
            pair.head, pair.head_rows = load_head(spec.head_dir, pair.device, dtype)
        except Exception as error:  # a damaged head costs the head drafter only, never the pair
            pair.head_error = f"the head drafter's folder {spec.head_dir.name}/ could not be loaded ({type(error).__name__}: {error})"
    prepare_drafters(pair, int8_drafters)
    return pair


def prepare_drafters(pair: ModelPair, int8: bool) -> None:
    """Build the drafters' row scorers once, and with `int8` turn the draft, the head and both
    scorers into int8 layers (specviz.models.int8). The target is never touched: the baseline
    lane and the verify run exactly as loaded."""
    if pair.draft is not None and pair.draft_head_rows is not None:
        pair.draft_scorer = RowScorer.over_output_of(pair.draft, pair.draft_head_rows, pair.vocab_size)
    if pair.head is not None:
        pair.head_scorer = RowScorer.over_output_of(pair.target, pair.head_rows, pair.vocab_size)
    if not int8:
        return
    for module in (pair.draft, pair.head):
        if module is not None:
            quantize_linears(module)
    for scorer in (pair.draft_scorer, pair.head_scorer):
        if scorer is not None:
            scorer.to_int8()
    pair.int8_drafters = True
