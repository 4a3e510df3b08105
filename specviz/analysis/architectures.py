"""Hub architectures as tiny random models, and what specviz makes of each on this machine.

A visitor may name any causal LM on the hub. Whether slots serve it (greedy lanes exact by construction), it
runs as transformers computes it (models.invariance.why_not_slots: not guaranteed, and said), or it is refused
(models.pairs.refuse_recurrent: no round can serve it) is decided from the model's class and config alone.
`check_architectures` builds a tiny random model of each kind listed here on a device, in a precision, and
checks that its verdict is the one expected and that greedy speculative decoding writes the target alone's
tokens: selfcheck's "architectures" phase (on a lent GPU, where CUDA graphs capture every one of them) and the
tests' models of these kinds. Random weights, no download: what holds here is the code path, not a model's text.
"""

from __future__ import annotations

import copy
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from specviz.analysis.trace import Trace
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from specviz.decoding.reference import reference_decode
from specviz.models.errors import ModelLoadError
from specviz.models.pairs import ModelPair

VOCAB = 128
TINY = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
        "initializer_range": 0.3,  # wider than transformers' default: peaked logits, clear greedy winners
        "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}
# Expected verdicts: "exact" (slots), "not guaranteed" (as transformers computes it), "refused" (at load).
EXACT, NOT_GUARANTEED, REFUSED = "exact", "not guaranteed", "refused"
# model_type → (what its tiny config needs beyond TINY, the verdict expected)
ARCHITECTURES: dict[str, tuple[dict, str]] = {
    "llama": ({}, EXACT), "qwen2": ({}, EXACT), "qwen3": ({"head_dim": 16}, EXACT),
    "mistral": ({"sliding_window": None}, EXACT), "gemma": ({"head_dim": 16}, EXACT), "phi3": ({}, EXACT),
    "phi": ({}, EXACT), "olmo2": ({}, EXACT), "cohere": ({}, EXACT), "smollm3": ({}, EXACT),
    "granite": ({"attention_multiplier": 0.05, "logits_scaling": 2.0, "residual_multiplier": 0.5,
                 "embedding_multiplier": 3.0}, EXACT),
    "starcoder2": ({}, EXACT), "gpt_bigcode": ({}, EXACT), "gpt2": ({}, EXACT), "gpt_neox": ({}, EXACT),
    "opt": ({"word_embed_proj_dim": 64, "ffn_dim": 128}, EXACT),
    "gemma2": ({"head_dim": 16}, NOT_GUARANTEED),  # soft-capped attention
    "falcon": ({}, NOT_GUARANTEED),  # attention in its own code, outside transformers' interface
    "stablelm": ({}, NOT_GUARANTEED),  # the same: its layers do not pass the call's arguments to attention
    "mixtral": ({"num_local_experts": 4, "num_experts_per_tok": 2}, NOT_GUARANTEED),  # experts
    "mamba": ({"state_size": 8, "expand": 2}, REFUSED),  # a recurrent state
    "lfm2": ({"layer_types": ["conv", "full_attention"]}, REFUSED),  # convolution layers keep a state
}


def tiny_model(arch: str, seed: int = 0) -> torch.nn.Module:
    """A 2-layer random causal LM of this model_type (ARCHITECTURES), float32, eval mode; the same seed gives
    the same weights. Attributes are set one by one, so each config maps its own names (GPT-2's n_embd, …)."""
    config = AutoConfig.for_model(arch)
    for name, value in {**TINY, **ARCHITECTURES[arch][0]}.items():
        setattr(config, name, value)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config).float().eval()


def noisy_copy(model: torch.nn.Module, noise: float, seed: int = 1) -> torch.nn.Module:
    """The model with N(0, noise²) added to every weight: a draft that mostly agrees with it (the tests' too)."""
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in draft.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * noise)
    return draft.eval()


def random_prompts(num_prompts: int, vocab_size: int, seed: int = 0, min_len: int = 1, max_len: int = 12) -> list[list[int]]:
    """Prompts of random ids (special ids excluded so no prompt carries an EOS; the tests' too)."""
    generator = torch.Generator().manual_seed(seed)
    prompts = []
    for _ in range(num_prompts):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=generator))
        prompts.append(torch.randint(3, vocab_size, (length,), generator=generator).tolist())
    return prompts


