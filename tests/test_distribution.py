"""End to end: speculative sampling's output follows the target's exact distribution.

A tiny random pair over 16 tokens (so every cell fills), thousands of seeds, a chi-square test
of the empirical joint of generated tokens against the joint computed exactly from the target's
logits by enumerating every prefix. With γ = 2 and max_new_tokens = 4, token 1 comes from the
target's prefill and tokens 2-3 from the first round's drafts, its correction, or the next
round after an early rejection, so every path of the rejection rule is exercised.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

import specviz.decoding.sampling
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import speculative_decode
from specviz.analysis.trace import Trace
from tests.test_sampling import SIGNIFICANCE, chi_square_p_value, p_instead_of_residual
from tests.tiny_models import tiny_pair

VOCAB = 16
PROMPT_IDS = [5, 9, 3]
NUM_RUNS = 4000


def distribution_pair():
    return tiny_pair("gpt2", vocab_size=VOCAB, noise=0.15, init_std=0.5, hidden=32)


def warped_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Reference warping, straight from transformers' warpers (independent of specviz.decoding.sampling)."""
    logits = logits.double()
    if temperature != 1.0:
        logits = TemperatureLogitsWarper(temperature)(None, logits)
    if top_k:
        logits = TopKLogitsWarper(top_k)(None, logits)
    if top_p < 1.0:
        logits = TopPLogitsWarper(top_p)(None, logits)
    return torch.softmax(logits, -1)


@torch.no_grad()
def exact_joint_of_three(pair, temperature: float, top_k: int, top_p: float, prompt_ids=PROMPT_IDS) -> np.ndarray:
    """p(t1, t2, t3 | prompt) as a (V, V, V) array, by full forwards over every 2-token prefix."""
    model = pair.target
    prefix = torch.tensor(prompt_ids)
    first = torch.arange(VOCAB).repeat_interleave(VOCAB)  # (V²,)
    second = torch.arange(VOCAB).repeat(VOCAB)  # (V²,)
    sequences = torch.cat([prefix.expand(VOCAB * VOCAB, -1), first[:, None], second[:, None]], dim=1)  # (V², n+2)
    logits = model(input_ids=sequences).logits[..., :VOCAB]  # (V², n+2, V)
    n = len(prompt_ids)
    p1 = warped_probs(logits[0, n - 1 : n], temperature, top_k, top_p)[0]  # (V,)
    p2 = warped_probs(logits[::VOCAB, n], temperature, top_k, top_p)  # (V, V): row t1
    p3 = warped_probs(logits[:, n + 1], temperature, top_k, top_p).view(VOCAB, VOCAB, VOCAB)
    joint = p1[:, None, None] * p2[:, :, None] * p3  # (V, V, V)
    assert joint.sum().item() == pytest.approx(1.0, abs=1e-9)
    return joint.numpy()


def sample_runs(pair, config_kwargs: dict, num_runs: int, max_rejection_share: float = 0.9,
                prompt_ids=PROMPT_IDS, min_rejection_share: float = 0.2) -> np.ndarray:
    """First three generated tokens of num_runs seeded speculative runs, as a (num_runs, 3) array."""
    tokens, num_rejections = [], 0
    for seed in range(num_runs):
        config = DecodeConfig(gamma=2, max_new_tokens=4, seed=seed, stop_at_eos=False, **config_kwargs)
        trace = Trace.from_events(speculative_decode(pair, prompt_ids, config))
        assert trace.num_tokens == 4
        tokens.append(trace.token_ids[:3])
        num_rejections += any(event.next_kind == "resample" for event in trace.rounds)
    # The test exercises the rejection rule only if the draft is often wrong (and often right).
    assert min_rejection_share * num_runs < num_rejections < max_rejection_share * num_runs
    return np.array(tokens)


def check_against_target(tokens: np.ndarray, joint: np.ndarray) -> list[float]:
    p_values = [
        chi_square_p_value(tokens[:, 0] * VOCAB + tokens[:, 1], joint.sum(axis=2).ravel()),  # (t1, t2)
        chi_square_p_value(tokens[:, 1] * VOCAB + tokens[:, 2], joint.sum(axis=0).ravel()),  # (t2, t3)
        chi_square_p_value(tokens[:, 2], joint.sum(axis=(0, 1))),  # t3
    ]
    return p_values


SETTINGS = {
    "temperature-1": dict(temperature=1.0, top_k=0, top_p=1.0),
    "temperature-0.7-top-k-top-p": dict(temperature=0.7, top_k=10, top_p=0.9),
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("setting", SETTINGS)
def test_speculative_output_follows_target_distribution(setting):
    pair = distribution_pair()
    kwargs = SETTINGS[setting]
    joint = exact_joint_of_three(pair, **kwargs)
    if kwargs["top_k"]:
        # the warping must actually remove tokens for this case to test anything
        assert (joint.sum(axis=(1, 2)) == 0).any()
    tokens = sample_runs(pair, kwargs, NUM_RUNS)
    p_values = check_against_target(tokens, joint)
    assert min(p_values) > SIGNIFICANCE, p_values


@pytest.mark.timeout(120)
def test_end_to_end_check_catches_a_wrong_residual(monkeypatch):
    """The same check, with the residual replaced by p, fails: the test above has teeth."""
    pair = distribution_pair()
    kwargs = SETTINGS["temperature-1"]
    joint = exact_joint_of_three(pair, **kwargs)
    monkeypatch.setattr(specviz.decoding.sampling, "residual_distribution", p_instead_of_residual)
    tokens = sample_runs(pair, kwargs, 1200)
    assert min(check_against_target(tokens, joint)) < SIGNIFICANCE


@pytest.mark.timeout(180)
def test_a_draft_restricted_to_some_head_rows_keeps_the_output_exact():
    """The head_rows drafter (q = 0 outside a subset of the vocabulary) is still exact."""
    from dataclasses import replace

    pair = replace(distribution_pair(), draft_head_rows=torch.arange(0, VOCAB - 4))  # the last 4 ids never drafted
    kwargs = SETTINGS["temperature-1"]
    joint = exact_joint_of_three(pair, **kwargs)
    # A draft that can never propose some ids is rejected more often: still some acceptances.
    tokens = sample_runs(pair, kwargs, NUM_RUNS, max_rejection_share=0.98)
    assert (tokens >= VOCAB - 4).any(), "those ids can only come from the target's corrections"
    assert min(check_against_target(tokens, joint)) > SIGNIFICANCE


@pytest.mark.timeout(180)
def test_a_draft_that_stops_when_unsure_keeps_the_output_exact():
    """The confidence stop changes how many tokens a round drafts, never which ones are kept."""
    pair = distribution_pair()
    kwargs = {**SETTINGS["temperature-1"], "draft_confidence": 0.5}
    first = Trace.from_events(speculative_decode(pair, PROMPT_IDS, DecodeConfig(gamma=2, max_new_tokens=4, **kwargs)))
    joint = exact_joint_of_three(pair, 1.0, 0, 1.0)
    tokens = sample_runs(pair, kwargs, NUM_RUNS)
    assert first.rounds and all(token.draft_confidence is not None for e in first.rounds for token in e.drafted)
    assert min(check_against_target(tokens, joint)) > SIGNIFICANCE
