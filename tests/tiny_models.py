"""Tiny random model pairs for the engine tests: CPU, float32, built from configs, no downloads.

One builder per architecture class of the presets (GPT-2, GPT-NeoX, Llama, Qwen2). Weights
are drawn with a wider initialiser than transformers' default so the logits are peaked enough
to give greedy decoding clear winners (no float near-ties between a 1-token step and a
(γ+1)-token verify), and the draft is the target with Gaussian noise added to every weight, so
acceptance is neither ~0 nor ~1.
"""

from __future__ import annotations

import functools

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from specviz.analysis.architectures import noisy_copy, random_prompts  # noqa: F401 (the tests import them from here)
from specviz.models.pairs import ModelPair

ARCHITECTURES = ("gpt2", "gpt_neox", "llama", "qwen2")
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2  # set explicitly: the configs' defaults lie outside a tiny vocab


def make_config(arch: str, vocab_size: int, num_layers: int, hidden: int, context_length: int, init_std: float):
    special = dict(bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)
    if arch == "gpt2":
        return GPT2Config(
            vocab_size=vocab_size, n_positions=context_length, n_embd=hidden, n_layer=num_layers, n_head=2,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=init_std, **special,
        )
    if arch == "gpt_neox":
        return GPTNeoXConfig(
            vocab_size=vocab_size, max_position_embeddings=context_length, hidden_size=hidden,
            num_hidden_layers=num_layers, num_attention_heads=2, intermediate_size=2 * hidden,
            rotary_pct=0.25, initializer_range=init_std, tie_word_embeddings=False, **special,
        )
    if arch == "llama":
        return LlamaConfig(
            vocab_size=vocab_size, max_position_embeddings=context_length, hidden_size=hidden,
            num_hidden_layers=num_layers, num_attention_heads=2, num_key_value_heads=1,
            intermediate_size=2 * hidden, initializer_range=init_std, **special,
        )
    if arch == "qwen2":
        return Qwen2Config(
            vocab_size=vocab_size, max_position_embeddings=context_length, hidden_size=hidden,
            num_hidden_layers=num_layers, num_attention_heads=2, num_key_value_heads=1,
            intermediate_size=2 * hidden, initializer_range=init_std, use_sliding_window=False, **special,
        )
    raise ValueError(f"unknown architecture {arch!r}")


MODEL_CLASSES = {
    "gpt2": GPT2LMHeadModel,
    "gpt_neox": GPTNeoXForCausalLM,
    "llama": LlamaForCausalLM,
    "qwen2": Qwen2ForCausalLM,
}


def make_model(
    arch: str = "gpt2",
    seed: int = 0,
    vocab_size: int = 128,
    num_layers: int = 2,
    hidden: int = 48,
    context_length: int = 128,
    init_std: float = 0.3,
):
    """A random causal LM in float32 eval mode; the same arguments give the same weights."""
    config = make_config(arch, vocab_size, num_layers, hidden, context_length, init_std)
    torch.manual_seed(seed)
    model = MODEL_CLASSES[arch](config).float().eval()
    return model


# Weight noise that turns a target into a draft with middling acceptance (measured: greedy α ≈ 0.4-0.55).
DRAFT_NOISE = {"gpt2": 0.05, "gpt_neox": 0.05, "llama": 0.02, "qwen2": 0.02}


@functools.lru_cache(maxsize=None)
def tiny_pair(
    arch: str = "gpt2",
    seed: int = 0,
    vocab_size: int = 128,
    context_length: int = 128,
    noise: float | None = None,
    init_std: float = 0.3,
    hidden: int = 48,
) -> ModelPair:
    """A 2-layer target and a noisy copy of it as draft, wrapped as the engine wants them (cached).

    The default noise gives a greedy acceptance rate of roughly 0.4-0.6 for every architecture.
    """
    target = make_model(arch, seed, vocab_size, 2, hidden, context_length, init_std)
    draft = noisy_copy(target, DRAFT_NOISE[arch] if noise is None else noise, seed + 1000)
    return ModelPair.from_models(target, draft, name=f"tiny-{arch}")


def make_tokenizer(tokens: list[str]):
    """A word-level PreTrainedTokenizerFast over exactly these tokens (ids in list order)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({token: i for i, token in enumerate(tokens)}, unk_token=tokens[0]))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token=tokens[0], eos_token=tokens[EOS_ID], pad_token=tokens[PAD_ID])
