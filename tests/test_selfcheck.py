"""The self-check for a newly lent machine, run small on the CPU: it passes on the real engine, benches every
drafter, holds lanes to a bitwise verify, and fails when a lane parts from the target alone."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import specviz.analysis.selfcheck_measures
from specviz.analysis.selfcheck import SelfCheckConfig, run_selfcheck
from specviz.analysis.trace import first_parting
from specviz.catalogue import DRAFTER_CATALOGUE
from specviz.models.loading import load_pair

SMALL = SelfCheckConfig(pair="tiny-code", device="cpu", minutes=4, precisions=("float32",), gammas=(1, 3),
                        max_new_tokens=8, num_prompts=1, bench_gammas=(2,), bench_trees=(0,), temperatures=(0.0,),
                        skip=("record", "against generate", "profile", "architectures", "slots off"))


def checked(config: SelfCheckConfig, out) -> tuple[bool, str, dict]:
    """(exact, what it printed, checks.json) of a self-check run in-process."""
    lines = []
    exact = run_selfcheck(config, out, lines.append)
    return exact, "\n".join(lines), json.loads((out / "checks.json").read_text())


def test_first_parting_counts_an_early_stop_as_parting():
    assert first_parting([1, 2, 3], [1, 2, 3]) is None
    assert first_parting([1, 2, 3], [1, 5, 3]) == 1
    assert first_parting([1, 2], [1, 2, 3]) == 2


def test_the_self_check_passes_on_the_engine_and_reports_a_bench_for_every_drafter(tmp_path):
    exact, text, checks = checked(SMALL, tmp_path)
    (result,) = checks["exactness"]
    assert exact and result["precision"] == "float32" and result["num_checked"] > 0 and not result["partings"]
    assert f"{result['num_identical']}/{result['num_checked']}" in text and "verify vs steps" in text
    records = json.loads((tmp_path / "records.json").read_text())
    pair = load_pair("tiny-code", device="cpu", precision="float32")
    runnable = {info.name for info in DRAFTER_CATALOGUE if not pair.lacks_for(info)}
    assert len(records) == len(runnable) >= 2 and all(record["results"] for record in records.values())
    table = (tmp_path / "table.txt").read_text()
    assert table.startswith("selfcheck: tiny-code on cpu") and text.rstrip().endswith(table.rstrip())  # printed last


def test_the_self_check_in_bfloat16_measures_a_bitwise_verify_and_holds_lanes_to_it(tmp_path):
    exact, _, checks = checked(replace(SMALL, precisions=("bfloat16",), skip=(*SMALL.skip, "bench")), tmp_path)
    (result,) = checks["exactness"]
    assert result["invariance"]["bitwise"] and result["num_checked"] > 0
    assert exact and not [parting for parting in result["partings"] if parting["against"] == "target alone"]


def test_the_self_check_fails_when_a_lane_parts(monkeypatch, tmp_path):
    real = specviz.analysis.selfcheck_measures.speculative_decode

    def off_by_one(pair, ids, config, *args, **kwargs):  # every token one id higher: never the target's
        for event in real(pair, ids, config, *args, **kwargs):
            if hasattr(event, "emitted_ids"):
                event = type(event)(**{**event.__dict__, "emitted_ids": tuple(i + 1 for i in event.emitted_ids)})
            yield event

    monkeypatch.setattr(specviz.analysis.selfcheck_measures, "speculative_decode", off_by_one)
    exact, text, checks = checked(replace(SMALL, skip=(*SMALL.skip, "bench")), tmp_path)
    assert not exact and "from the target alone" in text
    assert checks["exactness"][0]["partings"][0]["position"] == 1  # the prefill picks token 0, a round token 1


def test_the_self_check_refuses_model_flags_it_would_not_use(capsys):
    from specviz.cli.commands import main

    with pytest.raises(SystemExit):  # it loads the preset itself, in each precision
        main(["selfcheck", "--head", "some-folder"])
    assert "unrecognized arguments: --head some-folder" in capsys.readouterr().err


def test_the_self_check_times_transformers_and_the_rounds_host_work(tmp_path):
    """What users already run (plain generate() and its assisted generation with the draft model) beside the
    lanes, added to the pair's own drafter's record; and a round's host time and reads, the GPU run's pace."""
    config = replace(SMALL, skip=("record", "architectures", "slots off"), max_new_tokens=12, num_prompts=2)
    exact, text, checks = checked(config, tmp_path)
    assert exact
    (default,) = [row for row in checks["against_hf"] if row["gamma"] is None]
    assert default["num_runs"] >= 1 and 0 < default["median_alone_over_plain"] and 0 < default["median_ours_over_hf"]
    own = next(iter(json.loads((tmp_path / "records.json").read_text()).values()))
    assert own["against_hf"] == checks["against_hf"]
    host = checks["host_time"]
    assert host["num_rounds"] > 0 and host["reads"] >= 1 and 0 < host["model_s"] < host["wall_s"] and host["c"] > 0
    table = (tmp_path / "table.txt").read_text()
    assert "against transformers (greedy" in table and "its assisted generation" in table
    assert "host reads a round" in (tmp_path / "profile.txt").read_text()


def test_the_self_check_gives_each_hub_architecture_its_verdict_and_holds_the_exact_ones_to_the_target_alone(tmp_path):
    """Tiny random models of the hub's architectures (analysis.architectures), on this machine: slots serve the
    attention models transformers' interface computes, the others say why not, recurrent ones are refused; the
    same run on a lent GPU captures every served one in CUDA graphs."""
    from specviz.analysis.architectures import ARCHITECTURES, EXACT, NOT_GUARANTEED, REFUSED

    only = replace(SMALL, skip=("exactness", "bench", "record", "against generate", "profile", "slots off"))
    exact, text, checks = checked(only, tmp_path)
    results = {result["arch"]: result for result in checks["architectures"]}
    assert set(results) == set(ARCHITECTURES) and exact
    assert {result["verdict"] for result in results.values()} == {EXACT, NOT_GUARANTEED, REFUSED}
    for arch, result in results.items():
        assert result["verdict"] == result["expected"], result
        assert (result["runs"] == 3 and result["parted"] == result["reference_parted"] == 0
                if result["verdict"] == EXACT else True), result
    assert sum(result["rejections"] for result in results.values() if result["verdict"] == EXACT) > 0  # drafts fail too
    assert "recurrent model" in results["mamba"]["reason"] and "experts" not in results["llama"]["reason"]
    assert f"architectures: {len(ARCHITECTURES)}/{len(ARCHITECTURES)} as expected; greedy runs parted where exact: 0/48, of the reference lane 0/48" in text
