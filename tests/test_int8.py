"""Drafters in int8 on a CPU (specviz.models.int8, specviz.models.pairs.RowScorer): only the drafter's q
changes, so greedy output stays the target's alone and sampled output keeps its distribution;
the target is never touched."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch import nn

from specviz.analysis.trace import Trace
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from specviz.models.int8 import int8_available, is_quantized, quantize_linears
from specviz.models.loading import prepare_drafters
from specviz.models.pairs import RowScorer, scorer_for
from tests.test_distribution import VOCAB, check_against_target, exact_joint_of_three, sample_runs
from tests.test_head import with_head
from tests.test_sampling import SIGNIFICANCE
from tests.tiny_models import random_prompts, tiny_pair

pytestmark = pytest.mark.skipif(not int8_available(torch.device("cpu")), reason="this torch has no x86/fbgemm int8 engine")


def int8_pair(**tiny_kwargs):
    """A fresh Llama pair (tiny_pair caches its pairs: never quantize those) with a random head,
    draft head rows, and both drafters in int8."""
    pair = copy.deepcopy(with_head(tiny_pair("llama", **tiny_kwargs), scale=3.0))
    rows = torch.arange(2, pair.vocab_size)  # ids 0 and 1 are never drafted
    pair = dataclasses.replace(pair, draft_head_rows=rows, head_rows=rows)
    prepare_drafters(pair, int8=True)
    return pair


def test_every_linear_layer_becomes_int8_and_its_outputs_stay_close():
    layer = nn.Sequential(nn.Linear(64, 96), nn.SiLU(), nn.Linear(96, 32))
    inputs = torch.randn(5, 64)  # (5, 64)
    expected = layer(inputs)  # (5, 32)
    quantized = quantize_linears(copy.deepcopy(layer))
    assert is_quantized(quantized) and not is_quantized(layer)
    assert not any(type(module) is nn.Linear for module in quantized.modules())
    error = (quantized(inputs) - expected).norm() / expected.norm()
    assert 0 < error < 0.05  # rounded, so not equal; but close


def test_the_drafters_and_their_rows_go_int8_and_the_target_stays_as_loaded():
    pair = int8_pair()
    assert pair.int8_drafters
    assert is_quantized(pair.draft) and is_quantized(pair.head)
    assert is_quantized(pair.draft_scorer) and is_quantized(pair.head_scorer)
    assert not is_quantized(pair.target)
    assert all(parameter.dtype == torch.float32 for parameter in pair.target.parameters())


def test_a_row_scorer_scores_its_rows_alone_and_matches_the_full_head():
    torch.manual_seed(0)
    output_weight = torch.randn(40, 8)  # (vocab, d)
    rows = torch.tensor([3, 7, 8, 20, 31])
    hidden = torch.randn(1, 8)  # (1, d)
    logits, row_logits = RowScorer(output_weight, rows, 40)(hidden)
    full = hidden @ output_weight.T  # (1, vocab)
    torch.testing.assert_close(row_logits, full[:, rows])
    outside = torch.ones(40, dtype=torch.bool)
    outside[rows] = False
    assert torch.isinf(logits[0, outside]).all() and torch.equal(logits[:, rows], row_logits)
    int8_logits, _ = RowScorer(output_weight, rows, 40).to_int8()(hidden)
    assert int8_logits[0, rows].argmax() == logits[0, rows].argmax()
    assert torch.isinf(int8_logits[0, outside]).all()


def test_a_prepared_scorer_is_used_only_for_the_rows_it_was_built_for():
    pair = int8_pair()
    assert scorer_for(pair.head_scorer, pair.target, pair.head_rows, pair.vocab_size) is pair.head_scorer
    other_rows = torch.arange(5, pair.vocab_size)
    fresh = scorer_for(pair.head_scorer, pair.target, other_rows, pair.vocab_size)
    assert fresh is not pair.head_scorer and fresh.rows is other_rows and not is_quantized(fresh)


@pytest.mark.parametrize("drafter", ["model", "head"])
@pytest.mark.parametrize("gamma", [1, 3])
def test_greedy_with_int8_drafters_equals_the_target_alone(drafter, gamma):
    pair = int8_pair()
    accepted = 0
    for prompt in random_prompts(4, pair.vocab_size, seed=gamma):
        config = DecodeConfig(gamma=gamma, max_new_tokens=24, stop_at_eos=False, drafter=drafter, draft_confidence=0.0)
        trace = Trace.from_events(speculative_decode(pair, prompt, config))
        assert trace.token_ids == Trace.from_events(autoregressive_decode(pair, prompt, config)).token_ids
        assert all(token.token_id >= 2 for event in trace.rounds for token in event.drafted)
        accepted += trace.num_accepted
    assert accepted > 0  # the int8 drafter still guesses right sometimes: the test exercises both branches


@pytest.mark.timeout(240)
def test_sampled_output_with_an_int8_draft_follows_the_target_distribution():
    pair = int8_pair(vocab_size=VOCAB, noise=0.15, init_std=0.5, hidden=32)
    settings = dict(temperature=1.0, top_k=0, top_p=1.0)
    joint = exact_joint_of_three(pair, **settings)
    tokens = sample_runs(pair, dict(settings, drafter="model", draft_confidence=0.0), num_runs=3000, max_rejection_share=0.98)
    assert min(check_against_target(tokens, joint)) > SIGNIFICANCE
