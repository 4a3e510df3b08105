"""Drafters and the reference lane: prompt lookup is exact (greedy identical to the target alone
and to transformers' prompt lookup; sampled output follows the target), and the reference lane
(transformers' own generate) matches ours under greedy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import specviz.decoding.sampling
from specviz.catalogue import DRAFTER_NAMES
from specviz.decoding.drafters import PromptLookupDrafter, find_continuation
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import autoregressive_decode, decode_lanes, speculative_decode
from specviz.decoding.reference import generate_kwargs
from specviz.analysis.trace import Trace
from tests.test_distribution import check_against_target, distribution_pair, exact_joint_of_three, sample_runs
from tests.test_sampling import SIGNIFICANCE, p_instead_of_residual
from tests.tiny_models import ARCHITECTURES, random_prompts, tiny_pair


def copy_heavy_prompt(length: int = 12, repeats: int = 3, seed: int = 0, vocab: int = 64) -> list[int]:
    """A random phrase said `repeats` times: what prompt lookup is made for."""
    generator = torch.Generator().manual_seed(seed)
    phrase = torch.randint(3, vocab, (length,), generator=generator).tolist()
    return phrase * repeats


# --- the n-gram search -----------------------------------------------------------------------------


def test_find_continuation_prefers_the_longest_then_the_latest_match():
    #        0  1  2  3  4  5  6  7  8  9
    ids = [1, 2, 3, 4, 9, 2, 3, 5, 1, 2, 3]
    # trailing 3-gram [1, 2, 3] occurred at 0 → copies what followed it
    assert find_continuation(ids, max_ngram=3, num_tokens=2) == [4, 9]
    # with 2-grams only, [2, 3]'s latest earlier occurrence (at 5) wins
    assert find_continuation(ids, max_ngram=2, num_tokens=2) == [5, 1]
    assert find_continuation([7, 8, 9], max_ngram=3, num_tokens=4) == []  # nothing recurs
    assert find_continuation([4, 5, 4], max_ngram=2, num_tokens=5) == [5, 4]  # never past the end


def test_prompt_lookup_proposes_one_hot_and_needs_no_model():
    drafter = PromptLookupDrafter(vocab_size=10, max_ngram=2)
    proposal = drafter.propose(torch.tensor([[1, 2, 3, 1, 2]]), 2)
    assert proposal.draft_ids.tolist() == [3, 1] and proposal.num_forwards == 0
    assert torch.equal(proposal.draft_probs, torch.nn.functional.one_hot(torch.tensor([3, 1]), 10).float())
    empty = drafter.propose(torch.tensor([[1, 2, 3]]), 4)
    assert empty.draft_ids.numel() == 0 and empty.draft_probs.shape == (0, 10)
    assert set(DRAFTER_NAMES) == {"model", "prompt-lookup", "head"}


def test_drafter_settings_are_checked():
    with pytest.raises(ValueError, match="unknown drafter 'ngram'; choose one of: model, prompt-lookup, head"):
        DecodeConfig(drafter="ngram").validate()
    with pytest.raises(ValueError, match="n-gram size of prompt lookup must be an integer from 1 to 8, got 0"):
        DecodeConfig(drafter="prompt-lookup", ngram=0).validate()


# --- exactness -------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_prompt_lookup_greedy_equals_the_target_alone_and_transformers(arch):
    pair = tiny_pair(arch)
    for seed in range(3):
        prompt_ids = copy_heavy_prompt(seed=seed, vocab=pair.vocab_size)
        for gamma in (1, 3, 6):
            config = DecodeConfig(gamma=gamma, max_new_tokens=24, stop_at_eos=False, drafter="prompt-lookup", ngram=3)
            baseline = Trace.from_events(autoregressive_decode(pair, prompt_ids, config))
            ours = Trace.from_events(speculative_decode(pair, prompt_ids, config))
            assert ours.token_ids == baseline.token_ids
            assert ours.num_draft_forwards == 0 and ours.num_drafted > 0
            input_ids = torch.tensor([prompt_ids])
            with torch.inference_mode():
                theirs = pair.target.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                              **generate_kwargs(pair, config, 24))
            assert theirs[0, len(prompt_ids):].tolist() == baseline.token_ids


LOOKUP_SAMPLING = dict(temperature=1.0, drafter="prompt-lookup", ngram=2)


def lookup_prompt(pair) -> list[int]:
    """A prompt that is the target's own greedy text: lookup then copies tokens the target
    finds likely, so copies are often accepted and often rejected (a random prompt's copies
    are nearly always rejected, which would leave the accept path untested)."""
    config = DecodeConfig(max_new_tokens=13, stop_at_eos=False)
    return [5, 9, 3] + Trace.from_events(autoregressive_decode(pair, [5, 9, 3], config)).token_ids


def lookup_samples(pair, prompt_ids) -> np.ndarray:
    return sample_runs(pair, LOOKUP_SAMPLING, 3000, prompt_ids=prompt_ids, min_rejection_share=0.05)


@pytest.mark.timeout(240)
def test_prompt_lookup_sampling_follows_the_target_distribution():
    """One-hot q at T = 1: accepted with probability p(x), else resampled from p without x."""
    pair = distribution_pair()
    prompt_ids = lookup_prompt(pair)
    joint = exact_joint_of_three(pair, 1.0, 0, 1.0, prompt_ids=prompt_ids)
    p_values = check_against_target(lookup_samples(pair, prompt_ids), joint)
    assert min(p_values) > SIGNIFICANCE, p_values


@pytest.mark.timeout(240)
def test_the_prompt_lookup_check_catches_a_wrong_residual(monkeypatch):
    """With the correction drawn from p (which can redraw the rejected copy), the same check fails."""
    pair = distribution_pair()
    prompt_ids = lookup_prompt(pair)
    joint = exact_joint_of_three(pair, 1.0, 0, 1.0, prompt_ids=prompt_ids)
    monkeypatch.setattr(specviz.decoding.sampling, "residual_distribution", p_instead_of_residual)
    assert min(check_against_target(lookup_samples(pair, prompt_ids), joint)) < SIGNIFICANCE


# --- the reference lane ----------------------------------------------------------------------------


@pytest.mark.parametrize("drafter", ["model", "prompt-lookup"])
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_reference_lane_matches_ours_under_greedy(arch, drafter):
    pair = tiny_pair(arch)
    prompt_ids = copy_heavy_prompt(seed=5, vocab=pair.vocab_size)
    config = DecodeConfig(gamma=3, max_new_tokens=20, stop_at_eos=False, drafter=drafter)
    events = list(decode_lanes(pair, prompt_ids, config, ("baseline", "speculative", "reference")))
    lanes = {}
    for event in events:
        lanes.setdefault(event.lane, Trace()).add(event)
    assert list(lanes) == ["baseline", "speculative", "reference"]  # one after another, in order
    reference = lanes["reference"]
    assert reference.done and reference.finish.stop_reason == "max_new_tokens"
    assert reference.token_ids == lanes["speculative"].token_ids == lanes["baseline"].token_ids
    assert reference.num_drafted == 0 and reference.wall_s > 0
    # one streamed chunk per target forward: fewer forwards than tokens when drafts were kept
    assert reference.num_target_forwards <= reference.num_tokens


def test_reference_lane_stops_when_the_consumer_does():
    """Leaving the loop (Stop, a time cap) ends transformers' generate() at its next step."""
    pair = tiny_pair("gpt2")
    config = DecodeConfig(gamma=2, max_new_tokens=200, stop_at_eos=False)
    events = decode_lanes(pair, copy_heavy_prompt(vocab=pair.vocab_size), config, ("reference",))
    first = next(events)
    assert first.lane == "reference"
    events.close()  # runs the lane's finally: sets the stop flag and joins the worker thread
    import threading

    assert not any(thread.name == "specviz-reference" for thread in threading.enumerate())


