"""Hugging Face ZeroGPU, by its documented rules: a Space borrows a GPU only for the length of a decorated call.

- `import spaces` comes before anything initialises CUDA: app.py imports it first of all.
- The models move to `cuda` at module level (outside a decorated call CUDA is emulated and the moves are recorded):
  on a ZeroGPU Space the default pair loads while app.py is imported, not lazily in a thread (`LOADS_AT_IMPORT`).
- The decorated call runs in a forked worker: its arguments and every value it yields cross by pickle. Gradio's
  components do not pickle (a Blocks' weak references), and a handler's updates are keyed by them, so on the
  worker's side an update is keyed by its output's place (`to_places`) and keyed by the component again on the
  page's side (`to_components`). Nothing that crosses holds a tensor: returning CUDA tensors hangs the call.
- Generator functions stream and async ones are refused: every handler here is a plain generator or function.
- Stop's handler runs in the page's process, the run in the worker: what the worker keeps in memory never reaches
  Stop, so a run's updates carry the run being drawn (`Page.live_run`) and Stop reads it from the session.
- `duration` is a callable of the call's own arguments (a shorter request queues first): each section says how
  many tokens its call may generate (`tokens_of`), and `seconds_for` turns that into a budget.
- A visitor whose quota cannot cover the budget gets ZeroGPU's reason in the section's status line.
- `torch.compile` is not supported there: nothing in specviz compiles a model.

Off a ZeroGPU Space, `spaces.GPU` returns the function unchanged, so the page runs the same code everywhere; the
crossing by places is then a dict rebuilt per update (microseconds).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Sequence

try:  # before torch touches CUDA; a no-op off a ZeroGPU Space
    import spaces
except ImportError:
    spaces = None

import gradio as gr

from specviz.app import render
from specviz.app.settings import POLICY

# A budget, not a measurement: a second covers well over 10 tokens of any lane on a GPU, the model's load and the
# first call's CUDA graphs included (tests/test_zerogpu.py checks it against the GPU records in assets/bench/).
SECONDS_PER_TOKEN = 0.1
SETUP_S = 20  # reading the prompt, the first call's graphs, the page's updates
LONGEST_S = 300  # what a Space allows a call, whatever its settings


def on_zero_gpu() -> bool:
    """Whether this process is a ZeroGPU Space's (the `spaces` package reads SPACES_ZERO_GPU)."""
    return spaces is not None and bool(spaces.config.Config.zero_gpu)


LOADS_AT_IMPORT = on_zero_gpu()  # ZeroGPU's rule: models on `cuda` at module level


def seconds_for(num_tokens: int) -> int:
    """The GPU time to ask for a call that may generate `num_tokens` tokens in all its lanes and repeats, within the
    run's own time limit where the operator set one (the run stops there anyway)."""
    wanted = SETUP_S + round(max(num_tokens, 0) * SECONDS_PER_TOKEN)
    limit = POLICY.max_run_s or LONGEST_S  # the limit live runs stop at (specviz.app.live)
    return max(1, min(wanted, limit + SETUP_S, LONGEST_S))


def to_places(update, outputs: Sequence):
    """An update as it may cross a process: a dict keyed by components becomes one keyed by their places in
    `outputs`; a tuple or a single value crosses as it is."""
    if not isinstance(update, dict) or not update or not all(isinstance(key, gr.components.Component) for key in update):
        return update
    places = {id(component): place for place, component in enumerate(outputs)}
    return {places[id(component)]: value for component, value in update.items()}


def to_components(update, outputs: Sequence):
    """`to_places` undone on the page's side."""
    if isinstance(update, dict) and update and all(isinstance(key, int) for key in update):
        return {outputs[place]: value for place, value in update.items()}
    return update


def refusal(error: gr.Error, seconds: int) -> str | None:
    """ZeroGPU's refusal of a call (quota, duration, queue), said in the page's words; None for other errors."""
    title = str(getattr(error, "title", "") or "")
    if not title.startswith("ZeroGPU"):
        return None
    return (f"No GPU for this run: it asked for up to {seconds} s and ZeroGPU said: {error.message} "
            f"Fewer new tokens, no reference lane or a smaller sweep asks for less.")


def count(value, fallback: int) -> int:
    """A control's raw value as a whole number for a budget (`fallback` where it is not one: the handler itself
    says what is wrong with it)."""
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return fallback


def borrow(fn: Callable, seconds: Callable[..., int]) -> Callable:
    """`fn` decorated by ZeroGPU (unchanged where `spaces` is missing, and by `spaces` itself off a ZeroGPU Space)."""
    return spaces.GPU(duration=seconds)(fn) if spaces is not None else fn


def on_gpu(handler: Callable, outputs: Sequence, status: gr.components.Component | None,
           tokens_of: Callable[..., int]) -> Callable:
    """`handler`, run on a borrowed GPU on a ZeroGPU Space. `outputs`: the event's outputs, in order; `status`: the
    one among them that says a refusal (None: the refusal is raised, as for the API); `tokens_of`: the most tokens
    a call may generate, from the call's own arguments. The result keeps the handler's name and signature (gradio
    passes gr.Request by it); its `on_device` is what runs in ZeroGPU's worker, and its `seconds` the duration
    asked for a call's arguments."""

    def seconds(*args, **kwargs) -> int:
        return seconds_for(tokens_of(*args, **kwargs))

    def refused(error: gr.Error, args, kwargs) -> dict:
        """The status update saying ZeroGPU's refusal; the error itself again where it is not one to say."""
        said = refusal(error, seconds(*args, **kwargs))
        if said is None or status is None:
            raise error
        return {status: render.status_html(said, "error")}

    if inspect.isgeneratorfunction(handler):
        def on_device(*args, **kwargs) -> Iterator:
            for update in handler(*args, **kwargs):
                yield to_places(update, outputs)

        borrowed = borrow(on_device, seconds)

        def on_page(*args, **kwargs) -> Iterator:
            try:
                for update in borrowed(*args, **kwargs):
                    yield to_components(update, outputs)
            except gr.Error as error:
                yield refused(error, args, kwargs)
    else:
        def on_device(*args, **kwargs):
            return to_places(handler(*args, **kwargs), outputs)

        borrowed = borrow(on_device, seconds)

        def on_page(*args, **kwargs):
            try:
                return to_components(borrowed(*args, **kwargs), outputs)
            except gr.Error as error:
                return refused(error, args, kwargs)

    for wrapper in (on_device, on_page):
        functools.update_wrapper(wrapper, handler)  # name, and the signature gradio reads gr.Request from
    on_page.on_device, on_page.seconds = on_device, seconds
    return on_page
