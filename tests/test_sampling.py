"""The accept/reject rule on toy distributions, and the logits → probs warping.

The statistical tests draw tens of thousands of verdicts and compare the emitted tokens' counts
with the target distribution by a chi-square test. Each is paired with a deliberately broken
residual (resampling from p instead of norm(max(0, p − q))) that the same test must reject, so
the test is shown to have the power to catch exactly that classic mistake.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

import specviz.decoding.sampling
from specviz.decoding.sampling import ProbsFn, accept_or_resample, residual_distribution, sample

SIGNIFICANCE = 1e-3  # the seeds are fixed, so a pass is a pass; this only sets how strict
NUM_DRAWS = 30_000

# Toy distributions over 5 tokens, far enough apart that a wrong residual is glaring.
TARGET = torch.tensor([0.40, 0.25, 0.15, 0.15, 0.05])  # p
DRAFT = torch.tensor([0.10, 0.50, 0.05, 0.05, 0.30])  # q


def chi_square_p_value(samples: list[int] | np.ndarray, probs: np.ndarray) -> float:
    """Goodness of fit of integer samples to probs; cells with expected count < 5 are pooled."""
    probs = np.asarray(probs, dtype=np.float64).ravel()
    counts = np.bincount(np.asarray(samples).ravel(), minlength=probs.size).astype(np.float64)
    assert counts.size == probs.size, "a sample fell outside the support"
    assert counts[probs == 0].sum() == 0, "a token of probability 0 was emitted"
    counts, probs = counts[probs > 0], probs[probs > 0]
    expected = probs * counts.sum()
    big = expected >= 5
    observed_cells = list(counts[big]) + ([counts[~big].sum()] if (~big).any() else [])
    expected_cells = list(expected[big]) + ([expected[~big].sum()] if (~big).any() else [])
    if len(observed_cells) < 2:
        return 1.0
    observed_cells, expected_cells = np.array(observed_cells), np.array(expected_cells)
    expected_cells *= observed_cells.sum() / expected_cells.sum()
    return float(chisquare(observed_cells, expected_cells).pvalue)


def first_tokens_gamma1(num_draws: int, seed: int = 0) -> list[int]:
    """γ = 1: draw x ~ q, verify with p; the first emitted token is x if accepted, else the correction."""
    generator = torch.Generator().manual_seed(seed)
    draft_probs = DRAFT.unsqueeze(0)  # (1, vocab)
    target_probs = torch.stack([TARGET, TARGET])  # (2, vocab); row 1 is the bonus position
    emitted = []
    for _ in range(num_draws):
        draft_ids = sample(draft_probs, generator)  # (1,)
        verdict = accept_or_resample(draft_ids, draft_probs, target_probs, generator)
        emitted.append(int(draft_ids[0]) if verdict.num_accepted else verdict.next_id)
    return emitted


def p_instead_of_residual(target_probs, draft_probs):
    return target_probs


def test_gamma1_first_token_follows_target():
    assert chi_square_p_value(first_tokens_gamma1(NUM_DRAWS), TARGET.numpy()) > SIGNIFICANCE


def test_gamma1_wrong_residual_is_caught(monkeypatch):
    monkeypatch.setattr(specviz.decoding.sampling, "residual_distribution", p_instead_of_residual)
    assert chi_square_p_value(first_tokens_gamma1(NUM_DRAWS // 3), TARGET.numpy()) < SIGNIFICANCE


# A toy Markov "language model" over 4 tokens: row s is the next-token distribution after s.
# Start state 0 stands for the prompt. Target and draft disagree a lot.
TARGET_MARKOV = torch.tensor(
    [[0.50, 0.20, 0.20, 0.10], [0.10, 0.60, 0.10, 0.20], [0.25, 0.25, 0.25, 0.25], [0.05, 0.15, 0.30, 0.50]]
)
DRAFT_MARKOV = torch.tensor(
    [[0.10, 0.40, 0.10, 0.40], [0.40, 0.10, 0.40, 0.10], [0.70, 0.10, 0.10, 0.10], [0.25, 0.25, 0.25, 0.25]]
)


def first_two_tokens_markov(gamma: int, num_draws: int, seed: int = 0, verify=None) -> list[int]:
    """Full speculative rounds on the Markov toy until two tokens are out; returns a*4 + b per run."""
    generator = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(num_draws):
        emitted, state = [], 0
        while len(emitted) < 2:
            draft_ids, draft_rows, context = [], [], state
            for _ in range(gamma):
                row = DRAFT_MARKOV[context]
                context = int(sample(row.unsqueeze(0), generator))
                draft_ids.append(context)
                draft_rows.append(row)
            # p at γ+1 positions: after the state, then after each drafted token.
            target_rows = [TARGET_MARKOV[state]] + [TARGET_MARKOV[i] for i in draft_ids]
            verdict = (verify or specviz.decoding.sampling.accept_or_resample)(
                torch.tensor(draft_ids), torch.stack(draft_rows), torch.stack(target_rows), generator
            )
            emitted += draft_ids[: verdict.num_accepted] + [verdict.next_id]
            state = emitted[-1]
        pairs.append(emitted[0] * 4 + emitted[1])
    return pairs


def exact_first_two_markov() -> np.ndarray:
    joint = TARGET_MARKOV[0].unsqueeze(1) * TARGET_MARKOV  # (4, 4): p(a) p(b | a)
    return joint.reshape(-1).numpy()


@pytest.mark.parametrize("gamma", [2, 3])
def test_gamma_ge2_joint_of_two_tokens_follows_target(gamma):
    samples = first_two_tokens_markov(gamma, 20_000, seed=gamma)
    assert chi_square_p_value(samples, exact_first_two_markov()) > SIGNIFICANCE
    # and the first token alone (a marginal of the same runs)
    assert chi_square_p_value(np.array(samples) // 4, TARGET_MARKOV[0].numpy()) > SIGNIFICANCE


def test_gamma2_wrong_residual_is_caught(monkeypatch):
    monkeypatch.setattr(specviz.decoding.sampling, "residual_distribution", p_instead_of_residual)
    assert chi_square_p_value(first_two_tokens_markov(2, 10_000), exact_first_two_markov()) < SIGNIFICANCE


def test_gamma1_wrong_bonus_is_caught():
    """Drawing the bonus from the drafted position's p instead of position γ+1 must also fail."""

    def wrong_bonus(draft_ids, draft_probs, target_probs, generator):
        shifted = torch.cat([target_probs[:-1], target_probs[-2:-1]])  # bonus row := row γ
        return accept_or_resample(draft_ids, draft_probs, shifted, generator)

    samples = first_two_tokens_markov(1, 10_000, verify=wrong_bonus)
    assert chi_square_p_value(samples, exact_first_two_markov()) < SIGNIFICANCE
    assert chi_square_p_value(first_two_tokens_markov(1, 20_000), exact_first_two_markov()) > SIGNIFICANCE


