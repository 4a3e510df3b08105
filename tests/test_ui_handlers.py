"""The page's run handler driven directly, without a browser: every value it yields must be one
gradio can apply to the handler's outputs (a non-empty dict of them), or the page shows a bare
"Error" and the lanes stay on "generating…"."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from specviz.app import live, render, replay_page, settings, ui, ui_handlers
from specviz.app.request import Request, clamped_note
from specviz.models.presets import preset_name
from specviz.analysis.run import Run

PROMPT = "def add(a, b):\n    return a + b\n\n\ndef add("


def run_coroutine(coroutine):
    """asyncio.run in a thread of its own: after the browser tests, Playwright's sync API leaves an
    event loop running in this thread, where asyncio.run refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def page_handler(demo, name: str, reads: str):
    """The registered BlockFunction called `name` that reads the control `reads` (the lab and the sweep
    have handlers called on_run too)."""
    return next(block_fn for block_fn in demo.fns.values() if getattr(block_fn.fn, "__name__", "") == name
                and any(component.elem_id == reads for component in block_fn.inputs))


def by_elem_id(values: dict) -> dict:
    """A handler's yielded updates keyed by each output's elem_id (or its class name where it has none)."""
    return {getattr(component, "elem_id", None) or type(component).__name__: value
            for component, value in values.items()}


def run_and_stop(demo):
    """The main page's run handler, its Stop's (not the lab's or the sweep's) and the Page both are bound to."""
    run_fn = page_handler(demo, "on_run", reads="pace")
    stop_fn = next(block_fn for block_fn in demo.fns.values() if getattr(block_fn.fn, "__name__", "") == "on_stop"
                   and any(component.elem_id == "lane-speculative" for component in block_fn.outputs))
    return run_fn, stop_fn, stop_fn.fn.__self__


def page_arguments(block_fn, settings: dict) -> list:
    """A handler's inputs: `settings` by elem_id, every other control at the page's own default."""
    return [settings.get(component.elem_id, component.value) for component in block_fn.inputs]


@pytest.mark.parametrize("drafter", ["model", "prompt-lookup"])
def test_the_run_handler_always_yields_updates_gradio_can_apply(monkeypatch, drafter):
    # Quiet snapshots come while transformers' reference lane runs; with a slow target (the default
    # pair on a CPU) there are many. Here every reference round gives one, as a slow target would.
    monkeypatch.setattr(live, "QUIET_EVERY_S", 0.0)
    demo = ui.build_app(preload=False)
    block_fn = page_handler(demo, "on_run", reads="pace")
    outputs = set(block_fn.outputs)
    settings = {"prompt": PROMPT, "chat": False, "pair": "tiny-code", "drafter": drafter, "gamma": 4,
                "temperature": 0.0, "max-new-tokens": 24, "reference": True}
    # Every other control at the page's own default, so controls added later need no change here.
    arguments = [settings.get(component.elem_id, component.value) for component in block_fn.inputs]
    values = list(block_fn.fn(SimpleNamespace(session_hash="test"), *arguments))
    assert len(values) > 3 and any(len(value) == 1 for value in values[2:])  # the quiet path was taken
    for value in values:  # gradio takes a dict as updates only when it is non-empty and keyed by outputs
        assert isinstance(value, dict) and value and set(value) <= outputs, value
    for value in values[:4] + [value for value in values if len(value) == 1][:3]:  # and gradio's own check agrees
        assert len(run_coroutine(demo.postprocess_data(block_fn, value, None))) == len(block_fn.outputs)
    final_status = [value for value in values if any("status-error" in str(v) for v in value.values())]
    assert not final_status, final_status
    last_lanes = str(values[-1])
    assert "generating…" not in last_lanes


def test_the_replay_status_names_its_speed_once():
    assert replay_page.replay_pace_words("at once") == "at once"
    assert replay_page.replay_pace_words("4×") == "at 4×"
    assert all(" at at " not in f" {replay_page.replay_pace_words(name)} " for name in replay_page.REPLAY_SPEEDS)


