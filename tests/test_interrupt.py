"""Stop inside a forward (specviz.models.interrupt): a stopped run ends between two of the model's layers,
its caches back in their pool and its hooks gone, and a run the check never stops writes the same tokens
as one without it."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from specviz.app import live
from specviz.app.request import Request
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import decode_lanes
from specviz.decoding.events import PrefillEvent, RoundEvent
from specviz.models import interrupt, slot_calls, slots
from specviz.models.interrupt import RunStopped, decoder_layers, layers_checked, pair_models, stoppable, working_for
from tests.tiny_models import random_prompts, tiny_pair

PROMPT_IDS = random_prompts(1, 128, seed=3, min_len=40, max_len=40)[0]  # past a slot call's rows: the prompt's own pass


def written_ids(events) -> dict[str, list[int]]:
    ids: dict[str, list[int]] = {}
    for event in events:
        if isinstance(event, PrefillEvent):
            ids[event.lane] = [event.next_id]
        if isinstance(event, RoundEvent):
            ids.setdefault(event.lane, []).extend(event.emitted_ids)
    return ids


def no_checks_left(pair) -> bool:
    """Once the run's worker has ended: no hook on any layer, no thread said to work for a run."""
    interrupt.wait_for_ended_runs()
    return (not interrupt.hooked and not interrupt.driving
            and not any(layer._forward_pre_hooks for model in pair_models(pair) for layer in decoder_layers(model)))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_run_never_stopped_writes_what_it_writes_unchecked(temperature):
    pair = tiny_pair("llama")
    config = DecodeConfig(gamma=3, max_new_tokens=20, temperature=temperature, seed=7, drafter="model")
    plain = written_ids(decode_lanes(pair, PROMPT_IDS, config))
    checked = written_ids(stoppable(decode_lanes(pair, PROMPT_IDS, config), pair_models(pair), lambda: False))
    assert checked == plain and len(plain["baseline"]) >= 19
    assert no_checks_left(pair)


def test_a_stop_during_the_prompts_reading_ends_it_between_two_layers():
    pair = tiny_pair("llama")
    assert slots.uses_slots(pair.target)  # its lanes' caches come from the pool and must go back to it
    config = DecodeConfig(gamma=3, max_new_tokens=20, drafter="model")
    plain = written_ids(decode_lanes(pair, PROMPT_IDS, config))
    first, second = decoder_layers(pair.target)
    stopped, reached = threading.Event(), []

    def watch_first(layer, args, kwargs, output):  # the prompt's pass has read its first layer: press Stop
        if args and args[0].shape[1] == len(PROMPT_IDS):
            stopped.set()

    def watch_second(layer, args, kwargs, output):
        reached.append(args[0].shape[1] if args else None)

    handles = [first.register_forward_hook(watch_first, with_kwargs=True),
               second.register_forward_hook(watch_second, with_kwargs=True)]
    try:
        events = stoppable(decode_lanes(pair, PROMPT_IDS, config), pair_models(pair), stopped.is_set)
        with pytest.raises(RunStopped):
            next(events)  # the baseline lane's prefill: the first event
        assert no_checks_left(pair)  # the worker has ended
    finally:
        for handle in handles:
            handle.remove()
    assert stopped.is_set() and len(PROMPT_IDS) not in reached  # the second layer never read the prompt
    free = slot_calls.POOL.free.get(pair.target, [])
    assert free and all(cache.length == 0 and cache.write_at is None for cache in free)  # the lane's cache went back
    again = written_ids(stoppable(decode_lanes(pair, PROMPT_IDS, config), pair_models(pair), lambda: False))
    assert again == plain  # the next run starts clean


def test_a_stop_is_answered_at_once_while_a_layer_still_runs():
    """The consumer (gradio's job) ends within a poll of the press, before the layer it came in ends: a job
    still running then kept the page from sending its next Run. The next run starts after that layer."""
    pair = tiny_pair("llama")
    first = decoder_layers(pair.target)[0]
    pressed, pressed_at = threading.Event(), []

    def slow_prompt_layer(layer, args, kwargs):  # a long prompt's layer: Stop comes during it
        if args and args[0].shape[1] == len(PROMPT_IDS):
            pressed_at.append(time.perf_counter())
            pressed.set()
            time.sleep(1.0)

    handle = first.register_forward_pre_hook(slow_prompt_layer, with_kwargs=True)
    try:
        events = stoppable(decode_lanes(pair, PROMPT_IDS, DecodeConfig(max_new_tokens=8)), pair_models(pair),
                           pressed.is_set)
        with pytest.raises(RunStopped):
            next(events)
        answered_s = time.perf_counter() - pressed_at[0]
        interrupt.wait_for_ended_runs()
        ended_s = time.perf_counter() - pressed_at[0]
    finally:
        handle.remove()
    assert answered_s < 0.5 and ended_s >= 1.0, (answered_s, ended_s)
    assert no_checks_left(pair)


def test_stream_run_ends_a_stopped_run_with_a_quiet_progress():
    pair = tiny_pair("gpt2")
    request = Request.parse(prompt="x", pair="tiny-code", max_new_tokens=12)
    calls = iter(range(10_000))
    progresses = list(live.stream_run(request, pair, PROMPT_IDS[:20], should_stop=lambda: next(calls) >= 3))
    assert progresses[-1].quiet and not progresses[-1].finished
    assert no_checks_left(pair)


def test_only_the_runs_own_threads_stop():
    """A thread that drives no run (a probe, another job) never stops; transformers' generate() worker for the
    reference lane does, when the run waiting on it was stopped."""
    pair = tiny_pair("gpt2")
    ids = PROMPT_IDS[:10]
    outcomes: dict[str, str] = {}

    def forward(name: str) -> None:
        try:
            with torch.inference_mode():
                pair.target(torch.tensor([ids]))
            outcomes[name] = "ran"
        except RunStopped:
            outcomes[name] = "stopped"

    held, release = threading.Event(), threading.Event()

    def stopped_run() -> None:  # a run whose Stop was pressed, still inside its step
        with working_for(lambda: True):
            held.set()
            release.wait(10)

    with layers_checked(pair_models(pair)):
        runner = threading.Thread(target=stopped_run)
        runner.start()
        held.wait(10)
        for name in ("another job", "specviz-reference"):
            worker = threading.Thread(target=forward, args=(name,), name=name)
            worker.start()
            worker.join()
        with working_for(lambda: False):  # the next run, in a thread of its own
            forward("the next run")
        release.set()
        runner.join()
    assert outcomes == {"another job": "ran", "specviz-reference": "stopped", "the next run": "ran"}
    assert no_checks_left(pair)


def test_a_stop_inside_the_reference_lanes_generate_reaches_its_consumer():
    pair = tiny_pair("gpt2")
    config = DecodeConfig(gamma=3, max_new_tokens=12, drafter="model")
    in_reference = lambda: threading.current_thread().name in interrupt.RUN_WORKER_THREADS  # noqa: E731
    events = stoppable(decode_lanes(pair, PROMPT_IDS[:20], config, ("baseline", "reference")), pair_models(pair),
                       in_reference)
    lanes = []
    with pytest.raises(RunStopped):
        for event in events:
            lanes.append(event.lane)
    assert "baseline" in lanes and "reference" not in lanes
    assert not any(thread.name == "specviz-reference" for thread in threading.enumerate())
    assert no_checks_left(pair)
