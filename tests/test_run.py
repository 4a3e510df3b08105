"""Runs as data: saved and reloaded whole (every event), replayed through the same rendering as
the live run, and unreadable or wrong-version files refused with a clear message."""

from __future__ import annotations

import gzip
import json
import pytest

from specviz.app import render
from specviz.app.inspector import words as inspector_words
from specviz.cli import main
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import decode_lanes
from specviz.decoding.events import PrefillEvent, RoundEvent, model_seconds
from specviz.analysis.confidence import judged_drafts
from specviz.analysis.run import IN_TURNS, RUN_VERSION, Run, RunFileError, recorded_runs, replay
from tests.tiny_models import tiny_pair

LANES = ("baseline", "speculative", "reference")


def decode_of(pair):
    """A decode that reads like text (the tiny pairs have no tokenizer)."""
    return lambda ids: "".join(f" t{i}" for i in ids)


def live_run(temperature: float = 0.8, drafter: str = "model", lanes=LANES) -> render.RunView:
    pair = tiny_pair("gpt_neox")
    prompt_ids = [9, 8, 7, 9, 8]
    config = DecodeConfig(gamma=3, temperature=temperature, top_k=20, max_new_tokens=16, seed=4, inspect=True,
                          stop_at_eos=False, drafter=drafter)
    view = render.RunView("nine eight seven", prompt_ids, config.gamma, {"temperature": temperature, "drafter": drafter,
                          "max_new_tokens": 16, "pair": "tiny", IN_TURNS: True}, run_id=1, lanes=lanes)
    view.live_order = []  # the events as the engine gave them
    for event in decode_lanes(pair, prompt_ids, config, lanes):
        view.add(event, decode_of(pair))
        view.live_order.append(event)
    return view


def test_a_run_whose_lanes_took_turns_replays_them_in_the_same_order(tmp_path):
    """A run file keeps each lane's events; the turns depend only on their recorded model seconds, so a saved run
    gives its events in the order the engine gave them. A run recorded before lanes took turns: one lane after
    another."""
    view = live_run()
    lanes = [event.lane for event in view.live_order]
    assert lanes[:2] == ["baseline", "speculative"] and lanes != sorted(lanes, key=LANES.index)  # turns were taken
    path = tmp_path / "run.json"
    view.run.save(path)
    assert Run.load(path).events() == view.live_order
    view.run.settings.pop(IN_TURNS)
    assert [event.lane for event in view.run.events()] == sorted(lanes, key=LANES.index)


def test_a_saved_run_reloads_equal_event_for_event(tmp_path):
    view = live_run()
    run = view.run
    assert list(run.lanes) == list(LANES) and run.done
    assert any(any(detail.residual_top for detail in event.details or ()) for event in run.lanes["speculative"].rounds)
    for name in ("run.json", "run.json.gz"):
        path = tmp_path / name
        run.save(path)
        loaded = Run.load(path)
        assert loaded.events() == run.events()  # every event, every field
        assert loaded.to_dict() == run.to_dict()
        assert loaded.texts == run.texts and loaded.settings == run.settings and loaded.prompt_ids == run.prompt_ids
        for lane in LANES:
            assert loaded.lanes[lane].timeline() == run.lanes[lane].timeline()
    assert (tmp_path / "run.json.gz").stat().st_size < (tmp_path / "run.json").stat().st_size / 3


@pytest.mark.parametrize("drafter", ["model", "prompt-lookup"])
def test_a_replay_renders_the_same_lanes_as_the_live_run(tmp_path, drafter):
    view = live_run(drafter=drafter)
    path = tmp_path / "run.json"
    view.run.save(path)
    saved = Run.load(path)
    replayed = render.RunView.replaying(saved, run_id=1)
    for event in replay(saved, speed=float("inf")):
        replayed.add(event, saved.replayed_decode)
    assert render.lanes_html(replayed, names=LANES) == render.lanes_html(view, names=LANES)
    assert render.stats_html(replayed) == render.stats_html(view)
    assert render.explain_html(replayed) == render.explain_html(view)
    chosen = inspector_words.default_round(view)
    assert inspector_words.inspector_html(replayed, chosen) == inspector_words.inspector_html(view, chosen)
    assert replayed.speculative.labels == view.speculative.labels


def test_replay_waits_each_events_recorded_time_divided_by_the_speed():
    run = live_run(lanes=("baseline", "speculative")).run
    waits = []
    events = list(replay(run, speed=4.0, sleep=waits.append))
    assert events == run.events()
    model_time = sum(model_seconds(event) for event in run.events())
    assert sum(waits) == pytest.approx(model_time / 4.0)
    assert model_seconds(run.lanes["baseline"].prefill) == run.lanes["baseline"].prefill.prefill_s
    for bad in (0, -1, float("nan"), "fast"):
        with pytest.raises(ValueError, match="replay speed must be"):
            list(replay(run, speed=bad))