def test_after_stop_what_was_generated_stays_inspectable():
    """Stop mid-run: the inspector opens a round, the round picker lists the rounds, the run is in the
    session for token clicks, and the explainer speaks of this run."""
    run_fn, stop_fn, page = run_and_stop(ui.build_app(preload=False))
    settings = {"prompt": PROMPT, "chat": False, "pair": "tiny-code", "drafter": "model", "gamma": 3,
                "temperature": 0.0, "max-new-tokens": 64,  # the drafter picking tiny-code brings
                "pace": "slow (4 rounds/s)"}  # each round drawn: a run this fast is otherwise drawn at its end only
    visitor = SimpleNamespace(session_hash="stop-test")
    values = run_fn.fn(visitor, *page_arguments(run_fn, settings))
    live_run = None  # what the page's session holds: each update's run being drawn
    for value in values:  # run until the speculative lane has shown a few rounds, then press Stop
        live_run = value.get(page.live_run, live_run)
        if "data-round=\"3\"" in str(value.get(page.lanes["speculative"], "")):
            break
    else:
        pytest.fail("the speculative lane never reached round 3")
    stopped = stop_fn.fn(live_run, visitor)
    values.close()
    by_id = by_elem_id(stopped)
    assert set(stopped) <= set(stop_fn.outputs) and stopped[page.live_run] is None
    assert "Stopped" in by_id["status"] and "pick a round" in by_id["status"]
    assert "Round " in by_id["inspector"] and "inspect-row" in by_id["inspector"]
    assert len(by_id["round-picker"].choices) >= 3
    assert stopped[page.run_state] is not None and stopped[page.run_state].speculative.trace.rounds
    assert "In this run" in by_id["explainer"]
    assert "stopped" in by_id["lane-speculative"] and "generating…" not in by_id["lane-speculative"]
    why = re.search(r"why it stopped</td>(.*?)</tr>", by_id["stats"]).group(1)  # a reason, never "—"
    assert "stopped" in why and "—" not in why, why
    # The card: the lanes will never finish, so it checks the tokens both wrote and quotes no speedup of unequal
    # work (it said "checked once both lanes finish" and "1.71× so far" when a Stop left lanes without a FinishEvent)
    card = by_id["stats"].split('class="arithmetic"')[0]
    assert "✓ so far" in card and "agrees wherever both have tokens" in card, card
    assert "checked once both lanes finish" not in card and "(so far)" not in card
    assert "stopped: the lanes did unequal work" in card and "the run did not finish" in card
    assert 'class="speedup"' in card and re.search(r'class="speedup"[^>]*>—<', card), card


def test_stop_with_no_run_going_says_so_and_leaves_the_page_as_it_is():
    """Stop after a run finished (or before any) drew the lanes' "stopped" words over nothing or said "Stopped: the
    lanes show how far they got" beside a finished run; between Run and the run's first drawing it ends the run."""
    run_fn, stop_fn, page = run_and_stop(ui.build_app(preload=False))
    visitor = SimpleNamespace(session_hash="idle-stop-test")
    settings = {"prompt": PROMPT, "chat": False, "pair": "tiny-code", "drafter": "model", "temperature": 0.0,
                "max-new-tokens": 8}
    live_run = ui_handlers.on_queued(page)[page.live_run]  # Run pressed
    assert live_run == ui_handlers.QUEUED
    for value in run_fn.fn(visitor, *page_arguments(run_fn, settings)):
        live_run = value.get(page.live_run, live_run)
        assert live_run is None or live_run == ui_handlers.QUEUED or live_run.lane_names, live_run
    assert live_run is None  # the run finished: nothing left to stop
    for live_run, said in ((None, "Nothing to stop"), (ui_handlers.QUEUED, "Stopped before the run wrote a token")):
        stopped = stop_fn.fn(live_run, visitor)
        assert set(stopped) == {page.status, page.live_run} and stopped[page.live_run] is None, stopped
        assert said in stopped[page.status]


def test_a_run_stopped_before_its_first_round_says_no_speedup_will_come():
    run_fn, stop_fn, page = run_and_stop(ui.build_app(preload=False))
    visitor = SimpleNamespace(session_hash="early-stop-test")
    settings = {"prompt": PROMPT, "chat": False, "pair": "tiny-code", "drafter": "model", "temperature": 0.0,
                "max-new-tokens": 64}
    values = run_fn.fn(visitor, *page_arguments(run_fn, settings))
    for value in values:  # the first drawing: the target alone has read the prompt, the speculative lane not yet
        if isinstance(value.get(page.live_run), render.RunView):
            live_run = value[page.live_run]
            break
    values.close()
    assert not live_run.speculative.trace.rounds
    stats = stop_fn.fn(live_run, visitor)[page.stats]
    assert "the run was stopped before the speculative lane ran a round" in stats and "appears once" not in stats


