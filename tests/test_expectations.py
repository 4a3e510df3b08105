"""The bench's kept records (assets/bench/), what they say about a machine, and the README's speed
table, which must give the records' own figures."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specviz.analysis import expectations
from specviz.analysis.expectations import (BENCH_DIR, FASTER_ALONE, against_plain_text, expect, invocation, load_records, machine_kind, read_record,
                                           record_name, run_spread, speed_table_cells, speed_table_row)
from specviz.models.presets import DEFAULT_PRESET

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"


def a_record(kind: str = "cpu-native-bf16", precision: str = "bfloat16", prompt_set: str = "examples",
             median: float = 1.4, pair: str = DEFAULT_PRESET, threads: int = 1) -> dict:
    """A record as `bench --json` writes it, with one greedy and one sampled cell."""
    cell = dict(gamma=3, median_speedup=median, min_speedup=median - 0.3, max_speedup=median + 0.5, acceptance_rate=0.5,
                tokens_per_target_forward=1.6, c=0.04, verify_cost=1.1, median_baseline_tokens_per_s=17.0,
                median_speculative_tokens_per_s=24.0, predicted_speedup=1.7, num_runs=33)
    return {
        "pair": pair, "precision": precision, "num_prompts": 11,
        "config": {"gammas": [3], "temperatures": [0.0, 0.7], "repeats": 3, "drafter": "head"},
        "results": [dict(cell, temperature=0.0, num_diverged=0), dict(cell, temperature=0.7, num_diverged=None, median_speedup=1.3)],
        "prompts": {"file": "assets/prompts.json", "set": prompt_set},
        "machine": {"kind": kind, "cpu": "Some CPU", "gpu": None, "threads": threads, "env": {}},
        "date": "2026-11-25T17:45:00+00:00",
        "command": "python -m specviz bench --gammas 3",
    }


def write_records(folder: Path, *reports: dict) -> list:
    for report in reports:
        (folder / record_name(report)).write_text(json.dumps(report))
    return load_records(folder)


# --- the README's table against the kept records ---------------------------------------------------------


def readme_table_rows() -> dict[str, dict[str, str]]:
    """The README speed table's rows, by the record file each links to: {file: {column: cell}}."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| machine | precision |"))
    header = [cell.strip() for cell in lines[start].strip("|").split("|")]
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = dict(zip(header, (cell.strip() for cell in line.strip().strip("|").split("|"))))
        file = re.search(r"assets/bench/([\w.-]+\.json)", cells["record"])
        assert file, f"a speed table row links no record: {line}"
        rows[file[1]] = cells
    return rows


def test_the_readme_speed_table_gives_the_records_figures():
    """Every figure in the README's speed table is its record's (regenerate the rows with
    `python -m specviz.analysis.expectations` after adding or replacing a record)."""
    rows = readme_table_rows()
    assert rows, "the README has no speed table"
    for file, cells in rows.items():
        path = BENCH_DIR / file
        assert path.is_file(), f"the README's speed table links {file}, which assets/bench/ lacks"
        for column, value in speed_table_cells(read_record(path)).items():
            assert cells[column] == value, f"{file}, {column}: README says {cells[column]!r}, the record {value!r}"


def test_every_record_of_the_default_pair_is_in_the_readme_table():
    in_table = set(readme_table_rows())
    kept = {r.file for r in load_records() if r.pair == DEFAULT_PRESET}
    assert kept <= in_table, f"records missing from the README's speed table: {sorted(kept - in_table)}"


def test_the_kept_records_are_named_by_what_they_measured():
    """One file per (machine kind, precision, prompt set), named so; each says where it came from."""
    paths = sorted(BENCH_DIR.glob("*.json"))
    for path in paths:
        report = json.loads(path.read_text(encoding="utf-8"))
        assert path.name == record_name(report)
        record = read_record(path)
        assert re.search(r"python -m specviz (bench|gpurun measure|selfcheck) ", record.command), record.command
        assert record.cells and all(c.low <= c.median <= c.high for c in record.cells)
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", record.date)
    bench_page = (BENCH_DIR / "README.md").read_text(encoding="utf-8")
    for path in paths:
        assert path.name in bench_page, f"assets/bench/README.md does not list {path.name} and its command"


