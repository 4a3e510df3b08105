"""python -m specviz generate | bench, as a user runs them (a subprocess, JSON on stdout)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from specviz.analysis.architectures import tiny_model
from specviz.analysis.expectations import read_record, run_spread
from tests.tiny_models import make_model, make_tokenizer, noisy_copy

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str, timeout: int = 240, typed: str | None = None) -> subprocess.CompletedProcess:
    """The command line as a user runs it; `typed`: what they would type at a prompt, if one appeared."""
    return subprocess.run(
        [sys.executable, "-m", "specviz", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
        input=typed,
    )


@pytest.fixture(scope="module")
def local_pair(tmp_path_factory) -> tuple[str, str]:
    """Two tiny GPT-2 folders with one shared word-level tokenizer, as a user would pass them."""
    folder = tmp_path_factory.mktemp("pair")
    tokenizer = make_tokenizer(["<s>", "</s>", "<pad>"] + [f"w{i}" for i in range(61)])
    target = make_model("gpt2", vocab_size=64, hidden=32)
    paths = []
    for name, model in (("target", target), ("draft", noisy_copy(target, 0.03))):
        model.save_pretrained(folder / name)
        tokenizer.save_pretrained(folder / name)
        paths.append(str(folder / name))
    return paths[0], paths[1]


def generate_json(local_pair, *extra: str) -> dict:
    target, draft = local_pair
    result = run_cli(
        "generate", "--prompt", "w1 w2 w3", "--target", target, "--draft", draft, "--max-new-tokens", "24",
        "--ignore-eos", "--json", *extra,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_generate_greedy_lanes_are_identical(local_pair):
    report = generate_json(local_pair, "--gamma", "3", "--temperature", "0")
    baseline, speculative = report["baseline"], report["speculative"]
    assert baseline["token_ids"] == speculative["token_ids"]
    assert len(baseline["token_ids"]) == 24 and report["identical_outputs"] is True
    assert baseline["target_forward_passes"] == 24  # prefill + one per further token
    rounds = speculative["rounds"]
    assert speculative["target_forward_passes"] == 1 + len(rounds) < 24
    emitted = [speculative["token_ids"][0]] + [i for r in rounds for i in r["emitted_ids"]]
    assert emitted == speculative["token_ids"]
    for r in rounds:
        assert r["next_kind"] in ("resample", "bonus")
        assert r["num_accepted"] == len(r["drafted_ids"]) if r["next_kind"] == "bonus" else r["num_accepted"] < len(r["drafted_ids"])
    assert 0 <= speculative["acceptance_rate"] <= 1
    assert speculative["mean_tokens_per_round"] == pytest.approx((24 - 1) / len(rounds))
    assert report["speedup"] > 0 and speculative["wall_s"] > 0 and baseline["wall_s"] > 0
    assert report["config"]["gamma"] == 3


def test_generate_with_a_tree_writes_the_target_alones_text(local_pair):
    report = generate_json(local_pair, "--gamma", "3", "--tree", "6", "--temperature", "0")
    baseline, speculative = report["baseline"], report["speculative"]
    assert baseline["token_ids"] == speculative["token_ids"] and report["config"]["tree"] == 6
    assert speculative["target_forward_passes"] == 1 + len(speculative["rounds"]) < 24
    # each round's tree in the JSON: the nodes a round drafted, its kept path among them
    trees = [r["tree"] for r in speculative["rounds"] if r["tree"]]
    assert trees and all(node["parent"] < index for tree in trees for index, node in enumerate(tree))
    for tree, r in ((r["tree"], r) for r in speculative["rounds"] if r["tree"]):
        kept = [node["id"] for node in tree if node["verdict"] == "accepted"]
        assert kept == r["emitted_ids"][: len(kept)]


def test_bench_takes_a_list_of_tree_budgets(tmp_path):
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([{"prompt": "import os\nimport", "chat": False}]))
    result = run_cli("bench", "--pair", "tiny-code", "--gammas", "2", "--tree", "0,4", "--temperature", "0",
                     "--repeats", "1", "--max-new-tokens", "12", "--ignore-eos", "--prompts", str(prompts), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert {(r["gamma"], r["tree"]) for r in report["results"]} == {(2, 0), (2, 4)}
    assert report["config"]["trees"] == [0, 4] and all(r["num_diverged"] == 0 for r in report["results"])


def test_bench_counts_partings_of_sampled_runs_where_top_k_1_leaves_one_token(tmp_path):
    """At top-k 1 a sampled run must write the greedy text, so the bench counts its partings as a greedy run's;
    with top-k 2 the lanes sample for real and it says nothing."""
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([{"prompt": "def add(a, b):", "chat": False}, {"prompt": "import os\nimport", "chat": False}]))
    for top_k, expected in (("1", 0), ("2", None)):
        result = run_cli("bench", "--pair", "tiny-code", "--gammas", "3", "--tree", "0,4", "--temperature", "0.8",
                         "--top-k", top_k, "--repeats", "1", "--max-new-tokens", "16", "--ignore-eos",
                         "--prompts", str(prompts), "--json")
        assert result.returncode == 0, result.stderr[-2000:]
        results = json.loads(result.stdout)["results"]
        assert len(results) == 2 and all(r["num_diverged"] == expected for r in results), results


def test_generate_sampled_run_completes(local_pair):
    report = generate_json(local_pair, "--temperature", "1", "--top-p", "0.9", "--seed", "7")
    assert len(report["speculative"]["token_ids"]) == 24
    assert report["config"]["temperature"] == 1.0 and report["config"]["top_p"] == 0.9
    assert isinstance(report["speculative"]["text"], str)


def test_generate_bad_input_is_a_clear_error_not_a_traceback(local_pair):
    target, draft = local_pair
    result = run_cli("generate", "--prompt", "w1", "--target", target, "--draft", draft, "--top-p", "1.5")
    assert result.returncode == 2
    assert "top-p must be in (0, 1]" in result.stderr and "Traceback" not in result.stderr
    result = run_cli("generate", "--prompt", "   ", "--target", target, "--draft", draft)
    assert result.returncode == 2 and "prompt is empty" in result.stderr


def test_generate_refuses_an_empty_prompt_before_loading_the_pair(monkeypatch, capsys):
    """An empty prompt needs no models to be refused: the message comes at once, not after the default pair's load."""
    from specviz.cli import commands
    from specviz.models import loading

    def no_load(*args, **kwargs):
        raise AssertionError("the pair was loaded for an empty prompt")

    monkeypatch.setattr(loading, "load_pair", no_load)
    assert commands.main(["generate", "--threads", "1", " \n "]) == 2
    assert "the prompt is empty" in capsys.readouterr().err


