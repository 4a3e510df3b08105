"""The engine's bookkeeping: events, forward counts, KV cache rollback, limits, EOS, seeds, traces.

Forward counts and positions are observed with hooks on the models themselves, and cache
lengths by a recording DynamicCache and drafter patched into specviz.decoding.engine, so the events'
own claims are checked against what actually ran.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import specviz.decoding.drafters
import specviz.decoding.engine
import specviz.decoding.forward
from specviz.analysis import theory
from specviz.models import slot_calls
from specviz.decoding.drafters import ModelDrafter
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import autoregressive_decode, decode_lanes, speculative_decode
from specviz.decoding.events import FinishEvent, PrefillEvent, RoundEvent
from specviz.analysis.trace import Trace, compare
from tests.rounds import chain, draft
from tests.tiny_models import EOS_ID, random_prompts, tiny_pair

# ---------------------------------------------------------------------------------------------
# instruments


class ForwardLog:
    """Counts forwards per model and records the furthest position each one was asked to see. Hooked on each
    model's body (base_model), which every path runs once a forward: transformers' forward, a slots call. A
    forward in slots may run as several calls (more rows than a call has: slots.call_rows); it counts once."""

    def __init__(self, pair):
        self.calls = {"target": 0, "draft": 0}
        self.max_positions = {"target": 0, "draft": 0}
        self.handles = []
        for name, model in (("target", pair.target), ("draft", pair.draft)):
            self.handles.append(model.base_model.register_forward_pre_hook(self.make_hook(name), with_kwargs=True))
        self.counted: set[str] | None = None  # the models counted in the slots forward running now
        self.run_calls = slot_calls.run_calls

        def one_forward(*args, **kwargs):
            self.counted = set()
            try:
                return self.run_calls(*args, **kwargs)
            finally:
                self.counted = None

        slot_calls.run_calls = one_forward

    def make_hook(self, name):
        def hook(module, args, kwargs):
            input_ids, positions = kwargs["input_ids"], kwargs.get("position_ids")
            cache = kwargs.get("past_key_values")
            seen = cache.get_seq_length() if cache is not None else 0
            if self.counted is None or name not in self.counted:
                self.calls[name] += 1
            if self.counted is not None:
                self.counted.add(name)
            # a slots call names its rows' positions (its filler rows at 0): the furthest is the last real one's
            furthest = int(positions.max()) + 1 if positions is not None else seen + input_ids.shape[1]
            self.max_positions[name] = max(self.max_positions[name], furthest)

        return hook

    def close(self):
        for handle in self.handles:
            handle.remove()
        slot_calls.run_calls = self.run_calls


@pytest.fixture
def forward_log():
    logs = []

    def attach(pair):
        logs.append(ForwardLog(pair))
        return logs[-1]

    yield attach
    for log in logs:
        log.close()


def run(decode, pair, prompt_ids, **config):
    return Trace.from_events(decode(pair, prompt_ids, DecodeConfig(**config)))


def check_events_add_up(trace: Trace, config: DecodeConfig, eos_id=None):
    """Invariants of one lane's event stream."""
    assert trace.prefill is not None and trace.finish is not None
    assert trace.finish.num_new_tokens == trace.num_tokens == len(trace.token_ids)
    assert trace.num_tokens <= config.max_new_tokens
    position = 1
    for index, event in enumerate(trace.rounds):
        assert event.round_index == index
        assert event.position == position
        assert event.num_target_forwards == 1
        assert event.num_draft_forwards == event.gamma
        assert 0 <= event.num_accepted <= event.gamma <= (config.gamma if event.lane == "speculative" else 0)
        assert len(event.drafted) == event.gamma
        accepted_ids = [token.token_id for token in event.drafted[: event.num_accepted]]
        full = tuple(accepted_ids) + (event.next_id,)
        is_last = index == len(trace.rounds) - 1
        if event.emitted_ids != full:  # only an EOS may cut a round short, and only the last one
            assert is_last and eos_id is not None and trace.finish.stop_reason == "eos"
            assert event.emitted_ids == full[: full.index(eos_id) + 1]
        assert [token.accepted for token in event.drafted] == [i < event.num_accepted for i in range(event.gamma)]
        assert [token.decided for token in event.drafted] == [i <= event.num_accepted for i in range(event.gamma)]
        for token in event.drafted:
            if token.decided and config.temperature == 0:  # the picks decide: no coin is drawn
                assert token.r is None and token.accepted == (token.accept_prob == 1.0)
            elif token.decided:
                assert token.accepted == (token.r < token.accept_prob)
            assert token.accept_prob == pytest.approx(min(1.0, token.target_prob / token.draft_prob))
        if event.lane == "speculative":
            assert event.next_kind == ("bonus" if event.num_accepted == event.gamma else "resample")
        else:
            assert event.next_kind == "target"
        position += len(event.emitted_ids)
    assert position == trace.num_tokens