def test_a_table_row_is_built_from_its_record(tmp_path):
    [record] = write_records(tmp_path, a_record(median=1.39))
    row = speed_table_row(record)
    assert "1.39× (1.09–1.89)" in row and "1.30× (1.09–1.89)" in row and "17.0 tok/s" in row and "0/33" in row
    assert "| bfloat16 |" in row and "default" not in row and "examples × 3" in row  # float32 is every CPU's default
    assert f"[{record.file.removesuffix('.json')}](assets/bench/{record.file})" in row
    for kind, default in (("cpu-native-bf16", "float32"), ("cuda", "bfloat16")):
        folder = tmp_path / kind
        folder.mkdir()
        [record] = write_records(folder, a_record(kind, default))
        assert f"**{default}** (default)" in speed_table_row(record)


# --- what to expect on a machine ----------------------------------------------------------------------


def test_the_matching_records_answer_with_examples_first(tmp_path):
    records = write_records(tmp_path, a_record(prompt_set="held-out", median=1.38), a_record(median=1.39),
                            a_record("cpu-avx2", "float32", median=1.25), a_record(threads=2, prompt_set="examples", median=1.29,
                                                                                  precision="float32"))
    expectation = expect("cpu-native-bf16", "bfloat16", records)
    assert [r.prompt_set for r in expectation.records] == ["examples", "held-out"]
    text = expectation.text()
    assert text.startswith("What to expect here with the smollm2-135m pair (a CPU with native bf16 but no AMX, in bfloat16, one thread)")
    # one setting for both figures: said once, each figure named by its prompts
    assert ("at γ = 3 with the EAGLE-style head, greedy, over the target alone, the bench measured 1.39× (1.09–1.89) "
            "on the example prompts and 1.38× (1.08–1.88) on held-out prompts (Some, 2026-11-25).") in text
    assert text.count("γ = 3") == 1
    assert "1.25×" not in text and "1.29×" not in text  # another machine's, another thread count's
    assert expect("cpu-avx2", "float32", records).records[0].kind == "cpu-avx2"


def test_records_of_one_kind_from_two_machines_each_name_their_own(tmp_path):
    """A kind emulated on another CPU (oneDNN held below AMX) sits beside the real one's record: the page named
    the first record's machine and date for both figures."""
    emulated = a_record(prompt_set="held-out", median=1.40)
    emulated["machine"] = {**emulated["machine"], "cpu": "Intel Xeon", "env": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}}
    emulated["date"] = "2026-12-03T22:51:00+00:00"
    text = expect("cpu-native-bf16", "bfloat16", write_records(tmp_path, a_record(median=1.39), emulated)).text()
    assert "1.39× (1.09–1.89) on the example prompts (Some, 2026-11-25)" in text
    assert "1.40× (1.10–1.90) on held-out prompts (Intel Xeon limited to AVX512_CORE_BF16, 2026-12-03). One run" in text


def test_figures_of_different_settings_each_name_their_own(tmp_path):
    """Records whose chosen cells are other settings (γ 5, the draft model) are not one setting's figures."""
    other = a_record(prompt_set="held-out", median=1.40)
    other["config"]["drafter"] = "model"
    text = expect("cpu-native-bf16", "bfloat16", write_records(tmp_path, a_record(median=1.39), other)).text()
    assert ("the bench measured 1.39× (1.09–1.89) at γ = 3 with the EAGLE-style head on the example prompts and "
            "1.40× (1.10–1.90) at γ = 3 with the draft model on held-out prompts, greedy, over the target alone") in text


def timed_record(prompt_set: str, alone: float, ours: float, tokens: tuple[int, int] | None = None,
                 kind: str = "cpu-amx", assisted: float = 1.2) -> dict:
    """A float32 record that also timed plain transformers (`bench --against-hf`) at γ 3, greedy: the target alone
    and the speculative lane over plain generate(), transformers' assisted generation over it; `tokens` its prompts'
    shortest and longest length."""
    report = a_record(kind, "float32", prompt_set=prompt_set)
    report["against_hf"] = [dict(temperature=0.0, gamma=3, median_alone_over_plain=alone, median_ours_over_plain=ours,
                                 median_hf_speedup=assisted)]
    if tokens:
        report["prompt_tokens"] = {"min": tokens[0], "max": tokens[1]}
    return report


