"""What the teaching sections share: the main page's controls they read, the host's time limit, the Stop line
and the progress line's time left, and their figures' height and ink."""

from __future__ import annotations

import time
from typing import Sequence

import gradio as gr

from specviz.app.live import record_stop
from specviz.app.render.tokens import escape_text
from specviz.app.request import POLICY, Request
from specviz.app.settings import NAMES
from specviz.app.ui_handlers import session_of
from specviz.app.wording import duration_text
from specviz.models.pairs import ModelPair

# The main page's controls the sections read, by Request.parse's names: every setting but the reference lane,
# which no section runs.
CONTROL_NAMES = tuple(name for name in NAMES if name != "reference")
REDRAW_S = 1.0  # the lab and the sweep redraw at most this often
TEACH_HEIGHT = 340
EXACT_COLOR = "#222222"  # the exact distribution: ink, so both lanes' colours stay theirs


def parse_controls(names: Sequence[str], values: Sequence) -> Request:
    """The main page's values as a Request (ValueError with the user's message if one is bad)."""
    return Request.parse(**dict(zip(names, values, strict=True)))


def load_prompt(request: Request) -> tuple[ModelPair, list[int]]:
    pair = request.load()
    return pair, request.encode(pair)


def over_time(started: float) -> bool:
    return bool(POLICY.max_run_s) and time.perf_counter() - started > POLICY.max_run_s


def time_limit_note(what: str) -> str:
    return f"this server stops {what} after {POLICY.max_run_s} s so other visitors get a turn; the results so far are shown"


def record_stopped(visitor: gr.Request | None, section: str, previous_status: str | None, what: str) -> str:
    """A long section's Stop: record the press (its job checks for it), then add the stopped line to its status."""
    record_stop(session_of(visitor), section)
    return stopped_html(previous_status or "", what)


def progress_html(num_done: int, num_planned: int, what: str, elapsed_s: float) -> str:
    """The long sections' progress line: a bar, "7 of 12 timed runs · 30 s · about 1 min left"."""
    return (f'<div><progress max="{num_planned}" value="{num_done}" style="width:220px;vertical-align:middle"></progress> '
            f"{num_done} of {num_planned} {what} · {elapsed_s:.0f} s{time_left_text(num_done, num_planned, elapsed_s)}</div>")


def time_left_text(num_done: int, num_planned: int, elapsed_s: float) -> str:
    """" · about 3 min left", from the pace so far; nothing before the first draw or after the last."""
    if num_done <= 0 or num_done >= num_planned:
        return ""
    left_s = elapsed_s / num_done * (num_planned - num_done)
    return f' · <span class="time-left" data-left-s="{left_s:.0f}">about {duration_text(left_s)} left</span>'


def stopped_html(previous_html: str, what: str) -> str:
    """A section's last status with a line saying the user stopped it (once, however often pressed)."""
    if 'data-kind="stopped"' in previous_html:
        return previous_html
    return f'{previous_html}<div class="status-info" data-kind="stopped">Stopped: {escape_text(what)}</div>'