def test_residual_distribution():
    residual = residual_distribution(TARGET, DRAFT)
    expected = (TARGET - DRAFT).clamp_min(0)
    torch.testing.assert_close(residual, expected / expected.sum())
    assert residual[DRAFT >= TARGET].eq(0).all()  # nothing where the draft already over-proposed
    # p == q: no residual mass, fall back to p (a rejection there has probability 0 anyway)
    torch.testing.assert_close(residual_distribution(TARGET, TARGET), TARGET)


def test_verdict_fields_are_consistent():
    generator = torch.Generator().manual_seed(0)
    draft_probs = torch.stack([DRAFT, DRAFT, DRAFT])  # (3, vocab)
    target_probs = torch.stack([TARGET] * 4)  # (4, vocab)
    seen_bonus = seen_resample = False
    for _ in range(500):
        draft_ids = sample(draft_probs, generator)
        verdict = accept_or_resample(draft_ids, draft_probs, target_probs, generator)
        torch.testing.assert_close(verdict.draft_token_probs, DRAFT[draft_ids])
        torch.testing.assert_close(verdict.target_token_probs, TARGET[draft_ids])
        torch.testing.assert_close(verdict.accept_probs, (TARGET[draft_ids] / DRAFT[draft_ids]).clamp(max=1))
        accepted = (verdict.uniforms < verdict.accept_probs).tolist()
        # the accepted prefix: everything before the first failed test
        assert verdict.num_accepted == (accepted + [False]).index(False)
        assert verdict.is_bonus == (verdict.num_accepted == 3)
        assert (verdict.residual is None) == verdict.is_bonus
        if not verdict.is_bonus:
            assert verdict.residual[verdict.next_id] > 0
        seen_bonus |= verdict.is_bonus
        seen_resample |= not verdict.is_bonus
    assert seen_bonus and seen_resample