def test_generate_takes_the_prompt_on_its_own_as_it_takes_its_flag(local_pair):
    """`generate "…"`, as a newcomer types it, runs what `generate --prompt "…"` runs; no prompt, or two, is an
    error that says how to give one."""
    from specviz.cli.arguments import parse_arguments

    target, draft = local_pair
    result = run_cli("generate", "w1 w2 w3", "--target", target, "--draft", draft, "--max-new-tokens", "24",
                     "--ignore-eos", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["baseline"]["token_ids"] == generate_json(local_pair)["baseline"]["token_ids"]
    assert parse_arguments(["generate", "--prompt", "hi"]).prompt == parse_arguments(["generate", "hi"]).prompt == "hi"
    assert not hasattr(parse_arguments(["generate", "hi"]), "prompt_given")
    for args, said in ((["generate"], 'a prompt is needed: python -m specviz generate "your prompt"'),
                       (["generate", "hi", "--prompt", "hi"], "the prompt was given twice")):
        result = run_cli(*args)
        assert result.returncode == 2 and said in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_bench_json_on_the_tiny_code_pair(tmp_path):
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(["def f(x):\n    return", {"prompt": "import os\nimport", "chat": False}]))
    result = run_cli(
        "bench", "--pair", "tiny-code", "--gammas", "1,3", "--temperature", "0,1", "--repeats", "2",
        "--max-new-tokens", "12", "--ignore-eos", "--prompts", str(prompts), "--json",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    cells = {(r["gamma"], r["temperature"]) for r in report["results"]}
    assert cells == {(1, 0.0), (3, 0.0), (1, 1.0), (3, 1.0)}
    for r in report["results"]:
        assert r["num_runs"] == 4  # 2 prompts × 2 repeats
        assert r["min_speedup"] <= r["median_speedup"] <= r["max_speedup"]
        assert 0 <= r["acceptance_rate"] <= 1 and r["c"] > 0
        assert 1 <= r["tokens_per_target_forward"] <= r["gamma"] + 1
        # every run kept, so a reader can tell timing's noise (repeats of a prompt) from the prompts' own range
        assert len(r["speedups"]) == 4 and statistics.median(r["speedups"]) == r["median_speedup"]
        assert (min(r["speedups"]), max(r["speedups"])) == (r["min_speedup"], r["max_speedup"])
    assert set(report["recommended_gamma"]) == {"0.0", "1.0"}
    record = tmp_path / "record.json"
    record.write_text(result.stdout)
    spread = run_spread(read_record(record), 0.0)
    assert "ran each of its 2 prompts (custom) 2 times, greedy" in spread.source
    assert spread.low_ratio <= 1.0 <= spread.high_ratio


def test_the_bench_table_recommends_no_gamma_when_none_beats_the_target_alone():
    from specviz.analysis.bench import BenchResult, format_table, payoff_of

    def cell(gamma, median, low, high, temperature=0.0):
        return BenchResult(gamma, temperature, median, low, high, 0.33, 1.4, 0.06, 1.7, 15.0, 15.0 * median, 0.8, 11, 0)

    slow = [cell(2, 0.75, 0.5, 1.1), cell(3, 0.8, 0.6, 1.05)]
    assert payoff_of(slow, 0.0).recommended_gamma is None
    table = format_table(slow)
    assert "recommended none: the target alone is faster here" in table and "pays" not in table
    fast = [cell(2, 1.3, 1.1, 1.5), cell(3, 1.4, 1.2, 1.6)]
    # γ = 2's median lies inside γ = 3's spread: a tie within the noise, which goes to the smaller γ
    assert payoff_of(fast, 0.0).recommended_gamma == 2 and "recommended γ = 2" in format_table(fast)


def test_the_rule_picks_the_tree_budget_as_it_picks_gamma():
    """One rule over every (γ, tree budget) cell; a tie within the noise goes to the cheaper setup,
    a chain before a tree, and a tree only where it beats the chains beyond the noise."""
    from dataclasses import replace

    from specviz.analysis.bench import BenchResult, format_table, payoff_of, recommendation_record

    def cell(gamma, tree, median, low, high):
        return replace(BenchResult(gamma, 0.0, median, low, high, 0.5, 1.8, 0.05, 1.2, 15.0, 15.0 * median, 1.5, 24, 0),
                       tree=tree)

    tied = [cell(3, 0, 1.35, 1.2, 1.5), cell(3, 8, 1.40, 1.25, 1.55)]  # the tree's median inside the chain's noise
    assert (payoff_of(tied, 0.0).recommended_gamma, payoff_of(tied, 0.0).recommended_tree) == (3, 0)
    assert "recommended γ = 3: the best median is γ = 3, tree 8's 1.40×" in format_table(tied)
    assert "a chain before a tree" in format_table(tied)
    better = [cell(3, 0, 1.20, 1.1, 1.3), cell(3, 8, 1.60, 1.45, 1.8), cell(3, 16, 1.62, 1.5, 1.8)]
    record = recommendation_record(better, 0.0)
    assert (record["gamma"], record["tree"]) == (3, 8)  # 16 ties with 8, and the smaller tree wins the tie
    assert record["tied"] == ["γ = 3, tree 8", "γ = 3, tree 16"]


def test_generate_prints_the_pages_verdict(local_pair):
    target, draft = local_pair
    result = run_cli("generate", "--prompt", "w1 w2 w3", "--target", target, "--draft", draft, "--max-new-tokens", "12")
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(("Speculation pays here:", "Not shown to pay here:", "Here speculation does not pay:")), last
    assert "one noisy sample" in last and "recommended γ" not in result.stdout
    # the promise first, as the page's card puts it: the same text, checked, and whether it is guaranteed here
    assert "same text as the target alone: yes (12 tokens, checked token by token · exact by construction here)" in result.stdout
    assert "not guaranteed here" not in result.stdout


def test_generate_says_when_the_same_text_is_not_guaranteed_and_why(tmp_path):
    """A hub architecture slots cannot serve (Falcon's own attention code): the terminal says so, with the
    reason the page's "Exact here" gives."""
    tokenizer = make_tokenizer(["<s>", "</s>", "<pad>"] + [f"w{i}" for i in range(125)])
    target = tiny_model("falcon")
    paths = []
    for name, model in (("target", target), ("draft", noisy_copy(target, 0.03))):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
        paths.append(str(tmp_path / name))
    result = run_cli("generate", "w1 w2 w3", "--target", paths[0], "--draft", paths[1], "--max-new-tokens", "8",
                     "--no-chat")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "checked token by token · not guaranteed here)" in result.stdout
    assert ("\nnot guaranteed here: this model has attention written outside transformers' attention interface"
            in result.stdout)


def test_a_model_that_needs_its_own_code_is_refused_without_asking(local_pair, tmp_path):
    """A repository with code of its own (its config's auto_map): transformers asked "Do you wish to run the custom
    code? [y/N]" on the terminal, three times, and a "y" would have run it; specviz never runs a model's own code,
    says so, and asks nothing."""
    folder = tmp_path / "custom-code"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "my_custom_lm", "architectures": ["MyCustomLM"], "vocab_size": 64,
        "auto_map": {"AutoConfig": "configuration_my.MyConfig", "AutoModelForCausalLM": "modeling_my.MyCustomLM"}}))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((Path(local_pair[0]) / name).read_bytes())
    result = run_cli("generate", "w1 w2", "--target", str(folder), "--draft", local_pair[1], "--no-chat", typed="y\n")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Do you wish to run the custom code" not in result.stdout + result.stderr
    assert "needs code of its own from its repository (transformers' trust_remote_code), which specviz never runs" in result.stderr


