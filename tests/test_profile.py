"""The verify-cost profile: its parts add up to the measured forward and land in the right parts."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from specviz.models.slots import PROFILE_LABEL
from specviz.analysis.profile import (PARTS, ProfileConfig, classify_op, format_profile, profile_target, sample_tree,
                                      split_profile)
from tests.test_cli import run_cli
from tests.tiny_models import tiny_pair

SMALL = ProfileConfig(token_counts=(1, 4), context_length=16, repeats=2, profiled_repeats=1)


def test_ops_are_sorted_into_their_parts():
    head = (128, 48)  # the output head's weight: (vocabulary rows, hidden)
    assert classify_op("aten::linear", [[1, 4, 48], [128, 48], []], head) == "output head"
    assert classify_op("aten::linear", [[1, 4, 48], [96, 48], [96]], head) == "projections"
    # GPT-2's Conv1D: addmm(bias, input, weight (in, out)), here wider than the vocabulary
    assert classify_op("aten::addmm", [[144], [4, 48], [48, 144]], head) == "projections"
    assert classify_op("aten::mm", [[4, 48], [48, 128]], head) == "output head"
    assert classify_op("aten::scaled_dot_product_attention", [[1, 2, 4, 24]] * 3, head) == "attention"
    assert classify_op("aten::mean", [[1, 4, 48]], head) == "other ops"
    # a float32 target's packed oneDNN layers, and specviz's batch-invariant attention as one block
    assert classify_op("mkldnn::_linear_pointwise", [[1, 4, 48], [128, 48], []], head) == "output head"
    assert classify_op("mkldnn::_linear_pointwise", [[1, 4, 48], [96, 48], []], head) == "projections"
    assert classify_op(PROFILE_LABEL, [], head) == "attention"


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_a_profile_splits_the_measured_forward_into_its_parts(arch):
    pair = tiny_pair(arch, vocab_size=4096)  # a wide vocabulary, so the output head is a real share
    profiles = profile_target(pair, SMALL)
    assert [p.num_tokens for p in profiles] == [1, 4]
    for forward in profiles:
        assert set(forward.part_s) == set(PARTS)
        assert sum(forward.part_s.values()) == pytest.approx(forward.wall_s, rel=1e-6)
        assert forward.spread_s[0] <= forward.wall_s <= forward.spread_s[1]
        for part in ("projections", "attention", "output head"):
            assert forward.part_s[part] > 0, part
    table = format_profile(profiles, "heading")
    assert table.splitlines()[0] == "heading" and "output head" in table and len(table.splitlines()) == 4


def test_a_profile_times_tree_verifies_per_budget():
    """The verify's cost per tree budget, its rows under a tree mask (each reads its own path's keys)."""
    pair = tiny_pair("llama", vocab_size=4096)
    profiles = profile_target(pair, replace(SMALL, trees=(4, 8)))
    assert [(p.num_tokens, p.tree) for p in profiles] == [(1, 0), (4, 0), (5, 4), (9, 8)]
    assert all(p.part_s["attention"] > 0 for p in profiles)
    table = format_profile(profiles, "heading")
    assert "5 (tree 4)" in table and "9 (tree 8)" in table and "its own path's keys" in table
    assert sample_tree(6) == (-1, -1, 0, 0, 1, 1)  # two children a node, level by level
    with pytest.raises(ValueError, match="tree budgets"):
        profile_target(pair, replace(SMALL, trees=(0,)))


def test_a_profile_refuses_a_context_the_target_cannot_hold():
    pair = tiny_pair("llama")
    with pytest.raises(ValueError, match="fit"):
        profile_target(pair, ProfileConfig(context_length=pair.context_length))


def test_the_profile_command_prints_both_precisions():
    result = run_cli("profile", "--pair", "tiny-code", "--tokens", "1,3", "--context", "24", "--repeats", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "in float32" in result.stdout and "in bfloat16" in result.stdout
    # each precision twice: as transformers loads it (SDPA), then the batch-invariant forward the lanes run
    for precision in ("float32", "bfloat16"):
        assert (f"in {precision}, 1 thread(s), 24 tokens cached; parts scaled to the plain median: as transformers "
                "loads it (SDPA)") in result.stdout
    assert result.stdout.count(": batch-invariant (a verify rounds like a step)") == 2
    assert result.stdout.count("Python & framework") == 4
    # torch 2.13's profiler prints a USDT line at each start and stop (about 60 here) unless told not to
    assert "USDT:" not in result.stderr, result.stderr[-2000:]


def test_on_a_gpu_each_part_is_its_kernels_time_not_the_hosts():
    """A CUDA profile's parts are the GPU's kernel time of each top-level operator (children included);
    the host's launch time is what the GPU waits through and stays out of them."""
    head = (128, 48)
    events = [SimpleNamespace(name="aten::linear", cpu_parent=None, input_shapes=[[1, 4, 48], [128, 48], []],
                              cpu_time_total=900.0, device_time_total=300.0),
              SimpleNamespace(name=PROFILE_LABEL, cpu_parent=None, input_shapes=[], cpu_time_total=500.0,
                              device_time_total=40.0),
              SimpleNamespace(name="aten::mm", cpu_parent="aten::linear", input_shapes=[[4, 48], [48, 128]],
                              cpu_time_total=800.0, device_time_total=290.0)]  # a child: inside its parent
    parts, total = split_profile(events, head, on_gpu=True)
    assert parts["output head"] == pytest.approx(300e-6) and parts["attention"] == pytest.approx(40e-6)
    assert total == pytest.approx(340e-6)
    assert split_profile(events, head)[0]["output head"] == pytest.approx(900e-6)  # a CPU profile: the host's time
