"""What the sections that run the models on their own share (step mode, the exactness lab, the γ sweep): the main
page's controls they read, as one Request, and the prompt they load; for the long jobs (the lab, the sweep) the
host's time limit, Stop, how often they redraw and their progress line. One home, so the sections stop and time
out alike."""

from __future__ import annotations

import re
import time
from typing import Iterable, Iterator, Sequence, TypeVar

import gradio as gr

from specviz.app import render
from specviz.app.live import record_stop, stop_presses, stopped_by
from specviz.app.render.tokens import escape_text
from specviz.app.request import POLICY, Request
from specviz.app.settings import NAMES
from specviz.app.ui_handlers import session_of
from specviz.app.wording import duration_text
from specviz.models.interrupt import RunStopped, pair_models, stoppable
from specviz.models.pairs import ModelPair

# The main page's controls the sections read, by Request.parse's names: every setting but the reference lane,
# which no section runs.
CONTROL_NAMES = tuple(name for name in NAMES if name != "reference")
REDRAW_S = 1.0  # the lab and the sweep redraw at most this often
TIME_LEFT = re.compile(r' · <span class="time-left"[^>]*>[^<]*</span>')  # progress_html's time left, as it writes it
# On a long section's status while its job is queued, loading or drawing its progress: what Stop has to end. A
# section's status is the one state its Stop reads from the page (ZeroGPU runs the job in a forked worker).
GOING = 'data-job="going"'
QUEUED_TEXT = "Queued: model jobs take turns, one at a time; this one starts when the model is free."

Item = TypeVar("Item")


def parse_controls(names: Sequence[str], values: Sequence) -> Request:
    """The main page's values as a Request (ValueError with the user's message if one is bad)."""
    return Request.parse(**dict(zip(names, values, strict=True)))


def load_prompt(request: Request) -> tuple[ModelPair, list[int]]:
    pair = request.load()
    return pair, request.encode(pair)


def until_stopped(items: Iterable[Item], pair: ModelPair, session: str | None, section: str,
                  started: float) -> Iterator[Item]:
    """A long section's items until its Stop, which raises RunStopped: asked between two items, and inside a
    forward by every layer (stoppable)."""
    for item in stoppable(items, pair_models(pair), stopped_by(session, section, started)):
        if stop_presses.since(session, section, started):
            raise RunStopped()
        yield item


def over_time(started: float) -> bool:
    return bool(POLICY.max_run_s) and time.perf_counter() - started > POLICY.max_run_s


def time_limit_note(what: str) -> str:
    return f"this server stops {what} after {POLICY.max_run_s} s so other visitors get a turn; the results so far are shown"


def going(status: str) -> str:
    """A status that says the section's job goes on after it (queued, loading, part done)."""
    return f"<div {GOING}>{status}</div>"


def still_going(values: tuple) -> tuple:
    """A job's values, its status (the first) marked as going on."""
    return going(values[0]), *values[1:]


def on_section_queued() -> str:
    """Run was pressed: at once, before the queue, the status says the job is queued (and Stop can end it)."""
    return going(render.status_html(QUEUED_TEXT, "info"))


def record_stopped(visitor: gr.Request | None, section: str, previous_status: str | None, what: str,
                   job: str) -> str:
    """A long section's Stop: record the press (its job checks for it), then add the stopped line to its status
    (once, however often pressed); with no job going (none yet, or the last one ended), say that instead of a
    stopped line over a finished result. `job`: what the section runs, for "no {job} is going"."""
    record_stop(session_of(visitor), section)
    previous_status = previous_status or ""
    if 'data-kind="stopped"' in previous_status or 'data-kind="idle"' in previous_status:
        return previous_status
    if GOING not in previous_status:
        idle = f"Nothing to stop: no {job} is going."
        return f'{previous_status}<div class="status-info" data-kind="idle">{escape_text(idle)}</div>'
    # nothing is left to wait for: the progress line's "about 28 s left" would read as if the job went on
    previous_status = TIME_LEFT.sub("", previous_status)
    return f'{previous_status}<div class="status-info" data-kind="stopped">Stopped: {escape_text(what)}</div>'


def progress_html(num_done: int, num_planned: int, what: str, elapsed_s: float) -> str:
    """The long sections' progress line: a bar, "7 of 12 timed runs · 30 s · about 1 min left" (the time left
    from the pace so far: before the first, a word that it comes then; none after the last)."""
    left = ""
    if num_done == 0 < num_planned:
        left = ' · <span class="time-left">the time left shows after the first</span>'
    if 0 < num_done < num_planned:
        left_s = elapsed_s / num_done * (num_planned - num_done)
        left = f' · <span class="time-left" data-left-s="{left_s:.0f}">about {duration_text(left_s)} left</span>'
    return (f'<div><progress max="{num_planned}" value="{num_done}" style="width:220px;vertical-align:middle"></progress> '
            f"{num_done} of {num_planned} {what} · {elapsed_s:.0f} s{left}</div>")