# ---------------------------------------------------------------------------------------------
# events and forwards


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_events_add_up_and_forwards_are_counted_honestly(arch, temperature, forward_log):
    pair = tiny_pair(arch)
    for seed, prompt_ids in enumerate(random_prompts(3, pair.vocab_size, seed=5)):
        for gamma in (1, 3, 6):
            config = DecodeConfig(gamma=gamma, temperature=temperature, max_new_tokens=17, seed=seed, stop_at_eos=False)
            log = forward_log(pair)
            trace = Trace.from_events(speculative_decode(pair, prompt_ids, config))
            log.close()
            check_events_add_up(trace, config)
            assert trace.num_tokens == 17
            # one target forward for the prefill, then exactly one per round
            assert log.calls["target"] == trace.num_target_forwards == 1 + len(trace.rounds)
            # one draft prefill, then γ forwards per round
            assert log.calls["draft"] == trace.num_draft_forwards == 1 + sum(event.gamma for event in trace.rounds)
            # γ drafts a round, fewer only where γ + 1 would overshoot max_new_tokens or the draft
            # stopped, unsure (DecodeConfig's default threshold)
            for event in trace.rounds:
                room = min(gamma, 17 - event.position - 1)
                assert event.gamma < room if event.stopped_unsure else event.gamma == room

            log = forward_log(pair)
            baseline = Trace.from_events(autoregressive_decode(pair, prompt_ids, config))
            log.close()
            check_events_add_up(baseline, config)
            assert log.calls == {"target": 17, "draft": 0}
            assert baseline.num_target_forwards == 17 and len(baseline.rounds) == 16


def test_speculation_needs_fewer_target_forwards_when_the_draft_is_good():
    pair = tiny_pair("gpt_neox")
    prompt_ids = random_prompts(1, pair.vocab_size, seed=2)[0]
    speculative = run(speculative_decode, pair, prompt_ids, gamma=4, max_new_tokens=40, stop_at_eos=False)
    baseline = run(autoregressive_decode, pair, prompt_ids, gamma=4, max_new_tokens=40, stop_at_eos=False)
    assert speculative.num_accepted > 0
    # every accepted draft saves one target forward
    assert speculative.num_target_forwards == baseline.num_target_forwards - speculative.num_accepted
    assert speculative.tokens_per_target_forward == pytest.approx(1 + speculative.num_accepted / len(speculative.rounds))


# ---------------------------------------------------------------------------------------------
# KV caches


class RecordingCache:
    """The caches a run takes from the pool (every target decodes in slots), and each one's length when the
    run gave it back (the pool then empties it)."""

    instances: list = []
    lengths_given_back: list = []

    @classmethod
    def reset(cls) -> None:
        cls.instances, cls.lengths_given_back = [], []

    @classmethod
    def record(cls, monkeypatch, modules) -> None:
        cls.reset()
        for module in modules:
            monkeypatch.setattr(module, "pooled_cache", cls.taking(module.pooled_cache))
        real_given_back = specviz.decoding.forward.given_back

        def given_back(model, cache):
            if cache in cls.instances:
                cls.lengths_given_back.append(cache.get_seq_length())
            return real_given_back(model, cache)

        monkeypatch.setattr(specviz.decoding.forward, "given_back", given_back)

    @classmethod
    def taking(cls, pooled_cache):
        def take(model, capacity):
            cache = pooled_cache(model, capacity)
            cls.instances.append(cache)
            return cache
        return take