# --- drafting only while sure ----------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_the_confidence_stop_ends_a_round_at_the_first_unsure_draft_and_stays_exact(arch):
    pair = tiny_pair(arch)
    threshold = 0.6
    stopped = 0
    for prompt_ids in random_prompts(4, pair.vocab_size, seed=3):
        config = DecodeConfig(gamma=6, max_new_tokens=30, stop_at_eos=False, draft_confidence=threshold)
        baseline = Trace.from_events(autoregressive_decode(pair, prompt_ids, config))
        ours = Trace.from_events(speculative_decode(pair, prompt_ids, config))
        assert ours.token_ids == baseline.token_ids  # greedy: still the target's own tokens
        for event in ours.rounds:
            confidences = [token.draft_confidence for token in event.drafted]
            assert all(0 < c <= 1 for c in confidences)
            # every draft but the last was sure; the last is unsure exactly when drafting stopped early
            assert all(c >= threshold for c in confidences[:-1])
            if event.stopped_unsure:
                assert confidences[-1] < threshold and event.gamma < config.gamma
            stopped += event.stopped_unsure
    assert stopped > 0, "the threshold never stopped a round: the test checks nothing"


def test_without_a_threshold_every_round_drafts_gamma():
    pair = tiny_pair("gpt2")
    config = DecodeConfig(gamma=4, max_new_tokens=30, stop_at_eos=False, draft_confidence=0.0)
    trace = Trace.from_events(speculative_decode(pair, random_prompts(1, pair.vocab_size, seed=3)[0], config))
    assert not any(event.stopped_unsure for event in trace.rounds)
    assert all(event.gamma == min(4, config.max_new_tokens - event.position - 1) for event in trace.rounds)


