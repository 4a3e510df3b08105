"""The lanes and the result card under them: the page's first answer to a run.

The legend, one box per lane and the card (layout), and what a run puts in them (values, and the status line: how
far a live run has got, and the summary of a finished run). Their HTML is specviz.app.render's (lanes, stats); the run's handlers
(specviz.app.ui_handlers) send these values with the rest of the page's.
"""

from __future__ import annotations

import gradio as gr

from specviz.app import render
from specviz.app.live import Headway
from specviz.app.page_files import page_file
from specviz.app.render.tokens import MARKS_SWITCH, MARKS_SWITCH_INFO
from specviz.app.render.verdict import speedup_is_quoted
from specviz.app.wording import count, duration_text
from specviz.catalogue import PAGE_LANES, lane_info


def build_lanes() -> tuple[dict[str, gr.HTML], gr.HTML]:
    """The legend, the switch that shows the rival guesses and stop marks, one box per lane (a lane not in a run by
    default shows once a run has it; a drafting lane's rounds open in the inspector on a click), then the result
    card."""
    gr.HTML(render.legend_html(), elem_id="legend")
    # The marks it shows are hidden by page.css until it is ticked, so it needs no handler (and no redraw).
    gr.Checkbox(False, label=MARKS_SWITCH, info=MARKS_SWITCH_INFO, elem_id="lane-marks", container=False,
                interactive=True)
    empty = render.lanes_html(None, names=PAGE_LANES)
    boxes = {}
    with gr.Row(equal_height=False, elem_classes=["specviz-stack", "specviz-lanes"]):
        for name, html in zip(PAGE_LANES, empty):
            info = lane_info(name)
            scripts = (page_file("round_click.js") if info.drafts else "") + page_file("follow_lane.js")
            boxes[name] = gr.HTML(html, elem_id=f"lane-{name}", visible=info.by_default, js_on_load=scripts)
    card = gr.HTML(render.stats_html(None), elem_id="stats")
    return boxes, card


def lane_values(boxes: dict[str, gr.HTML], run: render.RunView | None, active: str | None = None,
                stopped: bool = False) -> dict:
    """Every lane box; one not in a run by default shows only while the run has it."""
    htmls = render.lanes_html(run, active, names=PAGE_LANES, stopped=stopped)
    values = {}
    for (name, box), html in zip(boxes.items(), htmls):
        shown = lane_info(name).by_default or bool(run and run.has_lane(name))
        values[box] = html if lane_info(name).by_default else gr.HTML(html, visible=shown)
    return values


# The status line while a live run goes on (a long run said only "Generating…" for minutes): which lane, how far,
# and how long the run has left once that is measured.
RUNNING_TEXT = "Lane {number} of {lanes}, {title}: {done} of {asked} tokens"
TIME_LEFT_TEXT = "about {time} left in all"
TIME_UNKNOWN_TEXT = "the time left is said once its first tokens are timed"


def running_summary(headway: Headway) -> str:
    """The status line during a live run: the lane running, its tokens written of those asked, the time left."""
    info = lane_info(headway.lane)
    said = RUNNING_TEXT.format(number=headway.lane_number, lanes=headway.num_lanes, title=info.title,
                               done=headway.num_tokens, asked=headway.max_new_tokens or "?")
    left = (TIME_UNKNOWN_TEXT if headway.seconds_left is None else
            TIME_LEFT_TEXT.format(time=duration_text(headway.seconds_left)))
    return f"{said}; {left}."


def done_summary(run: render.RunView) -> str:
    """The status line at a run's end: each lane's tokens, then the speedup; greedy lanes that parted get no
    speedup (it would compare different texts), the parting named instead."""
    parts = [f"{lane_info(name).label} {count(run.lane(name).trace.num_tokens, 'token')}" for name in run.lane_names]
    summary = "Done: " + ", ".join(parts)
    parting = run.greedy_parting()
    if parting is not None:
        return (f"{summary}; the two lanes wrote different texts from token {parting + 1} (marked ▾ in both lanes), "
                "so no speedup is given: see why below the lanes.")
    speedup = render.stats_dict(run).get("speedup")
    if speedup is not None and speedup_is_quoted(run):
        summary += f"; speculative decoding ran at {speedup:.2f}× the target alone's speed (one run: a noisy sample)"
    return summary + "."