def test_the_comparison_with_plain_transformers_gives_each_lanes_range_over_the_prompts(tmp_path):
    """A median alone hides the prompts that ran slower: the table and the page give the range beside it."""
    report = timed_record("held-out", 1.36, 2.02)
    report["against_hf"][0].update(min_alone_over_plain=1.12, max_alone_over_plain=1.92, min_ours_over_plain=0.97,
                                   max_ours_over_plain=2.66)
    [record] = write_records(tmp_path, report)
    assert against_plain_text(record) == "γ 3: alone 1.36× (1.12–1.92), speculative 2.02× (0.97–2.66); transformers' assisted 1.20×"
    line = expect("cpu-amx", "float32", [record]).against_plain_text()
    assert "Prompt by prompt the target alone ranged 1.12–1.92×, the lane 0.97–2.66×." in line
    # a record that kept medians only says no range rather than an invented one
    [bare] = write_records(tmp_path, timed_record("held-out", 1.36, 2.02))
    assert against_plain_text(bare) == "γ 3: alone 1.36×, speculative 2.02×; transformers' assisted 1.20×"
    assert "Prompt by prompt" not in expect("cpu-amx", "float32", [bare]).against_plain_text()


@pytest.mark.parametrize("alone, says_why", [(1.52, True), (1.02, False)])
def test_the_line_against_plain_transformers_says_why_a_faster_target_alone_is_faster(tmp_path, alone, says_why):
    report = timed_record("held-out", alone, 2.1, kind="cpu-avx2", assisted=0.76)
    line = expect("cpu-avx2", "float32", write_records(tmp_path, report)).against_plain_text()
    assert f"specviz's target alone ran at {alone:.2f}× transformers' generate()" in line
    assert "its speculative lane at 2.10× (γ = 3)" in line and "assisted generation with the draft model at 0.76×" in line
    assert (FASTER_ALONE in line) is says_why


def test_a_long_prompts_run_reads_the_records_of_long_prompts_and_a_short_ones_never_does(tmp_path):
    """On a CPU with AMX transformers reads a long prompt in bfloat16 far faster than any float32 pass, so specviz
    gains less against it there: a run of 2,000 tokens must not be told the short prompts' 1.99×."""
    records = write_records(tmp_path, timed_record("held-out", 1.45, 1.99, (30, 70)),
                            timed_record("long", 1.14, 1.29, (259, 2471)))
    expectation = expect("cpu-amx", "float32", records)
    assert [record.prompt_set for record in expectation.records] == ["held-out"]  # the pick, the band, the text
    short = expectation.against_plain_text(40)
    assert "held-out prompts of 30–70 tokens" in short and "at 1.99× (γ = 3)" in short and "long" not in short
    long = expectation.against_plain_text(2000)
    assert "long prompts of 259–2,471 tokens" in long and "target alone ran at 1.14×" in long and "at 1.29×" in long
    assert "Those prompts" not in long


@pytest.mark.parametrize("tokens, said", [((30, 70), "Those prompts were at most 70 tokens; this one has 2,000"),
                                          (None, "Those prompts were short; this one has 2,000")])
def test_a_long_prompts_run_without_records_of_long_prompts_is_told_it_gains_less(tmp_path, tokens, said):
    expectation = expect("cpu-amx", "float32", write_records(tmp_path, timed_record("held-out", 1.45, 1.99, tokens)))
    line = expectation.against_plain_text(2000)
    assert "at 1.99× (γ = 3)" in line and said in line and "over a long prompt specviz gains less" in line
    assert "Those prompts" not in expectation.against_plain_text(255)


def test_the_bench_keeps_how_long_its_prompts_were():
    from specviz.analysis.bench import prompt_token_range

    assert prompt_token_range([[1] * 12, [2] * 300, [3] * 40]) == {"min": 12, "max": 300}


def test_transformers_in_another_precision_is_named_on_the_page_and_in_the_table(tmp_path):
    """`bench --hf-dtype bfloat16` on a float32 run: the figures compare with transformers in bfloat16, and say so."""
    report = timed_record("held-out", 1.3, 1.7)
    report["against_hf_precision"] = "bfloat16"
    [record] = write_records(tmp_path, report)
    line = expect("cpu-amx", "float32", [record]).against_plain_text()
    assert "transformers' generate() (transformers in bfloat16, specviz in float32)" in line
    assert "(transformers in bfloat16)" in speed_table_row(record)
    report["against_hf_precision"] = "float32"  # the same as ours: nothing to say
    [same] = write_records(tmp_path, report)
    assert "bfloat16" not in expect("cpu-amx", "float32", [same]).against_plain_text()