def test_the_heuristic_gamma_schedule_grows_after_full_acceptance_and_shrinks_after_a_rejection():
    from specviz.decoding.config import MAX_GAMMA, next_gamma

    heuristic, constant = DecodeConfig(gamma_schedule="heuristic"), DecodeConfig()
    assert next_gamma(heuristic, 4, 4, 4) == 6 and next_gamma(heuristic, 4, 4, 2) == 3
    assert next_gamma(heuristic, 1, 1, 0) == 1 and next_gamma(heuristic, MAX_GAMMA, MAX_GAMMA, MAX_GAMMA) == MAX_GAMMA
    assert next_gamma(constant, 4, 4, 4) == 4 and next_gamma(constant, 4, 4, 0) == 4
    with pytest.raises(ValueError, match="unknown γ schedule 'fast'; choose one of: constant, heuristic"):
        DecodeConfig(gamma_schedule="fast").validate()
    pair = tiny_pair("llama")
    prompt_ids = random_prompts(1, pair.vocab_size, seed=4)[0]
    config = DecodeConfig(gamma=2, max_new_tokens=40, stop_at_eos=False, gamma_schedule="heuristic")
    trace = Trace.from_events(speculative_decode(pair, prompt_ids, config))
    assert trace.token_ids == Trace.from_events(autoregressive_decode(pair, prompt_ids, config)).token_ids
    assert len({event.gamma for event in trace.rounds}) > 1  # γ really moved


# --- rival guesses beside an unsure first draft ----------------------------------------------------


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_forward_with_rivals_gives_each_the_logits_of_a_forward_over_the_text_and_it_alone(arch):
    from transformers import DynamicCache

    from specviz.decoding.forward import crop_cache, forward_new_ids, move_cache_positions

    pair = tiny_pair(arch)
    text = torch.tensor([random_prompts(1, pair.vocab_size, seed=7, min_len=6, max_len=6)[0]])  # (1, 6)
    rivals = [5, 17, 40]

    def cached() -> DynamicCache:
        cache = DynamicCache()
        forward_new_ids(pair.target, text[:, :-1], cache, pair.vocab_size)
        return cache

    with torch.inference_mode():
        together = cached()
        logits = forward_new_ids(pair.target, torch.cat([text, torch.tensor([rivals])], 1), together, pair.vocab_size,
                                 parents=(-1, -1, -1))  # (4, vocab): the text's last token, then each rival
        for i, rival in enumerate(rivals):
            alone = forward_new_ids(pair.target, torch.cat([text, torch.tensor([[rival]])], 1), cached(), pair.vocab_size)
            torch.testing.assert_close(logits[[0, 1 + i]], alone, rtol=1e-4, atol=1e-4)
        # The rival taken keeps its entries at its place in the text: the next forward reads as if it had always been there.
        move_cache_positions(together, [text.shape[1] + 2], text.shape[1])
        crop_cache(together, text.shape[1] + 1)
        longer = torch.cat([text, torch.tensor([[rivals[2], 9]])], 1)  # (1, 8)
        torch.testing.assert_close(forward_new_ids(pair.target, longer, together, pair.vocab_size),
                                   forward_new_ids(pair.target, longer, cached(), pair.vocab_size)[-1:],
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("gamma", [1, 3])
def test_greedy_with_rival_guesses_equals_the_target_alone_and_the_target_takes_rivals(arch, gamma):
    pair = tiny_pair(arch)
    taken = judged = 0
    for prompt_ids in random_prompts(4, pair.vocab_size, seed=gamma):
        # A tiny draft is rarely 0.9 sure: most rounds offer rivals.
        config = DecodeConfig(gamma=gamma, max_new_tokens=24, stop_at_eos=False, draft_confidence=0.9, rivals=2)
        baseline = Trace.from_events(autoregressive_decode(pair, prompt_ids, config))
        ours = Trace.from_events(speculative_decode(pair, prompt_ids, config))
        assert ours.token_ids == baseline.token_ids
        for event in ours.rounds:
            guesses = event.guesses
            if not guesses:
                continue
            judged += len(guesses) - 1
            assert event.gamma == 1 and 2 <= len(guesses) <= 3
            # the drafter's order, its own pick first; the one taken (if any) is the first draft the lanes tell
            assert [token.draft_confidence for token in guesses] == sorted((token.draft_confidence for token in guesses),
                                                                          reverse=True)
            assert [i for i, token in enumerate(guesses) if token.accepted] == ([event.shown_guess] if event.num_accepted else [])
            assert event.drafted[0].token_id == guesses[event.shown_guess].token_id
            # a rival taken was less likely to the drafter, yet the target's own
            if event.drafted[0].draft_confidence < guesses[0].draft_confidence:
                assert event.num_accepted == 1 and event.took_rival
                taken += 1
            assert len({token.token_id for token in guesses}) == len(guesses)
    assert judged > 0 and taken > 0, "no rival was offered or taken: the test checks nothing"


def test_rivals_are_greedy_only_need_the_confidence_stop_and_are_checked():
    pair = tiny_pair("llama")
    prompt_ids = random_prompts(1, pair.vocab_size, seed=2)[0]
    sampled = DecodeConfig(gamma=3, max_new_tokens=20, stop_at_eos=False, temperature=1.0, draft_confidence=0.9, rivals=2)
    never_unsure = DecodeConfig(gamma=3, max_new_tokens=20, stop_at_eos=False, draft_confidence=0.0, rivals=2)
    for config in (sampled, never_unsure):
        assert not any(event.guesses for event in Trace.from_events(speculative_decode(pair, prompt_ids, config)).rounds)
    with pytest.raises(ValueError, match="rival guesses must be an integer from 0 \\(off\\) to 4, got 5"):
        DecodeConfig(rivals=5).validate()