def unchecked(arch: str) -> dict:
    """An architecture's result before any run: its expected verdict, nothing counted yet."""
    return {"arch": arch, "expected": ARCHITECTURES[arch][1], "runs": 0, "parted": 0, "reference_parted": 0,
            "rejections": 0, "reason": ""}


def check_architecture(arch: str, device: torch.device, dtype: torch.dtype, num_prompts: int = 3,
                       max_new_tokens: int = 16) -> dict:
    """One architecture: the verdict it got at load, the one expected, and greedy runs against the target alone, of
    the speculative lane and, where exact, of the reference lane (transformers' assisted generation) too."""
    target = tiny_model(arch)
    draft = noisy_copy(target, 0.03)
    result = unchecked(arch)
    try:
        pair = ModelPair.from_models(target.to(device, dtype), draft.to(device, dtype), name=f"tiny-{arch}")
    except ModelLoadError as error:
        return {**result, "verdict": REFUSED, "reason": str(error)}
    result.update(verdict=EXACT if pair.invariance.exact else NOT_GUARANTEED, reason=pair.invariance.reason)
    config = DecodeConfig(gamma=3, max_new_tokens=max_new_tokens, stop_at_eos=False, drafter="model")
    for prompt_ids in random_prompts(num_prompts, VOCAB, seed=len(arch), min_len=2, max_len=11):
        alone = Trace.from_events(autoregressive_decode(pair, prompt_ids, config)).token_ids
        speculative = Trace.from_events(speculative_decode(pair, prompt_ids, config))
        result["runs"] += 1
        result["parted"] += speculative.token_ids != alone
        result["rejections"] += sum(event.num_accepted < event.gamma for event in speculative.rounds)
        if pair.invariance.exact:  # transformers' own loop over the same forward: promised the same tokens
            result["reference_parted"] += Trace.from_events(reference_decode(pair, prompt_ids, config)).token_ids != alone
    return result


def check_architectures(device: torch.device, dtype: torch.dtype, deadline: float = float("inf")) -> tuple[list[dict], bool]:
    """Every architecture in turn until the deadline: (results, cut). A failure is a finding, kept as one."""
    results = []
    for arch in ARCHITECTURES:
        if time.monotonic() > deadline:
            return results, True
        try:
            results.append(check_architecture(arch, device, dtype))
        except Exception as error:  # noqa: BLE001 — one architecture's crash is what this check is for
            results.append({**unchecked(arch), "verdict": "failed", "reason": f"{type(error).__name__}: {error}"})
    return results, False


def architectures_line(results: list[dict]) -> str:
    """The self-check table's line: how many architectures got their expected verdict, and greedy partings where
    the lanes are promised identical."""
    if not results:
        return "architectures: none checked"
    as_expected = [r for r in results if r["verdict"] == r["expected"]]
    exact = [r for r in results if r["verdict"] == EXACT]
    parted = [f"{r['arch']} {r['parted']}/{r['runs']}" for r in exact if r["parted"]]
    off = [f"{r['arch']} ({r['verdict']}, expected {r['expected']})" for r in results if r["verdict"] != r["expected"]]
    # where a model is not guaranteed, its partings are what "not guaranteed" means: counted apart
    loose = [f"{r['arch']} {r['parted']}/{r['runs']}" for r in results if r["verdict"] == NOT_GUARANTEED and r["parted"]]
    return (f"architectures: {len(as_expected)}/{len(results)} as expected; greedy runs parted where exact: "
            f"{sum(r['parted'] for r in exact)}/{sum(r['runs'] for r in exact)}"
            + (f" ({', '.join(parted)})" if parted else "")
            + f", of the reference lane {sum(r['reference_parted'] for r in exact)}/{sum(r['runs'] for r in exact)}"
            + (f"; where not guaranteed: {', '.join(loose)}" if loose else "")
            + (f"; not as expected: {', '.join(off)}" if off else ""))