class RecordingDrafter(ModelDrafter):
    log: list = []

    def propose(self, committed_ids, num_tokens):
        RecordingDrafter.log.append(("propose", committed_ids.shape[1], self.cache.get_seq_length()))
        return super().propose(committed_ids, num_tokens)

    def rollback(self, num_committed):
        (target_cache,) = [cache for cache in RecordingCache.instances if cache is not self.cache]
        target_length = target_cache.get_seq_length()
        super().rollback(num_committed)
        RecordingDrafter.log.append(("rollback", num_committed, target_length, self.cache.get_seq_length()))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("gamma", [1, 2, 5])
def test_kv_caches_are_rolled_back_to_the_committed_length(monkeypatch, temperature, gamma):
    # The caches are recorded where both modules take them from the pool (the target's in target_cache_for,
    # the draft's in ModelDrafter.build); the drafter is passed in, as any drafter is.
    RecordingCache.record(monkeypatch, (specviz.decoding.forward, specviz.decoding.drafters))
    pair = tiny_pair("qwen2")
    for seed, prompt_ids in enumerate(random_prompts(3, pair.vocab_size, seed=8)):
        RecordingCache.reset()
        RecordingDrafter.log = []
        config = DecodeConfig(gamma=gamma, temperature=temperature, max_new_tokens=15, seed=seed, stop_at_eos=False)
        trace = Trace.from_events(speculative_decode(pair, prompt_ids, config, drafter=RecordingDrafter.build))
        assert len(RecordingCache.instances) == 2  # one per model, reused for the whole run
        rollbacks = [entry for entry in RecordingDrafter.log if entry[0] == "rollback"]
        proposals = [entry for entry in RecordingDrafter.log if entry[0] == "propose"]
        assert len(rollbacks) == len(trace.rounds)
        # a round with no room left to draft (γ = 0) asks the drafter for nothing
        assert len(proposals) == sum(event.gamma > 0 for event in trace.rounds)
        proposals = iter(proposals)
        committed = len(prompt_ids) + 1
        for event, (_, num_committed, target_length, draft_length) in zip(trace.rounds, rollbacks):
            if event.gamma > 0:
                # the drafter sees all committed ids; its cache lags by one (fully accepted: two)
                _, num_seen, cache_length = next(proposals)
                assert num_seen == committed
                assert committed - 2 <= cache_length <= committed - 1
            committed += len(event.emitted_ids)
            assert num_committed == committed
            # the target's cache holds everything committed but the newest token, which the
            # next verify feeds; rejected drafts are gone
            assert target_length == committed - 1
            if event.gamma == 0:  # the last token, a plain target step: the drafter was idle
                assert draft_length <= committed - 2
            elif event.num_accepted < event.gamma:
                assert draft_length == committed - 1
            else:  # all accepted: the last draft and the bonus token were never fed to the draft
                assert draft_length == committed - 2
        assert committed == len(prompt_ids) + trace.num_tokens


def test_baseline_cache_grows_one_per_token(monkeypatch):
    RecordingCache.record(monkeypatch, (specviz.decoding.forward,))
    pair = tiny_pair("gpt2")
    prompt_ids = [5, 6, 7, 8]
    trace = run(autoregressive_decode, pair, prompt_ids, max_new_tokens=9, stop_at_eos=False)
    assert len(RecordingCache.instances) == 1
    assert RecordingCache.lengths_given_back == [len(prompt_ids) + trace.num_tokens - 1]


def test_crop_cache_keeps_the_first_positions():
    from transformers import DynamicCache

    model = tiny_pair("llama").target
    cache = DynamicCache()
    ids = torch.tensor([[4, 5, 6, 7, 8, 9]])
    with torch.inference_mode():
        model(input_ids=ids, past_key_values=cache, use_cache=True)
        keys = cache.layers[0].keys.clone()
        specviz.decoding.forward.crop_cache(cache, 4)
        assert cache.get_seq_length() == 4
        assert torch.equal(cache.layers[0].keys, keys[..., :4, :])
        specviz.decoding.forward.crop_cache(cache, 10)  # longer than the cache: nothing to do
        assert cache.get_seq_length() == 4
        specviz.decoding.forward.crop_cache(cache, 4)
        assert cache.get_seq_length() == 4


