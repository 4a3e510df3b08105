"""The self-check for a newly lent machine, run small on the CPU: it passes on the real engine and
fails when a lane parts from the target alone."""

from __future__ import annotations

import specviz.analysis.selfcheck
from specviz.analysis.bench import load_prompts
from specviz.models.presets import PRESETS
from specviz.analysis.selfcheck import SelfCheckConfig, first_parting, run_selfcheck

SMALL = SelfCheckConfig(pair="tiny-code", device="cpu", precisions=("float32",), gammas=(1, 3), max_new_tokens=8,
                        num_prompts=1, bench_gammas=(2,), bench_temperatures=(0.0,), bench_repeats=1)


def test_first_parting_counts_an_early_stop_as_parting():
    assert first_parting([1, 2, 3], [1, 2, 3]) is None
    assert first_parting([1, 2, 3], [1, 5, 3]) == 1
    assert first_parting([1, 2], [1, 2, 3]) == 2


def test_the_self_check_passes_on_the_engine_and_reports_a_bench_for_every_drafter():
    lines = []
    assert run_selfcheck(load_prompts(PRESETS["tiny-code"].prompts_file), SMALL, lines.append)
    text = "\n".join(lines)
    assert "in float32: greedy identity" in text and "4/4 identical: OK" in text
    assert "drafter model:" in text and "drafter prompt-lookup:" in text
    assert "verify against steps: " in text


def test_the_self_check_in_bfloat16_measures_a_bitwise_verify_and_holds_lanes_to_it():
    lines = []
    config = SelfCheckConfig(**{**SMALL.__dict__, "precisions": ("bfloat16",)})
    assert run_selfcheck(load_prompts(PRESETS["tiny-code"].prompts_file), config, lines.append)
    text = "\n".join(lines)
    assert "(bfloat16); at temperature 0 both lanes write the same text by construction" in text
    assert "4/4 identical: OK" in text


def test_the_self_check_fails_when_a_lane_parts(monkeypatch):
    real = specviz.analysis.selfcheck.speculative_decode

    def off_by_one(pair, ids, config, *args, **kwargs):  # every token one id higher: never the target's
        for event in real(pair, ids, config, *args, **kwargs):
            if hasattr(event, "emitted_ids"):
                event = type(event)(**{**event.__dict__, "emitted_ids": tuple(i + 1 for i in event.emitted_ids)})
            yield event

    monkeypatch.setattr(specviz.analysis.selfcheck, "speculative_decode", off_by_one)
    lines = []
    assert not run_selfcheck(load_prompts(PRESETS["tiny-code"].prompts_file), SMALL, lines.append)
    assert "FAILED: lanes must be identical with " in "\n".join(lines)


def test_the_self_check_refuses_model_flags_it_would_not_use():
    import pytest

    from specviz.cli.commands import main

    with pytest.raises(SystemExit, match="does not take --head: bench and generate do"):
        main(["selfcheck", "--head", "some-folder"])