def test_the_terminal_prints_lanes_taking_turns_one_at_a_time_and_keeps_a_lane_cut_short():
    """cli.terminal.lane_by_lane: the lanes' turns regrouped lane by lane, in the order they began, each lane's own
    order kept; a lane without a FinishEvent (a stopped run) still gives every event it has."""
    from specviz.cli.terminal import lane_by_lane
    from specviz.decoding.events import take_turns
    from tests.test_live import iter_events, lane_events

    baseline, speculative = lane_events("baseline", 6), lane_events("speculative", 4)
    turns = list(take_turns([("baseline", iter_events(baseline)), ("speculative", iter_events(speculative))]))
    assert [e.lane for e in turns] != sorted(e.lane for e in turns)  # interleaved
    assert list(lane_by_lane(turns)) == baseline + speculative
    cut = [event for event in turns if event != speculative[-1]]  # the speculative lane stopped before its end
    assert list(lane_by_lane(cut)) == baseline + speculative[:-1]
    cut = [event for event in turns if event != baseline[-1]]  # the first lane cut: the other waits, then comes
    assert list(lane_by_lane(cut)) == baseline[:-1] + speculative


def test_bench_says_what_is_wrong_with_a_prompts_file(tmp_path, capsys):
    """A prompts file that is missing, a folder, not JSON or empty: one line saying so, before any model loads (a
    folder gave a traceback)."""
    from specviz.cli import commands

    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "empty.json").write_text("[]", encoding="utf-8")
    expected = {tmp_path / "missing.json": "cannot read the prompts file", tmp_path: "cannot read the prompts file",
                tmp_path / "broken.json": "is not JSON", tmp_path / "empty.json": "holds no usable prompts"}
    for path, words in expected.items():
        assert commands.main(["bench", "--prompts", str(path)]) == 2
        error = capsys.readouterr().err
        assert words in error and "Traceback" not in error, error


def test_generate_refuses_a_save_path_it_could_not_write_before_the_run(monkeypatch, capsys, tmp_path):
    """`--save` naming a folder, or a file in a missing folder, is said before the models load: it was found only
    after the whole run, as a traceback (a folder) or a bare errno."""
    from specviz.cli import commands
    from specviz.models import loading

    def no_load(*args, **kwargs):
        raise AssertionError("the pair was loaded for a run whose file cannot be saved")

    monkeypatch.setattr(loading, "load_pair", no_load)
    for path, words in ((tmp_path, "that is a folder"), (tmp_path / "missing" / "run.json", "does not exist")):
        assert commands.main(["generate", "--threads", "1", "--save", str(path), "Name a blue fruit."]) == 2
        error = capsys.readouterr().err
        assert words in error and "Traceback" not in error, error