# ---------------------------------------------------------------------------------------------
# limits


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_max_new_tokens_is_honoured_exactly(temperature):
    pair = tiny_pair("gpt2")
    prompt_ids = [10, 20, 30]
    for gamma in (1, 2, 3, 4, 8):
        for max_new_tokens in (1, 2, 3, 5, 9, 16):
            config = DecodeConfig(
                gamma=gamma, temperature=temperature, max_new_tokens=max_new_tokens, seed=gamma, stop_at_eos=False
            )
            for decode in (speculative_decode, autoregressive_decode):
                trace = Trace.from_events(decode(pair, prompt_ids, config))
                check_events_add_up(trace, config)
                assert trace.num_tokens == max_new_tokens, (decode.__name__, gamma, max_new_tokens)
                assert trace.finish.stop_reason == "max_new_tokens"


def test_eos_stops_both_lanes():
    pair = tiny_pair("gpt_neox")
    num_cut_rounds = 0
    for prompt_ids in random_prompts(2, pair.vocab_size, seed=4):
        free_run = run(autoregressive_decode, pair, prompt_ids, max_new_tokens=24, stop_at_eos=False).token_ids
        # make tokens the greedy run produces at various points the EOS, one at a time
        for position in sorted({0, 4, 11, 23}):
            eos_id = free_run[position]
            first = free_run.index(eos_id)
            expected = free_run[: first + 1]
            eos_pair = dataclasses.replace(pair, eos_id=eos_id)
            for decode, gamma in ((autoregressive_decode, 1), (speculative_decode, 1), (speculative_decode, 3), (speculative_decode, 8)):
                # full rounds (no confidence stop), so an accepted EOS can land mid-round
                config = DecodeConfig(gamma=gamma, max_new_tokens=24, draft_confidence=0.0)
                trace = Trace.from_events(decode(eos_pair, prompt_ids, config))
                check_events_add_up(trace, config, eos_id)
                assert trace.token_ids == expected, (decode.__name__, gamma, position)
                assert trace.finish.stop_reason == "eos"
                if trace.rounds and len(trace.rounds[-1].emitted_ids) < trace.rounds[-1].num_accepted + 1:
                    num_cut_rounds += 1  # the EOS was an accepted draft, before the round's end
                # stop_at_eos=False ignores it
                config = DecodeConfig(gamma=gamma, max_new_tokens=24, stop_at_eos=False)
                assert Trace.from_events(decode(eos_pair, prompt_ids, config)).token_ids == free_run
    assert num_cut_rounds > 0


def test_eos_from_the_model_config_is_used():
    pair = tiny_pair("llama")
    assert pair.eos_id == EOS_ID
    # steer the target towards EOS: greedy decoding must then stop on it at once
    target = pair.target
    bias = torch.zeros(pair.vocab_size)
    bias[EOS_ID] = 1e4
    handle = target.lm_head.register_forward_hook(lambda module, args, output: output + bias)
    try:
        for decode in (autoregressive_decode, speculative_decode):
            trace = run(decode, pair, [4, 5, 6], max_new_tokens=10)
            assert trace.token_ids == [EOS_ID] and trace.finish.stop_reason == "eos"
    finally:
        handle.remove()


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_context_length_is_honoured(arch, forward_log):
    pair = tiny_pair(arch, context_length=24)
    assert pair.context_length == 24
    for temperature in (0.0, 1.0):
        for prompt_length in (14, 20, 22, 23):
            prompt_ids = list(range(3, 3 + prompt_length))
            for decode, gamma in ((autoregressive_decode, 1), (speculative_decode, 2), (speculative_decode, 8)):
                log = forward_log(pair)
                config = DecodeConfig(gamma=gamma, temperature=temperature, max_new_tokens=30, stop_at_eos=False)
                trace = Trace.from_events(decode(pair, prompt_ids, config))
                log.close()
                check_events_add_up(trace, config)
                assert prompt_length + trace.num_tokens == 24
                assert trace.finish.stop_reason == "context_length"
                assert max(log.max_positions.values()) <= 24
    # room for exactly max_new_tokens: that is the reason to report
    trace = run(speculative_decode, pair, list(range(3, 17)), gamma=3, max_new_tokens=5, stop_at_eos=False)
    assert trace.num_tokens == 5 and trace.finish.stop_reason == "max_new_tokens"


