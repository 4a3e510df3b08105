"""The round's host work: a greedy verify reads the device once, drafting reads each confidence once, and the
round profile (`profile --rounds`) adds up.

On a GPU every read of a tensor's value waits for the device, so these counts are what a GPU round pays in
waits; they are counted here on a CPU with the profile's own counter (a TorchFunctionMode)."""

from __future__ import annotations

import dataclasses
from unittest import mock

import pytest
import torch

from specviz.analysis.bench import load_prompts
from specviz.analysis.host_time import EVENT_STAGE, STAGES, HostConfig, ReadCounter, format_host_profile, profile_rounds
from specviz.decoding import engine
from specviz.decoding.config import DecodeConfig
from specviz.decoding.events import RoundEvent
from specviz.models.loading import load_pair
from specviz.models.presets import PRESETS
from tests.test_cli import run_cli
from tests.tiny_models import tiny_pair

PROMPT = [7, 8, 9, 10, 7, 8, 9, 11]


def reads_per_call(name: str, settings: dict) -> tuple[list[int], list[RoundEvent]]:
    """Run a greedy speculative lane on a tiny random pair, counting the host reads made inside each call of the
    engine's function `name`."""
    config = DecodeConfig(gamma=4, temperature=0.0, max_new_tokens=40, stop_at_eos=False, **settings)
    return rounds_and_reads(name, tiny_pair("llama"), PROMPT, config)


def rounds_and_reads(name: str, pair, prompt_ids: list[int], config: DecodeConfig) -> tuple[list[int], list[RoundEvent]]:
    """A speculative lane's rounds, and the host reads made inside each call of the engine's function `name`."""
    counter, per_call = ReadCounter(), []
    original = getattr(engine, name)

    def counted(*args, **kwargs):
        before = counter.sites.total()
        try:
            return original(*args, **kwargs)
        finally:
            per_call.append(counter.sites.total() - before)

    with mock.patch.object(engine, name, counted), counter, torch.inference_mode():
        events = [event for event in engine.speculative_decode(pair, prompt_ids, config)
                  if isinstance(event, RoundEvent)]
    return per_call, events


@pytest.mark.parametrize("shape, settings", [
    ("chain", {"drafter": "model", "draft_confidence": 0.0, "rivals": 0}),
    ("rivals", {"drafter": "model", "draft_confidence": 0.9, "rivals": 2}),
    ("tree", {"drafter": "model", "tree": 6}),
])
def test_a_greedy_verify_reads_the_device_once(shape, settings):
    """The verdict comes from the target's picks, read together with the nodes' ids in one transfer (building
    one-hot rows and walking them read once per figure, ~10 a round)."""
    per_call, events = reads_per_call("verify_round", settings)
    assert shape in {event.shape for event in events}  # the shape under test did run
    assert len(per_call) == len(events) > 5
    assert per_call == [1] * len(per_call)


def test_drafting_reads_each_confidence_once():
    """A chain drafts with the unsure-stop and rival guesses on: each draft's confidence is read at its step (the stop needs it
    there) and never again, so a round's drafting reads at most one value per drafted token, where it read the
    first twice and the last two again at the end."""
    per_call, events = reads_per_call("draft_chain", {"drafter": "model", "draft_confidence": 0.05, "rivals": 2})
    drafted = [len(event.nodes) - (event.nodes[-1].verdict in ("resample", "bonus")) for event in events]
    assert len(per_call) == len(events) > 5 and max(drafted) > 1
    assert all(reads <= count for reads, count in zip(per_call, drafted)), list(zip(per_call, drafted))


def test_where_reads_wait_an_unsure_first_draft_and_its_rivals_are_read_at_once(monkeypatch):
    """On a GPU (stood in for here) a round whose first draft is unsure reads its confidence, its id and the rival
    guesses in one transfer, where a CPU reads them one by one (three reads): the same rounds either way."""
    from specviz.decoding import drafters

    settings = {"drafter": "model", "draft_confidence": 0.9, "rivals": 2}
    per_call_here, events_here = reads_per_call("draft_chain", settings)
    monkeypatch.setattr(drafters, "reads_wait", lambda device: True)
    per_call, events = reads_per_call("draft_chain", settings)
    untimed = [dataclasses.replace(event, draft_s=0.0, verify_s=0.0) for event in events]
    assert untimed == [dataclasses.replace(event, draft_s=0.0, verify_s=0.0) for event in events_here]  # same rounds
    rivals = [index for index, event in enumerate(events) if event.shape == "rivals"]
    assert len(rivals) > 3
    assert [per_call_here[index] for index in rivals] == [3] * len(rivals)
    assert [per_call[index] for index in rivals] == [1] * len(rivals)


@pytest.fixture(scope="module")
def tiny_code():
    return load_pair("tiny-code", device="cpu", precision="float32")


def test_the_round_profile_adds_up(tiny_code):
    prompts = load_prompts(PRESETS["tiny-code"].prompts_file)[:2]
    profile = profile_rounds(tiny_code, prompts, HostConfig(drafter="model", gamma=4, max_new_tokens=16))
    assert profile.num_rounds >= 2 * 16 / (4 + 1)  # a round keeps at most γ + 1 tokens
    assert 1 <= profile.tokens_per_round <= 5
    assert 0 < profile.model_s < profile.wall_s and profile.host_s == profile.wall_s - profile.model_s
    assert set(profile.stage_s) == {*STAGES, EVENT_STAGE}
    assert sum(wall for wall, _ in profile.stage_s.values()) <= profile.wall_s
    assert all(0 <= host <= wall for wall, host in profile.stage_s.values())
    assert profile.reads >= 1  # at least the verify's
    assert sum(count for _, count in profile.read_sites) == pytest.approx(profile.reads)
    assert 0 < profile.c < 1  # the tiny draft is a fraction of its target
    table = format_host_profile(profile, "heading")
    assert table.startswith("heading\n") and "outside them (host)" in table and "host reads a round" in table


def test_the_profile_command_profiles_rounds():
    result = run_cli("profile", "--rounds", "--pair", "tiny-code", "--prompts", "1", "--max-new-tokens", "8",
                     "--gamma", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "tiny-code, model, γ 2, greedy" in result.stdout and "build the event" in result.stdout
