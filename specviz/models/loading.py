"""Loading a pair: the models and tokenizer from transformers, the checks that they fit together,
and the cache that keeps a loaded pair (at most SPECVIZ_MAX_PAIRS, the default pinned; see
specviz.models.hosting), shared by every run and every visitor.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import threading
from collections import OrderedDict
from pathlib import Path

import torch
from huggingface_hub import constants, try_to_load_from_cache
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

from specviz.models import compact, convert, gguf_rows, hosting
from specviz.models.draft_head import load_head
from specviz.models.errors import IncompatiblePairError, ModelLoadError
from specviz.models.int8 import int8_available, quantize_linears
from specviz.models.pairs import ModelPair, RowScorer, refuse_recurrent
from specviz.models.precision import choose_device_and_dtype
from specviz.models.presets import DEFAULT_PRESET, PairPreset, resolve_pair
from specviz.models.slots import slots_wanted

HEAD_ROWS_FILE = "head_rows.json"  # a draft's most useful output rows (specviz.training.distil writes it)
ONE_TOKENIZER = "speculative decoding needs one tokenizer shared by both models"


def read_head_rows(draft_id: str) -> torch.Tensor | None:
    """The draft folder's head_rows.json (sorted token ids), if it has one."""
    path = Path(draft_id) / HEAD_ROWS_FILE
    if not path.is_file():
        return None
    try:
        return torch.tensor(sorted({int(row) for row in json.loads(path.read_text())}), dtype=torch.long)
    except (ValueError, TypeError) as error:
        raise ModelLoadError(f"the draft's {HEAD_ROWS_FILE} is unreadable ({error}): delete it to use the whole head") from error


# Never a model's own code from its repository: transformers would otherwise ask "run the custom code? [y/N]" on
# a terminal (15 s, and a "y" runs it), and a server's visitor could name any repository.
NO_REMOTE_CODE = {"trust_remote_code": False}


def load_tokenizer(model_id: str):
    try:
        return AutoTokenizer.from_pretrained(model_id, local_files_only=is_local(model_id), **NO_REMOTE_CODE)
    except Exception as error:  # transformers raises OSError, ValueError, HTTP errors...
        raise ModelLoadError(describe_load_failure(model_id, error)) from error


def is_local(model_id: str) -> bool:
    return Path(model_id).exists()


def describe_load_failure(model_id: str, error: Exception) -> str:
    if "trust_remote_code" in str(error):  # transformers' words would tell the user to pass a flag specviz has not
        return (f"{model_id!r} needs code of its own from its repository (transformers' trust_remote_code), which "
                f"specviz never runs: pick a model transformers supports as it is installed")
    if is_local(model_id):
        return f"could not load the model folder {model_id!r}: {error}"
    if looks_like_path(model_id):
        return f"no model folder at {model_id!r}"
    return (f"could not load {model_id!r} from the Hugging Face Hub: check the id, and note that hub models need "
            f"network access (the smollm2-135m and tiny-code pairs work offline). Details: "
            f"{type(error).__name__}: {error}")


def looks_like_path(model_id: str) -> bool:
    return model_id.startswith((".", "/", "~")) or model_id.count("/") > 1


def shares_target_tokenizer(draft_id: str) -> bool:
    """A local draft folder without tokenizer files uses its target's: the shipped draft keeps none
    (room in assets/ the head's weights need), so there is nothing to compare."""
    folder = Path(draft_id)
    return folder.is_dir() and not any((folder / name).exists() for name in ("tokenizer.json", "tokenizer_config.json"))


def check_tokenizers(target_id: str, target_tokenizer, draft_id: str, draft_tokenizer) -> None:
    """Speculative decoding compares token ids across models: the vocabularies must agree."""
    if target_tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        raise IncompatiblePairError(
            f"the target {target_id!r} ({len(target_tokenizer)} tokens, {type(target_tokenizer).__name__}) and the "
            f"draft {draft_id!r} ({len(draft_tokenizer)} tokens, {type(draft_tokenizer).__name__}) use different "
            f"vocabularies; {ONE_TOKENIZER}")


def refuse_before_download(role: str, model_id: str) -> None:
    """A model no round can serve is refused from its config, before its weights download: one that is no causal
    LM (transformers' own refusal lists some 400 config classes), or a recurrent one (pairs.refuse_recurrent). A
    config that does not load is left to load_model to report, with the model's own error."""
    try:
        config = AutoConfig.from_pretrained(model_id, local_files_only=is_local(model_id), **NO_REMOTE_CODE)
    except Exception:  # noqa: BLE001
        return
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise ModelLoadError(
            f"the {role} {model_id!r} is no causal language model (a {config.model_type} model, which transformers "
            f"does not load as one that writes text left to right, as speculative decoding needs): pick one such as "
            f"{hosting.EXAMPLE_ID}")
    refuse_recurrent(role, MODEL_FOR_CAUSAL_LM_MAPPING[type(config)], config)