def test_prompt_too_long_is_refused_before_any_work():
    pair = tiny_pair("gpt2", context_length=24)
    for length in (24, 30):
        for decode in (autoregressive_decode, speculative_decode, decode_lanes):
            with pytest.raises(ValueError, match=r"at most 24 tokens.*at most 23 tokens"):
                next(iter(decode(pair, list(range(3, 3 + length)), DecodeConfig())))


# ---------------------------------------------------------------------------------------------
# seeds


def without_timings(trace: Trace) -> list:
    events = []
    for event in trace.events():
        if isinstance(event, PrefillEvent):
            event = dataclasses.replace(event, prefill_s=0.0)
        elif isinstance(event, RoundEvent):
            event = dataclasses.replace(event, draft_s=0.0, verify_s=0.0)
        events.append(event)
    return events


def test_same_seed_same_run_different_seed_different_run():
    pair = tiny_pair("llama")
    prompt_ids = [7, 8, 9, 10]
    settings = dict(gamma=3, temperature=1.0, top_p=0.95, max_new_tokens=24, stop_at_eos=False, inspect=True)
    for decode in (speculative_decode, autoregressive_decode):
        first = run(decode, pair, prompt_ids, seed=123, **settings)
        again = run(decode, pair, prompt_ids, seed=123, **settings)
        assert without_timings(first) == without_timings(again)
        others = [run(decode, pair, prompt_ids, seed=seed, **settings).token_ids for seed in (1, 2, 3)]
        assert any(ids != first.token_ids for ids in others)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_decode_lanes_takes_turns_and_each_lane_writes_what_it_writes_alone(arch, monkeypatch):
    """The target alone and the speculative lane take turns (events.take_turns), the reference lane after them; each
    lane's events are those it gives run alone. Where the target runs in slots, the warm-up makes both lanes' target
    caches, so no lane's clock pays for one (GPT-2's target runs as transformers computes it: no slots)."""
    pair = tiny_pair(arch)
    config = DecodeConfig(gamma=3, max_new_tokens=12, stop_at_eos=False)
    made = []
    made_one = slot_calls.SlotCache.__init__
    monkeypatch.setattr(slot_calls.SlotCache, "__init__", lambda cache, *args, **kwargs: made.append(1) or
                        made_one(cache, *args, **kwargs))
    slot_calls.POOL.free.pop(pair.target, None)  # this pair's first run: the pool has none of its caches yet
    events, made_before_first = [], None
    for event in decode_lanes(pair, [3, 4, 5], config, lanes=("baseline", "speculative", "reference")):
        made_before_first = len(made) if made_before_first is None else made_before_first
        events.append(event)
    lanes = [event.lane for event in events]
    assert lanes[:2] == ["baseline", "speculative"]  # both read their prompts before either goes on
    turns = lanes[:lanes.index("reference")]
    assert turns.count("baseline") > 2 and turns.count("speculative") > 2
    assert any(a != b for a, b in zip(turns, turns[1:]) if a == "speculative")  # the target alone came back after it
    assert set(lanes[lanes.index("reference"):]) == {"reference"}  # alone, after the turns
    alone = {"baseline": autoregressive_decode(pair, [3, 4, 5], config),
             "speculative": speculative_decode(pair, [3, 4, 5], config)}
    for lane, decoded in alone.items():
        assert without_timings(Trace.from_events(e for e in events if e.lane == lane)) == \
            without_timings(Trace.from_events(decoded))
    assert Trace.from_events(e for e in events if e.lane == "reference").token_ids == \
        Trace.from_events(e for e in events if e.lane == "baseline").token_ids  # greedy
    if arch == "llama":
        assert made_before_first == len(made) >= 2 and len(slot_calls.POOL.free[pair.target]) == 2


# ---------------------------------------------------------------------------------------------
# traces


def round_event(gamma, num_accepted, next_id=50, draft_s=0.0, verify_s=0.0, position=0, index=0):
    verdicts = ["accepted"] * num_accepted + ["rejected"] + ["unexamined"] * gamma  # left to right, then none tried
    kind = "bonus" if num_accepted == gamma else "resample"
    nodes = chain(*(draft(10 + i, 0.5, 0.4, 0.1 if i < num_accepted else 0.9, verdicts[i]) for i in range(gamma)),
                  then=(next_id, kind))
    emitted = tuple(10 + i for i in range(num_accepted)) + (next_id,)
    return RoundEvent(
        "speculative", index, position, gamma, nodes, num_accepted, next_id, kind, emitted, draft_s, verify_s, gamma, 1
    )