def damaged_files(tmp_path):
    good = live_run(lanes=("baseline",)).run.to_dict()
    yield "not JSON", b"{this is not json", "it is not JSON"
    yield "binary", bytes(range(256)), "not text"
    yield "other JSON", json.dumps({"hello": 1}).encode(), "not a specviz run file"
    yield "a list", b"[1, 2, 3]", "not a specviz run file"
    yield "newer version", json.dumps({**good, "version": RUN_VERSION + 1}).encode(), f"reads version {RUN_VERSION}"
    yield "damaged", json.dumps({**good, "lanes": [{"events": [{"type": "Nope"}]}]}).encode(), "damaged"
    yield "missing field", json.dumps({k: v for k, v in good.items() if k != "prompt_ids"}).encode(), "damaged"
    yield "bad gzip", b"\x1f\x8b\x08garbage", "not text"
    yield "gzip of junk", gzip.compress(b"junk"), "not JSON"


def test_unreadable_or_wrong_version_files_give_clear_messages(tmp_path):
    for name, data, message in damaged_files(tmp_path):
        path = tmp_path / "bad.json"
        path.write_bytes(data)
        with pytest.raises(RunFileError, match=message):
            Run.load(path)
    with pytest.raises(RunFileError, match="cannot read the run file"):
        Run.load(tmp_path / "missing.json")


def test_the_recorded_runs_in_assets_load_and_replay():
    runs = recorded_runs()
    assert len(runs) >= 2
    for name, path in runs.items():
        saved = Run.load(path)
        assert saved.done and {"baseline", "speculative"} <= set(saved.lanes), name
        view = render.RunView.replaying(saved)
        for event in replay(saved, speed=float("inf")):
            view.add(event, saved.replayed_decode)
        assert view.done and "?" not in view.speculative.text  # every text the replay asks for was recorded
        assert view.speculative.trace.token_ids == saved.lanes["speculative"].token_ids
        # Recorded with today's engine: every judged draft kept how sure the target was, so a replay draws the
        # easy-vs-hard chart (a run saved before target_confidence draws it empty).
        trace = saved.lanes["speculative"]
        num_judged = sum(event.verdict(index) in ("accepted", "rejected")
                         for event in trace.rounds for index in range(len(event.drafted)))
        assert num_judged > 0 and len(judged_drafts(trace)) == num_judged, name


def test_the_recorded_runs_store_every_round_as_its_nodes():
    """Every shipped round is stored as its nodes (a chain a linear tree, rival guesses a one-level tree), never as
    the chain views version 1 told; saved again, a run loads to the same events."""
    shapes = set()
    for name, path in recorded_runs().items():
        data = json.loads(gzip.decompress(path.read_bytes()))
        assert data["version"] == RUN_VERSION, name
        rounds = [event for lane in data["lanes"] for event in lane["events"] if event["type"] == "RoundEvent"]
        assert rounds and all("nodes" in event and not {"drafted", "rivals", "tree"} & set(event) for event in rounds)
        saved = Run.load(path)
        shapes |= {event.shape for trace in saved.lanes.values() for event in trace.rounds if event.nodes}
        again = Run.from_json(saved.to_json())
        assert again.events() == saved.events() and json.loads(again.to_json()) == data, name
    # no tree run is recorded: test_tree holds a tree's round trip
    assert shapes == {"chain", "rivals"}


def test_a_run_file_of_version_1_is_refused_with_what_to_do(tmp_path):
    """Version 1 told each round as its chain views (`drafted`, `rivals`, `tree`): no longer read, and the refusal
    says why and what to do, not that the file is damaged."""
    good = live_run(lanes=("baseline",)).run.to_dict()
    old_round = {"type": "RoundEvent", "lane": "baseline", "round_index": 0, "position": 1, "gamma": 0, "drafted": [],
                 "num_accepted": 0, "next_id": 3, "next_kind": "target", "emitted_ids": [3], "draft_s": 0.0,
                 "verify_s": 0.01, "num_draft_forwards": 0, "num_target_forwards": 1, "details": None,
                 "stopped_unsure": False, "rivals": []}
    path = tmp_path / "old.json"
    path.write_text(json.dumps({**good, "version": 1, "lanes": [{"lane": "baseline", "events": [old_round]}]}))
    with pytest.raises(RunFileError, match="version 1, an older format .* record the run again") as refused:
        Run.load(path)
    assert "damaged" not in str(refused.value)