def test_one_runs_band_is_the_noise_of_repeats_of_one_prompt_where_the_record_kept_every_run(tmp_path):
    # two prompts, three repeats, in the bench's order (repeat by repeat): one prompt near 1×, the other near 2×
    runs = [0.95, 1.90, 1.00, 2.00, 1.05, 2.20]
    report = a_record(median=1.475)
    report["num_prompts"] = 2
    report["results"][0].update(num_runs=6, min_speedup=0.95, max_speedup=2.20, speedups=runs)
    [record] = write_records(tmp_path, report)
    spread = run_spread(record, 0.0)
    # each run against its own prompt's median: 0.95–1.05 and 0.95–1.10, not 0.64–1.49 of the pooled median
    assert spread.low_ratio == pytest.approx(0.95) and spread.high_ratio == pytest.approx(1.10)
    assert "ran each of its 2 example prompts 3 times, greedy" in spread.source
    assert "the prompts themselves ranged 0.95–2.20×" in spread.source
    # a record from before every run was kept: the pooled range, wider, never narrower
    del report["results"][0]["speedups"]
    (tmp_path / record.file).write_text(json.dumps(report))
    [older] = load_records(tmp_path)
    spread = run_spread(older, 0.0)
    assert spread.low_ratio == pytest.approx(0.95 / 1.475) and spread.high_ratio == pytest.approx(2.20 / 1.475)
    assert spread.source.startswith("the bench's 6 greedy runs of the example prompts")


