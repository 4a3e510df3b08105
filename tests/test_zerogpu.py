"""ZeroGPU's rules (specviz.app.zerogpu) with the real `spaces` package: each model handler crosses a forked process
by pickle as in ZeroGPU's worker (spaces' own queue), streams, and returns nothing of torch; `spaces` is imported
before torch; each call asks for a duration from its own settings; a refusal becomes a message in the page."""

from __future__ import annotations

import dataclasses
import inspect
import json
import multiprocessing
import pickle
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
import torch
from spaces.utils import SimpleQueue
from spaces.zero.gradio import error as zerogpu_error

from specviz.app import ui, zerogpu
from specviz.app.step_mode import page as step_page
from tests.test_ui_handlers import run_and_stop

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "def add(a, b):\n    return a + b\n\n\ndef add("
MODEL_HANDLERS = {"on_run", "on_step_start", "on_step_next", "on_lab_run", "on_sweep_run", "generate"}
# the tiny pair, few tokens, a small lab and sweep: every other control at the page's own default
SMALL = {"prompt": PROMPT, "chat": False, "pair": "tiny-code", "drafter": "model", "gamma": 3, "temperature": 0.0,
         "max-new-tokens": 8, "reference": True, "sweep-from": 2, "sweep-to": 3, "sweep-repeats": 1}
LAB = {"temperature": 1.0, "lab-n": 100}  # the lab tests a distribution: it refuses greedy


class NoTorch(pickle.Pickler):
    """Pickles as the worker's queue does, refusing any tensor or module: on a Space it would be a CUDA one."""

    def persistent_id(self, obj):
        if isinstance(obj, (torch.Tensor, torch.nn.Module)):
            raise AssertionError(f"a {type(obj).__name__} crosses the process")
        return None


def holds_no_torch(value) -> bool:
    NoTorch(open("/dev/null", "wb")).dump(value)
    return True


def worker(fn, arguments: SimpleQueue, results: SimpleQueue) -> None:
    """ZeroGPU's worker, as far as a CPU can be one: the arguments arrive pickled, each value goes back pickled."""
    args, kwargs = arguments.get()
    try:
        result = fn(*args, **kwargs)
        for value in (result if inspect.isgenerator(result) else [result]):
            results.put(("value", value))
    except BaseException as error:  # noqa: BLE001 — the test says what failed, as the Space's side would
        results.put(("error", repr(error)))
    results.put(("end", None))


def across_a_fork(fn, *args, **kwargs) -> list:
    """What the page's side receives from `fn` run in a forked process, by spaces' own queue."""
    arguments, results = SimpleQueue(), SimpleQueue()
    arguments.put((args, kwargs))
    process = multiprocessing.get_context("fork").Process(target=worker, args=(fn, arguments, results))
    process.start()
    received = []
    while (item := results.get())[0] != "end":
        assert item[0] == "value", item[1]
        received.append(item[1])
    process.join(timeout=60)
    return received


def across_a_fork_until(fn, args: list, done) -> list:
    """`across_a_fork`, ended as a Stop ends ZeroGPU's worker: once a received value is `done`, the worker goes."""
    arguments, results = SimpleQueue(), SimpleQueue()
    arguments.put((args, {}))
    process = multiprocessing.get_context("fork").Process(target=worker, args=(fn, arguments, results))
    process.start()
    received = []
    try:
        while (item := results.get())[0] == "value":
            received.append(item[1])
            if done(item[1]):
                break
    finally:
        process.kill()
        process.join(timeout=60)
    return received


@pytest.fixture(scope="module")
def demo():
    return ui.build_app(preload=False)


def model_handlers(demo) -> dict:
    """The page's handlers that run the models, by name (the lab's and the sweep's are their own)."""
    handlers = {}
    for block_fn in demo.fns.values():
        if hasattr(block_fn.fn, "on_device"):
            handlers[block_fn.fn.__name__] = block_fn
    return handlers


def small_arguments(block_fn, **changed) -> list:
    """The handler's inputs at the page's defaults, made small; a visitor first where it takes gr.Request."""
    small = {**SMALL, **changed}
    values = [small.get(component.elem_id, component.value) for component in block_fn.inputs]
    takes_visitor = any("Request" in str(parameter.annotation)
                        for parameter in inspect.signature(block_fn.fn).parameters.values())
    return [SimpleNamespace(session_hash="zerogpu-test"), *values] if takes_visitor else values


def test_every_model_handler_is_borrowed_through_zerogpu(demo):
    assert set(model_handlers(demo)) == MODEL_HANDLERS