def test_a_run_recorded_on_the_gpu_replays_at_its_pace_and_says_where_it_ran():
    """A CPU-only page shows what a GPU run looks like; its setup line names the GPU before any figure."""
    from specviz.analysis.expectations import gpu_text_for
    from specviz.app.render.stats import setup_html, stats_dict

    [(name, path)] = [(name, path) for name, path in recorded_runs().items() if "gpu" in name]
    saved = Run.load(path)
    assert saved.settings["device"].startswith("cuda") and saved.settings["recorded_on"].startswith("NVIDIA H200")
    assert saved.settings["bitwise_verify"] is True
    assert saved.lanes["speculative"].token_ids == saved.lanes["baseline"].token_ids  # greedy: the target's own text
    view = render.RunView.replaying(saved)
    for event in replay(saved, speed=float("inf")):
        view.add(event, saved.replayed_decode)
    # the one GPU sentence, for the pair that ran, from its GPU record (expectations.gpu_text_for)
    assert "on NVIDIA H200, CUDA 13.0" in setup_html(view) and gpu_text_for(saved.settings["pair"]) in setup_html(view)
    # Its verdict reads the GPU's record for how far one run moves, never this CPU's, and never says "use a GPU".
    verdict = stats_dict(view)["verdict"]
    assert "on a CUDA GPU in bfloat16" in verdict and "CPU" not in verdict, verdict
    assert "or one on a GPU" not in verdict
    replayed_s = sum(model_seconds(event) for event in saved.events())
    assert 0 < replayed_s < 5  # the GPU's own pace, replayed as measured


def test_after_a_cpu_run_of_the_default_pair_the_machine_line_gives_the_gpus_figure():
    """The GPU's figure was said before the first run and gone after it, when a learner asks "would a GPU do better?"."""
    from specviz.analysis.expectations import expect_here, gpu_text_for
    from specviz.app.render.stats import setup_html

    def setup_of(name: str) -> str:
        saved = Run.load(recorded_runs()[name])
        view = render.RunView.replaying(saved)
        for event in replay(saved, speed=float("inf")):
            view.add(event, saved.replayed_decode)
        return setup_html(view)

    gpu_record = expect_here("cpu").gpus[0]
    cpu_line = setup_of("capital of scotland · head · smollm2")
    sentence = gpu_text_for(gpu_record.pair)  # one GPU sentence, for the pair that ran, read from its record
    assert sentence and gpu_record.chosen_cell(0.0).speedup_text() in sentence and sentence in cpu_line, cpu_line
    assert cpu_line.count(sentence) == 1 and setup_of("gpu h200 · capital of scotland · head · smollm2").count(sentence) == 1
    assert gpu_text_for("tiny-code") == ""  # no GPU record for that pair: nothing claimed


def test_cli_saves_and_replays_a_run(tmp_path, capsys):
    path = tmp_path / "run.json"
    code = main(["generate", "--pair", "tiny-code", "--prompt", "def add(a, b):\n", "--max-new-tokens", "12",
                 "--drafter", "prompt-lookup", "--reference", "--save", str(path), "--json"])
    assert code == 0
    live = json.loads(capsys.readouterr().out)
    assert main(["replay", str(path), "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    for lane in LANES:
        assert replayed[lane]["token_ids"] == live[lane]["token_ids"]
        assert replayed[lane]["text"] == live[lane]["text"]
    assert replayed["speedup"] == live["speedup"] and live["identical_outputs"] is True
    assert main(["replay", str(path), "--speed", "1000"]) == 0
    played = capsys.readouterr().out
    assert "Speculative decoding · prompt lookup" in played and "transformers generate()" in played
    # the lanes took turns and the file says so; the terminal still prints one lane at a time (cli.terminal.lane_by_lane)
    assert Run.load(path).settings[IN_TURNS] is True
    assert [event.lane for event in Run.load(path).events()][:2] == ["baseline", "speculative"]
    assert played.index("── Target only") < played.index("── Speculative") < played.index("── transformers")
    assert live["baseline"]["text"] in played  # uncoloured (the target's own tokens), in one piece
    (tmp_path / "bad.json").write_text("{}")
    assert main(["replay", str(tmp_path / "bad.json")]) == 2
    assert "not a specviz run file" in capsys.readouterr().err


def test_events_carry_lane_names_and_one_display_rule():
    run = live_run(temperature=1.0).run
    for lane, trace in run.lanes.items():
        assert all(event.lane == lane for event in trace.events())
    kinds = set()
    for event in run.lanes["speculative"].rounds:
        shown = event.shown_tokens()
        assert [s.token_id for s in shown if s.draft_index is None] == list(event.emitted_ids[event.num_accepted:])
        kinds.update(s.kind for s in shown)
    assert {"accepted", "rejected", "resample"} <= kinds
    assert all(s.kind == "target" for event in run.lanes["reference"].rounds for s in event.shown_tokens())
    assert isinstance(run.lanes["reference"].prefill, PrefillEvent)
    assert all(isinstance(e, RoundEvent) for e in run.lanes["baseline"].rounds)
