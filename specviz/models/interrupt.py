"""Stopping a run between two layers of a forward, so that a Stop ends the model's work at once.

A consumer stops one of the engine's generator lanes by asking for no more events, between two events
only; a long prompt's reading is one forward of many seconds on a CPU, the page's next Run waiting behind
it. So `stoppable` computes a run's events in a worker thread, one as its consumer asks for each, and each
decoder layer of the run's models first asks the run's stop check, raising RunStopped when it says yes.
The check reads no tensor, so no forward computes anything differently (the lanes stay exact); the
exception unwinds the engine's generators through their `finally`s, so every cache goes back to its pool.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

import torch
from transformers.modeling_layers import GradientCheckpointingLayer

from specviz.models.pairs import ModelPair

Item = TypeVar("Item")
StopCheck = Callable[[], bool]

POLL_S = 0.05  # how often a consumer waiting for the next event asks whether the run was stopped
ENDING_WAIT_S = 60.0  # a run waits at most this long for a stopped run's last layer (a layer takes seconds at most)
WORKER_THREAD = "specviz-run"  # each stoppable run's worker
# Threads a run's worker starts to run a model for it: transformers' generate() for the reference lane
# (specviz.decoding.reference). The worker waits on a queue meanwhile, so the layers that must stop
# run there; any other thread that works for no run is never stopped here.
RUN_WORKER_THREADS = ("specviz-reference",)


class RunStopped(BaseException):
    """A run was stopped inside a forward, between two of its layers. A BaseException, as asyncio's
    CancelledError is: code that handles any Exception as a failure (a CUDA graph capture that falls back
    to eager calls, a handler that reports an error) must not take a stop for one."""


lock = threading.Lock()
driving: dict[int, StopCheck] = {}  # thread id → the stop check of the run it works for, while it does
ending: list[threading.Thread] = []  # workers of runs that ended early, finishing the layer they were in
hooked: dict[int, tuple[torch.nn.Module, int, list]] = {}  # id(model) → (model, runs using it, hook handles)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Every decoder layer of a transformers model (GPT-2, GPT-NeoX, Llama and Qwen2 layers alike)."""
    return [module for module in model.modules() if isinstance(module, GradientCheckpointingLayer)]


def check_layer(layer: torch.nn.Module, args) -> None:
    """A decoder layer's forward pre-hook: RunStopped if the run this thread works for was stopped."""
    check = driving.get(threading.get_ident())
    if check is None and threading.current_thread().name in RUN_WORKER_THREADS:
        stopped = any(check() for check in list(driving.values()))  # runs take turns (drive): the one waiting on it
    else:
        stopped = check is not None and check()
    if stopped:
        raise RunStopped()


@contextlib.contextmanager
def layers_checked(models: Sequence[torch.nn.Module]) -> Iterator[None]:
    """The models' decoder layers ask check_layer before each forward while inside: runs that overlap share
    the hooks, removed when the last one leaves."""
    with lock:
        for model in models:
            _, runs, handles = hooked.get(id(model)) or (model, 0, None)
            if handles is None:
                handles = [layer.register_forward_pre_hook(check_layer) for layer in decoder_layers(model)]
            hooked[id(model)] = (model, runs + 1, handles)
    try:
        yield
    finally:
        with lock:
            for model in models:
                _, runs, handles = hooked.pop(id(model))
                if runs > 1:
                    hooked[id(model)] = (model, runs - 1, handles)
                else:
                    for handle in handles:
                        handle.remove()


@contextlib.contextmanager
def working_for(should_stop: StopCheck) -> Iterator[None]:
    """This thread's forwards belong to the run that `should_stop` speaks for, while inside."""
    ident = threading.get_ident()
    with lock:
        driving[ident] = should_stop
    try:
        yield
    finally:
        with lock:
            driving.pop(ident, None)


def stoppable(events: Iterable[Item], models: Sequence[torch.nn.Module], should_stop: StopCheck) -> Iterator[Item]:
    """Pass the events on, each computed in a worker thread of the run's own while the consumer waits, one
    step at a time, as the generator itself would run. Meanwhile every decoder layer of `models` asks whether
    the run is over (`should_stop`, or the consumer gone), so a stopped run's forward ends at its next layer;
    and the consumer, asking `should_stop` every POLL_S as it waits, raises RunStopped at once rather than
    after that layer, before gradio's cancel of its job arrives (the page's next Run would wait for it)."""
    requests: queue.SimpleQueue = queue.SimpleQueue()  # True: compute the next event; False: end
    results: queue.SimpleQueue = queue.SimpleQueue()  # ("event", e), ("end", None) or ("error", exception)
    over = threading.Event()  # the consumer asks no more: the worker ends at its next layer

    def is_over() -> bool:
        return over.is_set() or should_stop()

    worker = threading.Thread(target=drive, args=(events, models, is_over, requests, results), name=WORKER_THREAD,
                              daemon=True)
    worker.start()
    try:
        while True:
            requests.put(True)
            kind, value = next_result(results, should_stop)
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        if worker.is_alive():  # stopped, closed early or failed: the worker ends after its current layer
            over.set()
            requests.put(False)
            with lock:
                ending.append(worker)


def next_result(results: queue.SimpleQueue, should_stop: StopCheck) -> tuple[str, object]:
    while True:
        try:
            return results.get(timeout=POLL_S)
        except queue.Empty:
            if should_stop():
                raise RunStopped() from None


def drive(events: Iterable, models: Sequence[torch.nn.Module], is_over: StopCheck, requests: queue.SimpleQueue,
          results: queue.SimpleQueue) -> None:
    """A run's worker: one event per request, its forwards stopped by `is_over`. It starts once the runs
    stopped before it have finished their last layer: runs take turns on the model, timed alone."""
    wait_for_ended_runs()
    with layers_checked(models), working_for(is_over):
        iterator = iter(events)
        try:
            while requests.get():
                try:
                    results.put(("event", next(iterator)))
                except StopIteration:
                    results.put(("end", None))
                    return
                except BaseException as error:  # noqa: BLE001 — re-raised in the consumer's thread
                    results.put(("error", error))
                    return
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:  # here, where the generator is not running: the engine's caches go back now
                close()


def wait_for_ended_runs() -> None:
    """Wait until the workers of runs that ended early have finished the layer they were in."""
    with lock:
        workers = list(ending)
    for worker in workers:
        worker.join(ENDING_WAIT_S)
    with lock:
        ending[:] = [worker for worker in ending if worker.is_alive()]


def pair_models(pair: ModelPair) -> list[torch.nn.Module]:
    """The models a pair runs: its target, and its draft model and head drafter where it has them."""
    return [model for model in (pair.target, pair.draft, pair.head) if model is not None]