@pytest.mark.parametrize("name", ["on_run", "on_lab_run", "on_sweep_run"])
def test_a_streaming_handler_crosses_a_fork_and_streams(demo, name):
    block_fn = model_handlers(demo)[name]
    assert inspect.isgeneratorfunction(block_fn.fn.on_device)  # ZeroGPU streams only generator functions
    received = across_a_fork(block_fn.fn.on_device, *small_arguments(block_fn, **(LAB if name == "on_lab_run" else {})))
    assert len(received) > 2  # it streamed
    for value in received:
        assert holds_no_torch(value)
        update = zerogpu.to_components(value, block_fn.outputs)
        if isinstance(update, dict):
            assert update and set(update) <= set(block_fn.outputs)
        else:
            assert len(update) == len(block_fn.outputs)
    assert not any("status-error" in str(value) for value in received), received[-1]


def test_the_api_crosses_a_fork_with_its_texts(demo):
    generate = model_handlers(demo)["generate"].fn.on_device
    received = across_a_fork(generate, PROMPT, pair="tiny-code", chat=False, max_new_tokens=8)
    target_text, speculative_text, stats = received[-1]
    assert holds_no_torch(received) and target_text == speculative_text and stats["speculative"]["text"]


def test_stop_marks_the_lanes_of_a_run_that_a_forked_worker_draws(demo):
    """On a ZeroGPU Space the run goes on in a forked worker and Stop's handler runs in the page's process, so
    what the worker keeps in memory never reaches Stop: Stop reads the run its last update carried. (When the run
    was kept in the worker's memory, Stop there said "Stopped" and left the lanes on "generating…", the card
    awaiting the end of lanes that would never end.)"""
    run_fn = model_handlers(demo)["on_run"]
    _, stop_fn, page = run_and_stop(demo)
    arguments = small_arguments(run_fn, **{"max-new-tokens": 64, "reference": False, "pace": "slow (4 rounds/s)"})

    def at_round_3(value) -> bool:
        return 'data-round="3"' in str(zerogpu.to_components(value, run_fn.outputs).get(page.lanes["speculative"], ""))

    received = across_a_fork_until(run_fn.fn.on_device, arguments, at_round_3)
    assert received and at_round_3(received[-1]), "the worker's run never drew round 3"
    live_run = None  # the page's session: what each crossed update left in it
    for value in received:
        live_run = zerogpu.to_components(value, run_fn.outputs).get(page.live_run, live_run)
    stopped = stop_fn.fn(live_run, SimpleNamespace(session_hash="zerogpu-test"))
    lane = stopped[page.lanes["speculative"]]
    assert "stopped" in lane and "generating…" not in lane, lane
    card = stopped[page.stats].split('class="arithmetic"')[0]
    assert "stopped: the lanes did unequal work" in card and "checked once both lanes finish" not in card, card


def test_the_runs_so_far_go_on_when_each_run_crosses_a_fresh_worker(demo):
    """ZeroGPU forks a new worker where it sees fit (another GPU, a worker that died): the visitor's runs so far
    and their repeats go to and fro with each call, or the second run of a visit said it was the first. (They were
    kept in the server's memory, which on a Space is the worker's.)"""
    run_fn = model_handlers(demo)["on_run"]
    _, _, page = run_and_stop(demo)
    assert run_fn.inputs[0] is page.session_runs
    arguments = small_arguments(run_fn, reference=False)
    session_runs, run_ids = None, set()
    for number in (1, 2):
        arguments[1] = session_runs  # after the visitor: the runs so far the page's session holds
        updates = [zerogpu.to_components(value, run_fn.outputs) for value in across_a_fork(run_fn.fn.on_device,
                                                                                         *arguments)]
        session_runs = next(update[page.session_runs] for update in reversed(updates) if page.session_runs in update)
        assert [record.number for record in session_runs.runs()] == list(range(1, number + 1))
        run_ids.add(re.search(r'data-run="(\d+)"', str(updates[-1][page.status])).group(1))
    table = next(update for update in reversed(updates) if page.runs_so_far[0] in update)[page.runs_so_far[0]]
    assert 'data-runs="2"' in table, table
    # each fork numbered its run from the same count: the page took the second run for the first (data-run) and
    # both named their download file alike
    assert len(run_ids) == 2, run_ids