def test_trace_statistics_on_hand_built_events():
    rounds = [(4, 4), (4, 0), (4, 2), (2, 1)]  # (γ, accepted)
    events = [PrefillEvent("speculative", 5, 99, 0.5, 1, 1)]
    for index, (gamma, accepted) in enumerate(rounds):
        events.append(round_event(gamma, accepted, draft_s=0.01 * gamma, verify_s=0.1, index=index))
    events.append(FinishEvent("speculative", "max_new_tokens", 12))
    trace = Trace.from_events(events)
    # examined drafts: 4 (all accepted) + 1 + 3 + 2 = 10; accepted 4 + 0 + 2 + 1 = 7
    assert trace.acceptance_rate == pytest.approx(0.7)
    assert trace.num_drafted == 14 and trace.num_accepted == 7
    # position i is examined only if every draft before it passed
    assert trace.per_position_acceptance() == pytest.approx([3 / 4, 2 / 3, 1 / 2, 1 / 1])
    assert trace.per_position_counts() == [(3, 4), (2, 3), (1, 2), (1, 1)]
    assert trace.num_examined == 10 and [event.num_examined for event in trace.rounds] == [4, 1, 3, 2]
    assert trace.tokens_per_target_forward == pytest.approx((5 + 1 + 3 + 2) / 4)
    assert trace.token_ids == [99, 10, 11, 12, 13, 50, 50, 10, 11, 50, 10, 50]
    assert trace.num_tokens == 12
    assert trace.num_target_forwards == 5 and trace.num_draft_forwards == 1 + 14
    assert trace.wall_s == pytest.approx(0.5 + 0.14 + 0.4)
    timeline = trace.timeline()
    assert [count for _, count in timeline] == [1, 6, 7, 10, 12]
    assert timeline[-1][0] == pytest.approx(trace.wall_s)
    assert trace.mean_draft_step_s == pytest.approx(0.01)
    assert trace.mean_target_step_s == pytest.approx(0.1)

    baseline_events = [PrefillEvent("baseline", 5, 99, 0.5, 1, 0)]
    for index in range(11):
        baseline_events.append(
            RoundEvent("baseline", index, index + 1, 0, (), 0, 7, "target", (7,), 0.0, 0.05, 0, 1)
        )
    baseline = Trace.from_events(baseline_events + [FinishEvent("baseline", "max_new_tokens", 12)])
    assert baseline.acceptance_rate == 0.0 and baseline.per_position_acceptance() == []
    comparison = compare(baseline, trace, gamma=4)
    assert comparison.speedup == pytest.approx((12 / 1.04) / (12 / 1.05))
    assert comparison.acceptance_rate == pytest.approx(0.7)
    assert comparison.cost_ratio == pytest.approx(0.01 / 0.05)
    assert comparison.predicted_speedup == pytest.approx((1 - 0.7**5) / 0.3 / (4 * 0.2 + 1))
    # a verify round took 0.1 s against a 0.05 s baseline step: v = 2, which the prediction and
    # the verdict take into account; α̂ > c alone would have said it pays
    assert comparison.verify_cost == pytest.approx(2.0)
    assert comparison.predicted_with_verify == pytest.approx((1 - 0.7**5) / 0.3 / (4 * 0.2 + 2))
    assert comparison.best_gamma == theory.best_gamma(0.7, 0.2, verify_cost=2.0)
    assert not comparison.pays and 0.7 > 0.2
    assert max(theory.expected_speedup(0.7, g, 0.2, 2.0) for g in range(1, 17)) < 1


def test_empty_and_partial_traces():
    trace = Trace()
    assert trace.token_ids == [] and trace.acceptance_rate == 0.0 and trace.timeline() == []
    assert trace.per_position_acceptance() == [] and trace.tokens_per_target_forward == 0.0
    assert trace.tokens_per_s == 0.0 and not trace.done
    with pytest.raises(TypeError):
        trace.add("not an event")