def test_downloads_are_named_by_their_run_and_the_newest_are_kept(monkeypatch, tmp_path):
    """Each run's download file is its own (named by its run id, not by the id modulo the files kept, which on a
    ZeroGPU Space, every worker numbering its own runs, gave two visitors' runs one file); the oldest go."""
    monkeypatch.setattr(replay_page, "SAVED_RUNS_DIR", tmp_path)
    monkeypatch.setattr(replay_page, "SAVED_RUNS_KEPT", 3)
    saved = replay_page.load_replay(next(iter(replay_page.recorded_runs())), None)
    paths = []
    for _ in range(5):
        paths.append(replay_page.save_for_download(render.RunView.replaying(saved, ui_handlers.new_run_id())))
        time.sleep(0.01)  # distinct modification times
    assert len(set(paths)) == 5 and sorted(tmp_path.iterdir()) == sorted(Path(path) for path in paths[-3:])


def test_a_replay_puts_the_runs_settings_into_the_controls():
    settings = {"pair": "tiny-code", "gamma": 5, "temperature": 0.8, "top_k": 0, "top_p": 1.0, "max_new_tokens": 40,
                "seed": 7, "drafter": "prompt-lookup", "ngram": 2, "reference": True, "precision": "float32",
                "draft_confidence": 0.0, "gamma_schedule": "constant", "rivals": 1, "tree": 4}
    controls = replay_page.replayed_controls(Run("def f(x):\n", [1, 2], settings, chat=False))
    assert controls == {"prompt": "def f(x):\n", "chat": False, **settings}
    custom = replay_page.replayed_controls(Run("hi", [1], {"pair": "org/small → org/big", "gamma": 2}, chat=True))
    assert (custom["pair"], custom["draft_id"], custom["target_id"]) == ("custom", "org/small", "org/big")
    # Older files: fewer keys. Those recorded before a setting existed ran with it off, so the replay says so;
    # the others (and a precision this page does not offer) keep the controls' values.
    old = replay_page.replayed_controls(Run("hi", [1], {"pair": "embedded", "gamma": 3, "precision": "float16"},
                                            chat=True))
    assert old == {"prompt": "hi", "chat": True, "pair": "smollm2-135m", "gamma": 3, "draft_confidence": 0.0,
                   "gamma_schedule": "constant", "rivals": 0, "tree": 0}


@pytest.mark.parametrize("name", replay_page.recorded_runs())  # version-1 files are refused (tests/test_run.py)
def test_run_repeats_a_replayed_run_live(name):
    """After a replay, Run must ask for the run that was replayed: every setting the file recorded, the
    drafting features (rival guesses, "draft only while sure", the γ schedule) as they ran, not today's defaults."""
    saved = replay_page.load_replay(name, None)
    page_defaults = {setting.name: setting.default for setting in settings.SETTINGS}
    request = Request.parse(**{**page_defaults, **replay_page.replayed_controls(saved)})
    expected = {**saved.settings, "pair": preset_name(saved.settings["pair"])}
    assert {key: request.settings[key] for key in expected if key in request.settings} == {
        key: value for key, value in expected.items() if key in request.settings}
    assert (request.config.rivals, request.config.draft_confidence, request.config.gamma_schedule) == (
        saved.settings["rivals"], saved.settings["draft_confidence"], saved.settings["gamma_schedule"])


def test_a_replay_says_its_settings_are_in_the_controls():
    demo = ui.build_app(preload=False)
    replay_fn = next(block_fn for block_fn in demo.fns.values() if getattr(block_fn.fn, "__name__", "") == "on_replay")
    pick = next(iter(replay_page.recorded_runs()))
    first = next(replay_fn.fn(pick, None, "at once", SimpleNamespace(session_hash="replay-test")))
    by_id = {component.elem_id: value for component, value in first.items() if getattr(component, "elem_id", None)}
    saved = replay_page.load_replay(pick, None)
    assert "settings are now in the controls" in by_id["status"]
    assert by_id["gamma"] == saved.settings["gamma"] and by_id["prompt"] == saved.prompt_text
    assert by_id["max-new-tokens"] == saved.settings["max_new_tokens"]


@pytest.mark.parametrize(("name", "typed", "bounds", "expected"), [
    ("γ", 100, (1, 16), "γ = 100 is above this page's range (1 to 16), so it was set to 16."),
    ("temperature", -3, (0, 2), "temperature = -3 is below this page's range (0 to 2), so it was set to 0."),
    ("γ", 7, (1, 16), None),
    ("γ", None, (1, 16), None),
])
def test_a_slider_that_pulled_a_typed_value_into_range_says_so(name, typed, bounds, expected):
    assert clamped_note(name, typed, *bounds) == expected