def load_model(model_id: str, device: torch.device, dtype: torch.dtype, spread: bool = False):
    """from_pretrained in eval mode; `spread` lets accelerate place a too-big target across devices."""
    kwargs = {"dtype": dtype, "local_files_only": is_local(model_id), **NO_REMOTE_CODE}
    if spread and device.type == "cuda":
        kwargs["device_map"] = "auto"  # accelerate fills the GPU first, then CPU memory
    try:
        if compact.is_compact(model_id):  # a shipped folder with int8/int4 weights
            model = compact.load_compact(model_id, dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(model_id, **kwargs)
    except torch.OutOfMemoryError as error:
        raise ModelLoadError(f"out of memory loading {model_id!r}: pick a smaller pair") from error
    except Exception as error:
        raise ModelLoadError(describe_load_failure(model_id, error)) from error
    if "device_map" not in kwargs:
        model = model.to(device)
    return model.eval()


def check_hub_access(model_ids: list[str]) -> None:
    """Fail in seconds, not minutes (from_pretrained's retries), when hub models are needed and the hub
    cannot be reached. Local folders, models already in the hub cache, offline mode and proxies skip it."""
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
    if uncached and not convert.hub_reachable():
        raise ModelLoadError(f"no network: cannot download {', '.join(map(repr, uncached))} from the Hugging Face "
                             f"Hub ({convert.hub_host()[0]} is unreachable); the smollm2-135m and tiny-code pairs "
                             f"work offline")


# Loaded pairs, least recently used first; at most policy.max_cached_pairs, the default pinned.
_cache: OrderedDict[tuple, ModelPair] = OrderedDict()
_cache_lock = threading.Lock()  # guards _cache, held only for a moment: hits never wait for a load
_load_lock = threading.Lock()  # one load at a time bounds memory; callers of one pair wait for it


def load_pair(preset: str | None = None, target: str | None = None, draft: str | None = None,
              device: str | None = None, policy: hosting.HostingPolicy | None = None, precision: str | None = None,
              int8_drafters: bool | None = None, head: str | None = None) -> ModelPair:
    """Load (once while it stays cached) a preset or a custom pair, checking that the tokenizers agree.
    A custom pair's ids pass the hosting policy first (the environment's, unless given); presets
    are the operator's choice and skip it. `int8_drafters` None: the preset's choice (on a CPU).
    `head`: a head drafter's folder instead of the pair's own (one trained elsewhere, to bench it)."""
    spec = resolve_pair(preset, target, draft)
    if head:
        if not (Path(head) / "config.json").is_file():
            raise ModelLoadError(f"{head} is not a head drafter's folder (it has no config.json)")
        spec = dataclasses.replace(spec, head_dir=Path(head))
    policy = policy or hosting.HostingPolicy.from_env()
    if spec.name == "custom":
        hosting.check_model_id(spec.target_id, policy)
        hosting.check_model_id(spec.draft_id, policy)
    torch_device, dtype = choose_device_and_dtype(device, precision)
    int8 = (spec.int8_drafters if int8_drafters is None else int8_drafters) and int8_available(torch_device)
    # whether the target runs in slots is fixed at load (specviz.models.slots): a switch flipped since loads anew
    key = (spec.name, spec.target_id, spec.draft_id, str(spec.head_dir), str(torch_device), dtype, int8,
           slots_wanted())
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


def evict_pairs(keep: int) -> None:
    """Drop least recently used pairs until at most `keep` remain (pinned ones always stay)."""
    with _cache_lock:
        evictable = [key for key in _cache if key[0] != DEFAULT_PRESET]  # the pair most visitors use stays
        evicted = [_cache.pop(key) for key in evictable[: max(0, len(_cache) - keep)]]
    if not evicted:
        return
    # a run still using an evicted pair keeps it alive until it ends; then the collector frees it
    del evicted
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def avoid_per_shape_attention_plans(device: torch.device) -> None:
    """On CUDA, keep PyTorch's SDPA off cuDNN's attention: cuDNN builds a slow execution plan for each new
    shape, and decoding meets a new key count at every step of the head and the draft model, and every
    KEY_BLOCK keys of the target. SDPA then picks FlashAttention, the memory-efficient kernel or its math
    path, none of which builds a plan. Process-wide, as the flag is: every lane (transformers' generate()
    too) runs under the same choice."""
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


def build_pair(spec: PairPreset, device: torch.device, dtype: torch.dtype, int8_drafters: bool = False) -> ModelPair:
    avoid_per_shape_attention_plans(device)
    target_id = spec.resolved_target_id()
    check_hub_access([target_id, spec.draft_id])
    target_tokenizer = load_tokenizer(target_id)
    for role, model_id in (("target", target_id), ("draft", spec.draft_id)):
        refuse_before_download(role, model_id)
    if not shares_target_tokenizer(spec.draft_id):
        check_tokenizers(target_id, target_tokenizer, spec.draft_id, load_tokenizer(spec.draft_id))
    target_model = load_model(target_id, device, dtype, spread=True)
    if Path(target_id) == convert.converted_dir():  # float32 on a CPU: its layers may read the file's blocks
        gguf_rows.attach_blocks(target_model, convert.converted_dir(), convert.source_gguf())
    draft_model = load_model(spec.draft_id, device, dtype)
    if shares_target_tokenizer(spec.draft_id) and draft_model.config.vocab_size != target_model.config.vocab_size:
        raise IncompatiblePairError(f"the draft folder {spec.draft_id!r} has no tokenizer of its own and its "
                                    f"vocabulary ({draft_model.config.vocab_size} tokens) is not the target's "
                                    f"({target_model.config.vocab_size}); {ONE_TOKENIZER}")
    pair = ModelPair.from_models(target_model, draft_model, target_tokenizer, name=spec.name,
                                 draft_head_rows=read_head_rows(spec.draft_id))
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