# ---------------------------------------------------------------------------------------------
# theory


def test_theory_against_hand_computed_values():
    # α = 0.8, γ = 4: (1 − 0.8⁵) / 0.2 = (1 − 0.32768) / 0.2
    assert theory.expected_tokens_per_round(0.8, 4) == pytest.approx(3.3616)
    assert theory.expected_tokens_per_round(0.5, 1) == pytest.approx(1.5)
    assert theory.expected_tokens_per_round(0.0, 7) == pytest.approx(1.0)
    assert theory.expected_tokens_per_round(1.0, 7) == 8.0
    assert theory.expected_tokens_per_round(1 - 1e-9, 3) == pytest.approx(4.0, rel=1e-6)
    # speedup: tokens per round over the round's cost γc + 1
    assert theory.expected_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)
    assert theory.expected_speedup(0.8, 4, 0.0) == pytest.approx(3.3616)
    # α = 0.8, c = 0.05 by hand: γ = 7, 8, 9 give 4.1611/1.35 = 3.0823, 4.3289/1.40 = 3.0921,
    # 4.4631/1.45 = 3.0780, so γ = 8 is best.
    assert theory.best_gamma(0.8, 0.05) == 8
    assert theory.best_gamma(0.0, 0.1) == 1  # nothing accepted: drafting only costs
    assert theory.best_gamma(0.9, 0.0) == 16  # free drafts: draft as far as allowed
    assert theory.best_gamma(0.9, 0.0, max_gamma=5) == 5


def test_best_gamma_behaviour():
    alphas = [i / 20 for i in range(1, 20)]
    costs = [0.01, 0.05, 0.1, 0.2, 0.5]
    for c in costs:
        best = [theory.best_gamma(alpha, c) for alpha in alphas]
        assert best == sorted(best)  # a better draft never calls for a shorter lookahead
        for alpha, gamma in zip(alphas, best):
            speedups = [theory.expected_speedup(alpha, g, c) for g in range(1, 17)]
            assert theory.expected_speedup(alpha, gamma, c) == max(speedups)
            # Leviathan Corollary 3.9: some γ beats the baseline iff α > c
            assert theory.speculation_pays(alpha, c) == (max(speedups) > 1 + 1e-12) or math.isclose(alpha, c)
    for alpha in (0.5, 0.8, 0.95):
        best = [theory.best_gamma(alpha, c) for c in costs]
        assert best == sorted(best, reverse=True)  # dearer drafts, shorter lookahead


@pytest.mark.parametrize("temperature, drafter, tree", [(0.0, "model", 0), (0.0, "prompt-lookup", 6), (1.0, "model", 0)])
def test_the_inspectors_distributions_are_the_ones_its_words_quote(temperature, drafter, tree):
    """At temperature 0 the rule's q and p are one-hot on each model's pick: the inspector's bars showed
    q(' London') = 1 beside "the drafter was 11% sure". There the details hold each model's softmax at
    temperature 1 (the figures the words quote); above it the rule's own q and p."""
    pair = tiny_pair("llama")
    trace = run(speculative_decode, pair, [7, 8, 9, 10, 7, 8, 9, 11], gamma=3, temperature=temperature, seed=2,
                max_new_tokens=24, stop_at_eos=False, inspect=True, drafter=drafter, tree=tree)
    checked = 0
    for event in trace.rounds:
        for detail, token in zip(event.details or (), event.drafted):  # a round with no drafts has none
            assert detail.temperature_one == (temperature == 0)
            draft_top, target_top = dict(detail.draft_top), dict(detail.target_top)
            if temperature > 0:
                assert draft_top[token.token_id] == pytest.approx(token.draft_prob, abs=1e-5)
                assert target_top[token.token_id] == pytest.approx(token.target_prob, abs=1e-5)
            else:  # how sure each was; a copied token has no model behind it: its pick is all there is
                sure = 1.0 if token.draft_confidence is None else token.draft_confidence
                assert draft_top[token.token_id] == pytest.approx(sure, abs=1e-5)
                assert max(target_top.values()) == pytest.approx(token.target_confidence, abs=1e-5)
                assert max(target_top.values()) < 1.0  # not one-hot
            checked += 1
    assert checked > 5