def kept_runs(report: dict, prompts: int, runs: list[float], prompt_set: str) -> dict:
    """`report` as the bench writes it since it keeps every run: each cell's runs, repeat by repeat."""
    report["num_prompts"] = prompts
    report["prompts"] = {**report["prompts"], "set": prompt_set}
    report["config"] = {**report["config"], "repeats": len(runs) // prompts}
    for cell in report["results"]:
        cell.update(num_runs=len(runs), min_speedup=min(runs), max_speedup=max(runs), speedups=runs)
    return report


def test_one_runs_band_is_the_widest_that_repeats_measured_in_any_matching_record(tmp_path, monkeypatch):
    """On one AVX2 EPYC the example prompts' 3 runs each moved 96–105 % and the held-out prompts' 2 each 91–109 %:
    the page took the first, and a later run of an example prompt read 1.45× where it said 1.54–1.68×."""
    examples = kept_runs(a_gpu_record(1.4), 2, [0.98, 1.96, 1.00, 2.00, 1.02, 2.04], "examples")
    held_out = kept_runs(a_gpu_record(1.4), 2, [0.90, 1.60, 1.10, 1.60], "held-out")
    records = write_records(tmp_path, examples, held_out)
    assert [r.prompt_set for r in expect("cuda", "bfloat16", records).records] == ["examples", "held-out"]
    monkeypatch.setattr(expectations, "load_records", lambda folder=None: records)
    clear_caches()
    try:
        spread = expectations.spread_here(DEFAULT_PRESET, "bfloat16", 0.0, "cuda")
        assert spread.low_ratio == pytest.approx(0.90) and spread.high_ratio == pytest.approx(1.10)
        assert "held-out prompts 2 times" in spread.source
        # and "What to expect here" quotes that band, the one a run is judged by
        assert "repeats of one prompt moved 90%–110% of their median (held-out prompts, 2 each)" in expect(
            "cuda", "bfloat16", records).noise_text()
        # a record without kept runs lends its whole range only where no matching record kept its runs
        for report in (examples, held_out):
            for cell in report["results"]:
                del cell["speedups"]
        (tmp_path / "older").mkdir()
        older = write_records(tmp_path / "older", examples, held_out)
        monkeypatch.setattr(expectations, "load_records", lambda folder=None: older)
        clear_caches()
        whole = expectations.spread_here(DEFAULT_PRESET, "bfloat16", 0.0, "cuda")
        assert whole.source.startswith("the bench's 6 greedy runs of the example prompts")
    finally:  # the kept records again for the tests after this one
        clear_caches()


def clear_caches() -> None:
    """Forget what the page's cached readers of the records (expectations) read, after a test swapped the records."""
    for cached in (expectations.expect_here, expectations.bench_pick, expectations.spread_here,
                   expectations.gpu_text_for):
        cached.cache_clear()


def test_no_matching_record_is_said_and_no_figure_is_lent_as_this_machines(tmp_path):
    records = write_records(tmp_path, a_record(median=1.39), a_record("cpu-avx2", "float32", median=1.25),
                            a_record(precision="float32", median=1.46))
    expectation = expect("cuda", "bfloat16", records)
    assert expectation.records == ()
    text = expectation.text()
    assert text.startswith("No bench record matches this machine (a CUDA GPU, in bfloat16)")
    assert "Measured elsewhere" in text and "1.46×" in text and "1.25×" in text
    assert "1.39×" not in text  # only each machine's default precision is quoted (float32 on every CPU)
    assert expect("cuda", "bfloat16", []).text().startswith("No bench record yet for this machine")


def a_gpu_record(median: float = 1.13) -> dict:
    report = a_record("cuda", "bfloat16", "held-out", median=median, threads=16)
    report["machine"] = {**report["machine"], "gpu": "NVIDIA H200", "cuda": "13.0"}
    report["prompts"] = {**report["prompts"], "first": 8, "of": 24}
    return report


def test_a_gpu_record_is_named_for_its_gpu_and_read_on_any_cuda_host_whatever_its_threads(tmp_path):
    records = write_records(tmp_path, a_gpu_record(), a_record(median=1.39))
    assert [r.file for r in records if r.kind == "cuda"] == ["cuda-h200--bfloat16--held-out.json"]
    text = expect("cuda", "bfloat16", records).text()
    assert text.startswith("What to expect here with the smollm2-135m pair (a CUDA GPU, in bfloat16): the bench measured 1.13× (0.83–1.63)")
    # why, in the GPU record's own figures (expectations.gpu_why_text), never a CPU's
    assert expectations.gpu_why_text(next(r for r in records if r.kind == "cuda")) in text and "1.39×" not in text
    # its runs reach 0.83× and it kept none of them: that is not called noise, nor a gain
    assert "it kept no single runs, so the record cannot tell timing noise from what a prompt asks" in text
    assert "beyond the noise" not in text
    # a record without slots (the code before CUDA graphs) says a GPU now runs a forward nobody measured there
    assert "predate the CUDA graphs" in text and "predate" in expect("cpu-native-bf16", "bfloat16", records).text()
    slots_run = {**a_gpu_record(), "batch_invariant": {"bitwise": True, "attention": "specviz_slots"}}
    (tmp_path / "slots").mkdir()
    measured = write_records(tmp_path / "slots", slots_run)
    assert "predate" not in expect("cuda", "bfloat16", measured).text()
    gpu_row = speed_table_cells(next(r for r in records if r.kind == "cuda"))
    assert gpu_row["prompts × repeats"] == "held-out (first 11 of 24) × 3"  # a cut run says how far it got


def test_the_chosen_cell_is_named_by_its_tree_and_drafter(tmp_path):
    """The page's GPU figure was the record's chosen cell (a tree, or γ = 5) while a replay measured another: each
    figure says which setting it is, so the two do not read as one claim that disagrees with itself."""
    record = a_record("cuda", "bfloat16", "held-out", median=1.13, threads=16)
    record["config"]["drafter"] = "model"
    record["results"].append(dict(record["results"][0], gamma=5, tree=16, median_speedup=1.5))
    text = expect("cuda", "bfloat16", write_records(tmp_path, record)).text()
    assert "1.50× (0.83–1.63) at γ = 5, a tree of 16 with the draft model on held-out prompts" in text, text
    assert "1.13×" not in text


def test_a_cpu_page_also_says_what_the_pair_measured_on_a_gpu(tmp_path):
    """People come with GPU claims: the CPU visitor reads the GPU's own figure beside this machine's."""
    records = write_records(tmp_path, a_gpu_record(), a_record(median=1.39))
    text = expect("cpu-native-bf16", "bfloat16", records).text()
    assert "1.39×" in text and expectations.gpu_text(records) in text  # the one GPU sentence, from the GPU's record
    assert "1.13× (0.83–1.63) at γ = 3" in expectations.gpu_text(records)
    (tmp_path / "no-gpu").mkdir()
    without = write_records(tmp_path / "no-gpu", a_record(median=1.39))
    assert "On a GPU" not in expect("cpu-native-bf16", "bfloat16", without).text()


def test_another_pairs_records_are_not_the_default_pairs(tmp_path):
    records = write_records(tmp_path, a_record(pair="tiny-code"))
    assert expect("cpu-native-bf16", "bfloat16", records).records == ()
    (tmp_path / "old").mkdir()
    [old_name] = write_records(tmp_path / "old", a_record(pair="embedded"))
    assert old_name.pair == DEFAULT_PRESET  # a record made under the preset's old name still counts


def test_a_file_that_is_not_a_record_is_refused_by_name(tmp_path):
    (tmp_path / "notes.json").write_text('{"pair": "x"}')
    with pytest.raises(ValueError, match="notes.json is not a bench record"):
        load_records(tmp_path)


def test_the_machine_kind_follows_torchs_view_of_the_host(monkeypatch):
    import torch

    assert machine_kind("cuda") == "cuda" and machine_kind("meta") == "other"
    monkeypatch.setattr(expectations, "cpu_has_native_bf16", lambda: True)
    for amx, kind in ((True, "cpu-amx"), (False, "cpu-native-bf16")):
        monkeypatch.setattr(expectations, "cpu_has_amx", lambda a=amx: a)
        assert machine_kind("cpu") == kind
    monkeypatch.setattr(expectations, "cpu_has_native_bf16", lambda: False)
    for capability, kind in (("AVX512", "cpu-avx512"), ("AVX2", "cpu-avx2"), ("DEFAULT", "cpu-other")):
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda c=capability: c)
        assert machine_kind("cpu") == kind