def test_a_refused_input_clears_the_last_runs_results():
    """A refused input (seed −5) gives a clear message and leaves nothing of a run the controls no longer
    describe: lanes still showing the last run's temperature-2 text beside controls at temperature 0 would mislead."""
    from specviz.app import render

    demo = ui.build_app(preload=False)
    run_fn = page_handler(demo, "on_run", reads="pace")
    settings = {"prompt": PROMPT, "chat": False, "pair": "tiny-code", "drafter": "model", "gamma": 3,
                "temperature": 2.0, "max-new-tokens": 12}
    visitor = SimpleNamespace(session_hash="refused-test")
    arguments = [settings.get(component.elem_id, component.value) for component in run_fn.inputs]
    finished = by_elem_id(list(run_fn.fn(visitor, *arguments))[-1])
    assert "data-round=" in finished["lane-speculative"] and finished["State"] is not None
    refused = {**settings, "temperature": 0.0, "seed": -5}
    arguments = [refused.get(component.elem_id, component.value) for component in run_fn.inputs]
    values = list(run_fn.fn(visitor, *arguments))
    assert len(values) == 1 and set(values[0]) <= set(run_fn.outputs)
    shown = by_elem_id(values[0])
    assert "status-error" in shown["status"] and "seed" in shown["status"]
    empty = dict(zip(("lane-baseline", "lane-speculative"), render.lanes_html(None, names=("baseline", "speculative"))))
    for lane, html in empty.items():  # none of the temperature-2 run's tokens stay: the lanes are as before any run
        assert shown[lane] == html != finished[lane]
    assert shown["State"] is None and shown["round-picker"].choices == []
    assert "In this run" not in shown["explainer"]
    # the run's charts are cleared; the runs so far (chart-runs) are the session's, not the last run's, and stay
    charts = [component for component in run_fn.outputs
              if isinstance(component, ui.gr.Plot) and component.elem_id != "chart-runs"]
    assert all(component in values[0] for component in charts)
    assert not any(getattr(component, "elem_id", None) in ("chart-runs", "runs-so-far") for component in values[0])
    assert len(run_coroutine(demo.postprocess_data(run_fn, values[0], None))) == len(run_fn.outputs)


def test_out_of_memory_mid_run_is_one_clear_line_and_the_next_run_goes_ahead(monkeypatch):
    """A run that runs out of memory halfway (a bigger hub pair on a small machine) says so in one line, keeps what
    it drew, and leaves the page able to run again: nothing of a traceback, no lane left on "generating…"."""
    import torch

    from specviz.decoding.events import RoundEvent

    real_decode_lanes = live.decode_lanes

    def running_out(*args, **kwargs):
        rounds = 0
        for event in real_decode_lanes(*args, **kwargs):
            yield event
            rounds += isinstance(event, RoundEvent) and event.lane == "speculative"
            if rounds == 3:
                raise torch.OutOfMemoryError("CPU out of memory: tried to allocate 2.00 GiB")

    demo = ui.build_app(preload=False)
    run_fn = page_handler(demo, "on_run", reads="pace")
    settings = {"prompt": PROMPT, "chat": False, "pair": "tiny-code", "drafter": "model", "gamma": 3,
                "temperature": 0.0, "max-new-tokens": 40}
    arguments = [settings.get(component.elem_id, component.value) for component in run_fn.inputs]
    visitor = SimpleNamespace(session_hash="oom-test")
    monkeypatch.setattr(live, "decode_lanes", running_out)
    values = list(run_fn.fn(visitor, *arguments))
    last = by_elem_id(values[-1])
    assert "status-error" in last["status"]
    assert "out of memory: pick a smaller model pair or fewer new tokens" in last["status"]
    assert "Traceback" not in str(values[-1]) and "tried to allocate" not in last["status"]
    assert "generating…" not in last["lane-speculative"] and 'data-round="2"' in last["lane-speculative"]
    assert len(run_coroutine(demo.postprocess_data(run_fn, values[-1], None))) == len(run_fn.outputs)
    monkeypatch.setattr(live, "decode_lanes", real_decode_lanes)
    again = by_elem_id(list(run_fn.fn(visitor, *arguments))[-1])
    assert "status-done" in again["status"] and "status-error" not in again["status"]