def test_step_mode_goes_on_where_its_session_crossed_a_process(demo):
    """Start and two Next presses, each in a fresh fork: the session crosses without the models and the engine's
    generator, and the run resumes by replaying its rounds to the same text as one process's presses."""
    handlers = model_handlers(demo)
    start, next_round = handlers["on_step_start"], handlers["on_step_next"]
    arguments = small_arguments(start)
    (update,) = across_a_fork(start.fn.on_device, *arguments)
    session = update[0]
    for _ in range(2):
        assert holds_no_torch(session) and not session.run.is_live
        (update,) = across_a_fork(next_round.fn.on_device, session, False)
        session = update[0]
    crossed = session.view.speculative.trace
    local = start.fn(*arguments)[0]
    for _ in range(2):
        local = next_round.fn(local, False)[0]
    assert crossed.num_tokens > 3 and crossed.token_ids == local.view.speculative.trace.token_ids
    step_page.close_step(local)


def test_spaces_comes_before_torch_when_the_space_starts():
    watch = ("import sys\nseen = []\nclass Watch:\n    def find_spec(self, name, path=None, target=None):\n"
             "        seen.append(name) if name in ('spaces', 'torch') and name not in seen else None\n"
             "sys.meta_path.insert(0, Watch())\nimport app\nprint(seen, flush=True)\n"
             "import os\nos._exit(0)")  # at once: the default pair's preload may still be running
    printed = subprocess.run([sys.executable, "-c", watch], cwd=ROOT, capture_output=True, text=True, timeout=300,
                             check=True).stdout
    assert printed.strip().splitlines()[-1] == "['spaces', 'torch']"


def test_a_call_asks_for_gpu_time_by_its_own_settings(demo, monkeypatch):
    monkeypatch.setattr(zerogpu, "POLICY", dataclasses.replace(zerogpu.POLICY, max_run_s=0))  # no run time limit
    run = model_handlers(demo)["on_run"]
    arguments = small_arguments(run)
    place = {component.elem_id: spot for spot, component in enumerate(run.inputs, start=1)}

    def seconds(**changed) -> int:
        changed_arguments = list(arguments)
        for elem_id, value in changed.items():
            changed_arguments[place[elem_id]] = value
        return run.fn.seconds(*changed_arguments)

    short, longer = seconds(**{"max-new-tokens": 8, "reference": False}), seconds(**{"max-new-tokens": 64})
    assert short < longer < seconds(**{"max-new-tokens": 512}) <= zerogpu.LONGEST_S
    assert seconds(**{"max-new-tokens": "lots"}) > 0  # a bad value: the run itself says what is wrong
    # a Space's run stops at its limit (SPECVIZ_MAX_RUN_S): no more time is asked
    monkeypatch.setattr(zerogpu, "POLICY", dataclasses.replace(zerogpu.POLICY, max_run_s=30))
    assert seconds(**{"max-new-tokens": 512}) == 30 + zerogpu.SETUP_S
    sweep = model_handlers(demo)["on_sweep_run"]
    assert sweep.fn.seconds(*small_arguments(sweep)) > zerogpu.SETUP_S


def test_the_budget_covers_every_lane_in_the_gpu_records():
    """SECONDS_PER_TOKEN is a budget: at least 4× the slowest median lane of any GPU record here."""
    records = [json.loads(path.read_text()) for path in (ROOT / "assets" / "bench").glob("cuda-*.json")]
    speeds = [speed for record in records for result in record["results"]
              for speed in (result["median_baseline_tokens_per_s"], result["median_speculative_tokens_per_s"])]
    assert speeds and 4 / min(speeds) <= zerogpu.SECONDS_PER_TOKEN


def test_a_refused_gpu_becomes_the_sections_message():
    """ZeroGPU refuses before the call runs (quota, duration): the visitor reads why in the status line."""
    status = gr.HTML()

    def refused(prompt):
        raise zerogpu_error("ZeroGPU quota exceeded", "You have exceeded your free ZeroGPU quota (40s requested vs. "
                                                      "12s left). Try again in 0:20:00.")
        yield  # a generator, as the page's handlers are

    handler = zerogpu.on_gpu(refused, [status], status, lambda prompt: 200)
    (update,) = list(handler("hi"))
    said = update[status]
    assert "No GPU for this run" in said and "12s left" in said and "asked for up to 40 s" in said

    def failed(prompt):
        raise gr.Error("the prompt is empty")
        yield

    with pytest.raises(gr.Error):  # the handler's own errors stay its own
        list(zerogpu.on_gpu(failed, [status], status, lambda prompt: 1)("hi"))


def test_updates_cross_by_place_and_come_back_by_component():
    first, second = gr.HTML(), gr.HTML()
    crossed = zerogpu.to_places({second: "b"}, [first, second])
    assert crossed == {1: "b"} and pickle.loads(pickle.dumps(crossed)) == crossed
    assert zerogpu.to_components(crossed, [first, second]) == {second: "b"}
    assert zerogpu.to_places(("a", "b"), [first, second]) == ("a", "b")