def test_the_command_line_is_recorded_as_one_would_type_it(monkeypatch):
    for name in expectations.RECORDED_ENV:
        monkeypatch.delenv(name, raising=False)
    argv = ["/somewhere/specviz/__main__.py", "bench", "--prompts", "assets/prompts-heldout.json", "--json"]
    assert invocation(argv) == "python -m specviz bench --prompts assets/prompts-heldout.json --json"
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert invocation(argv).startswith("ATEN_CPU_CAPABILITY=avx2 python -m specviz bench ")
    # the switches that change which kernels a target runs are part of the command too (a record of torch's
    # operators without its SPECVIZ_FIXED_ROWS=0 would read as the default path's)
    for switch in ("SPECVIZ_FIXED_ROWS", "SPECVIZ_GGUF_BLOCKS", "SPECVIZ_SLOTS"):
        monkeypatch.setenv(switch, "0")
        assert f"{switch}=0 " in invocation(argv)


def test_the_bench_json_says_which_machine_and_command_gave_it(tmp_path):
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(["def f(x):\n    return"]))
    args = ["bench", "--pair", "tiny-code", "--gammas", "2", "--repeats", "1", "--max-new-tokens", "4",
            "--prompts", str(prompts), "--json"]
    result = subprocess.run([sys.executable, "-m", "specviz", *args], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    machine = report["machine"]
    assert machine["kind"] == machine_kind("cpu") and machine["threads"] == 1
    assert machine["torch"] and machine["cpu"] and isinstance(machine["native_bf16"], bool)
    # the host's limits that change what a bench measures come first (ATEN_CPU_CAPABILITY=avx2 … on a held-back host)
    limits = "".join(f"{name}={os.environ[name]} " for name in expectations.RECORDED_ENV if name in os.environ)
    assert report["command"].startswith(limits + "python -m specviz bench --pair tiny-code --gammas 2")
    assert report["prompts"] == {"file": None, "set": "custom"}
    assert re.match(r"\d{4}-\d\d-\d\dT", report["date"]) and report["batch_invariant"]["bitwise"] in (True, False)
    assert record_name(report) == f"{machine['kind']}--{report['precision']}--custom.json"


def test_the_shipped_prompt_files_are_recognised():
    examples = json.loads((REPO / "assets" / "prompts.json").read_text(encoding="utf-8"))
    texts = [e if isinstance(e, str) else e["prompt"] for e in examples]
    assert expectations.prompt_set_of(texts) == {"file": "assets/prompts.json", "set": "examples"}
    assert expectations.prompt_set_of(texts[:-1])["set"] == "custom"
