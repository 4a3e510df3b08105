"""Where the time went, drawn: every forward of every lane as a block on one clock, read
from the events' own timings, with kept and thrown-away work coloured; live and on replay."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specviz.analysis.run import recorded_runs
from specviz.analysis.trace import lane_blocks, time_split, time_went_text
from specviz.app import ui
from specviz.app.charts import timeline
from tests.test_render import make_run
from tests.test_ui_handlers import page_handler


def test_blocks_follow_the_engine_and_colour_each_draft_by_its_fate():
    run = make_run()
    baseline, speculative = run.baseline.trace, run.speculative.trace
    steps = lane_blocks(baseline)
    assert [block.kind for block in steps] == ["prefill"] + ["step"] * 5
    for before, after in zip(steps, steps[1:]):  # back to back on the lane's own clock
        assert after.start_s == pytest.approx(before.start_s + before.duration_s)
    assert steps[-1].start_s + steps[-1].duration_s == pytest.approx(baseline.wall_s)
    blocks = lane_blocks(speculative)
    # round 1: draft kept, rejected, never examined, then a verify that met the rejection; round 2: all kept + bonus
    assert [block.kind for block in blocks] == [
        "prefill", "draft-kept", "draft-thrown", "draft-thrown", "verify-rejected",
        "draft-kept", "draft-kept", "draft-kept", "verify-kept"]
    verify = blocks[4]
    assert verify.duration_s == 0.025 and verify.num_tokens == 2  # its measured cost, wider than a 0.02 s step
    assert blocks[1].duration_s == pytest.approx(0.006 / 3)  # the round's drafting shared by its draft forwards
    assert blocks[-1].start_s + blocks[-1].duration_s == pytest.approx(speculative.wall_s)
    split = time_split(speculative)
    assert split.num_target == 2 and split.num_draft == 6 and split.thrown_draft_s == pytest.approx(0.004)
    assert split.total_s == pytest.approx(speculative.wall_s)


def test_the_chart_draws_both_lanes_on_one_axis_with_thin_draft_blocks():
    run = make_run()
    figure = timeline.timeline([run.baseline.trace, run.speculative.trace])
    bars = {bar.name: bar for bar in figure.data}
    assert set(bars) == {name for name, _, _ in timeline.STYLES.values()}  # every kind occurs in this run
    draft, verify = bars["draft: thrown away"], bars["verify: one rejected"]
    assert draft.width < verify.width and list(verify.x) == [0.025]
    ends = [max(b + x for bar in figure.data for b, x, y in zip(bar.base, bar.x, bar.y) if abs(y - row) < 0.5)
            for row in (0.0, -1.0)]
    assert ends == pytest.approx([run.baseline.trace.wall_s, run.speculative.trace.wall_s])
    assert list(figure.layout.yaxis.ticktext) == ["target alone", "speculative"]


def test_the_sentence_says_where_each_lanes_time_went():
    run = make_run()
    text = time_went_text([("target alone", run.baseline.trace, False), ("speculative", run.speculative.trace, True)])
    assert "target alone 0.11 s: prefill 0.01 s + 5 steps of 20 ms" in text
    assert "speculative 0.07 s: prefills 0.01 s + 2 verifies of 25 ms + 6 draft forwards of 2.0 ms" in text
    assert "s of them thrown away" in text


def test_the_timeline_is_drawn_on_replay_too():
    demo = ui.build_app(preload=False)
    replay_fn = page_handler(demo, "on_replay", reads="replay-speed")
    values = {"replay-pick": next(iter(recorded_runs())), "replay-file": None, "replay-speed": "at once"}
    arguments = [values[component.elem_id] for component in replay_fn.inputs]
    updates = list(replay_fn.fn(*arguments, SimpleNamespace(session_hash="timeline-replay")))
    final = {getattr(component, "elem_id", None): value for component, value in updates[-1].items()}
    kinds = {bar.name for bar in final["chart-timeline"].data}
    assert "verify: one rejected" in kinds or "verify: all kept" in kinds
    assert "each lane on its own clock" in final["timeline-note"]
    assert "runs-so-far" not in final  # a replay repeats a recorded clock: it is not one of the page's runs