def test_greedy_is_one_hot_and_accepts_iff_argmax():
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0))
    probs = ProbsFn(0.0)(logits)
    assert torch.equal(probs.sum(-1), torch.ones(6))
    assert torch.equal(probs.argmax(-1), logits.argmax(-1))
    assert probs.count_nonzero() == 6
    # the greedy rule: drafts equal to the target's argmax are accepted, the first other one is
    # replaced by the target's argmax
    target_probs = probs[:4]  # (γ+1, vocab) with γ = 3
    argmax = logits[:4].argmax(-1)
    draft_ids = argmax[:3].clone()
    draft_ids[1] = (argmax[1] + 1) % 50
    draft_probs = ProbsFn(0.0)(torch.nn.functional.one_hot(draft_ids, 50).float())
    verdict = accept_or_resample(draft_ids, draft_probs, target_probs, torch.Generator().manual_seed(0))
    assert verdict.num_accepted == 1
    assert verdict.next_id == int(argmax[1])
    verdict = accept_or_resample(argmax[:3], ProbsFn(0.0)(logits[:3]), target_probs, torch.Generator())
    assert verdict.num_accepted == 3 and verdict.is_bonus and verdict.next_id == int(argmax[3])


@pytest.mark.parametrize(
    "temperature, top_k, top_p", [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 5, 1.0), (0.8, 0, 0.9), (0.6, 10, 0.8), (1.0, 1, 1.0)]
)
def test_warping_matches_transformers(temperature, top_k, top_p):
    logits = torch.randn(4, 40, generator=torch.Generator().manual_seed(1)) * 3
    probs = ProbsFn(temperature, top_k, top_p)(logits)
    reference = logits / temperature
    if top_k:
        reference = TopKLogitsWarper(top_k)(None, reference)
    if top_p < 1:
        reference = TopPLogitsWarper(top_p)(None, reference)
    torch.testing.assert_close(probs, torch.softmax(reference, -1))
    torch.testing.assert_close(TemperatureLogitsWarper(temperature)(None, logits), logits / temperature)
    torch.testing.assert_close(probs.sum(-1), torch.ones(4))


def test_top_k_and_top_p_by_hand():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])
    # top-k keeps the k largest and renormalises
    kept = ProbsFn(1.0, top_k=2)(logits)
    expected = torch.softmax(torch.tensor([2.0, 1.0]), -1)
    torch.testing.assert_close(kept[0, :2], expected)
    assert kept[0, 2:].eq(0).all()
    # top-p keeps the smallest prefix (by probability) whose mass reaches top_p
    probs = torch.softmax(logits, -1)[0]  # ≈ [0.575, 0.211, 0.128, 0.078, 0.029]
    for top_p in (0.5, 0.7, 0.85, 0.95):
        kept = ProbsFn(1.0, top_p=top_p)(logits)[0]
        size = int((torch.cumsum(probs, 0) < top_p).sum()) + 1
        torch.testing.assert_close(kept[:size], probs[:size] / probs[:size].sum())
        assert kept[size:].eq(0).all(), top_p
    # temperature sharpens/flattens before filtering
    torch.testing.assert_close(ProbsFn(0.5)(logits), torch.softmax(logits / 0.5, -1))


def test_sample_never_picks_zero_probability():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5], [0.0, 0.0, 1.0, 0.0]]).repeat(500, 1)
    ids = sample(probs, torch.Generator().manual_seed(0))
    assert ids.shape == (1000,)
    assert set(ids[0::2].tolist()) == {1, 3}
    assert set(ids[1::2].tolist()) == {2}
