"""Greedy speculative decoding must reproduce the target's own greedy output, token for token.

The reference is twofold: specviz's own autoregressive baseline, and Hugging Face's assisted
generation (`generate(..., assistant_model=draft)`) on the same tiny random pair. Every preset's
architecture class is covered (GPT-2, GPT-NeoX, Llama, Qwen2), in float32.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from specviz.models.pairs import ModelPair
from specviz.analysis.trace import Trace
from tests.tiny_models import ARCHITECTURES, make_model, random_prompts, tiny_pair

GAMMAS = (1, 2, 3, 5, 8)
NUM_NEW = 20


def greedy_ids(pair, prompt_ids, gamma=None, **overrides):
    config = DecodeConfig(gamma=gamma or 1, temperature=0.0, max_new_tokens=NUM_NEW, **overrides)
    decode = autoregressive_decode if gamma is None else speculative_decode
    return Trace.from_events(decode(pair, prompt_ids, config))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_greedy_speculative_equals_greedy_baseline(arch):
    pair = tiny_pair(arch)
    prompts = random_prompts(8, pair.vocab_size, seed=ARCHITECTURES.index(arch), max_len=16)
    num_rejections = 0
    for prompt_ids in prompts:
        baseline = greedy_ids(pair, prompt_ids, stop_at_eos=False)
        assert baseline.num_tokens == NUM_NEW
        for gamma in GAMMAS:
            speculative = greedy_ids(pair, prompt_ids, gamma, stop_at_eos=False)
            assert speculative.token_ids == baseline.token_ids, (arch, prompt_ids, gamma)
            num_rejections += sum(event.num_accepted < event.gamma for event in speculative.rounds)
    # The comparison only means something if the draft is wrong some of the time.
    assert num_rejections > 0


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_greedy_speculative_equals_hf_assisted_generation(arch):
    pair = tiny_pair(arch)
    prompts = random_prompts(4, pair.vocab_size, seed=7, max_len=10)
    for prompt_ids in prompts:
        input_ids = torch.tensor([prompt_ids])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hf_output = pair.target.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                assistant_model=pair.draft,
                do_sample=False,
                max_new_tokens=NUM_NEW,
                num_assistant_tokens=4,
                num_assistant_tokens_schedule="constant",
            )
        hf_ids = hf_output[0, len(prompt_ids) :].tolist()
        # Hugging Face stops after the config's EOS, as specviz does with stop_at_eos.
        for gamma in (1, 4):
            speculative = greedy_ids(pair, prompt_ids, gamma)
            assert speculative.token_ids == hf_ids, (arch, prompt_ids, gamma)
        assert greedy_ids(pair, prompt_ids).token_ids == hf_ids


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_identical_draft_accepts_every_token(arch, temperature):
    target = tiny_pair(arch).target
    pair = ModelPair.from_models(target, copy.deepcopy(target))
    for seed, prompt_ids in enumerate(random_prompts(3, pair.vocab_size, seed=3)):
        config = DecodeConfig(gamma=4, temperature=temperature, max_new_tokens=NUM_NEW, seed=seed, stop_at_eos=False)
        trace = Trace.from_events(speculative_decode(pair, prompt_ids, config))
        assert trace.num_tokens == NUM_NEW
        assert trace.num_drafted > 0
        assert trace.acceptance_rate == 1.0
        # p == q: min(1, p/q) is 1 up to float rounding between a 1-token step and a verify.
        for event in trace.rounds:
            assert event.next_kind == "bonus"
            for token in event.drafted:
                assert token.accepted and token.accept_prob == pytest.approx(1.0, abs=1e-4)


def test_greedy_exactness_with_a_one_layer_draft():
    """A structurally different draft (1 layer, other weights) still gives the target's greedy output."""
    target = tiny_pair("gpt_neox").target
    draft = make_model("gpt_neox", seed=5, num_layers=1, hidden=32)
    pair = ModelPair.from_models(target, draft)
    for prompt_ids in random_prompts(3, pair.vocab_size, seed=11):
        baseline = greedy_ids(pair, prompt_ids, stop_at_eos=False)
        for gamma in (2, 5):
            assert greedy_ids(pair, prompt_ids, gamma, stop_at_eos=False).token_ids == baseline.token_ids
