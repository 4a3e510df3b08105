"""The page's streaming loop (live.py) on hand-made events: pace, redraws, the run-time cap."""

from __future__ import annotations

import time

import pytest

from specviz.app import live, render
from specviz.decoding.events import FinishEvent, PrefillEvent, RoundEvent
from tests.rounds import chain, draft
from tests.test_render import decode


def lane_events(lane: str, rounds: int) -> list:
    events = [PrefillEvent(lane, 1, 2, 0.01, 1, 0 if lane != "speculative" else 1)]
    for i in range(rounds):
        if lane == "speculative":
            events.append(RoundEvent(lane, i, i + 1, 1, chain(draft(3, 0.5, 0.5, 0.1, "accepted"), then=(4, "bonus")), 1, 4,
                                     "bonus", (3, 4), 0.004, 0.03, 1, 1))
        else:
            events.append(RoundEvent(lane, i, i + 1, 0, (), 0, 3, "target", (3,), 0.0, 0.02, 0, 1))
    return events + [FinishEvent(lane, "max_new_tokens", rounds + 1)]


def new_run(lanes=("baseline", "speculative", "reference")) -> render.RunView:
    return render.RunView("x", [1], gamma=1, settings={"temperature": 0.0}, lanes=lanes)


def test_pace_shows_every_speculative_round_and_waits_without_touching_timings(monkeypatch):
    waits = []
    monkeypatch.setattr(live.time, "sleep", waits.append)
    run = new_run(("baseline", "speculative"))
    events = lane_events("baseline", 3) + lane_events("speculative", 5)
    # a Progress shares the live run object: note what each one showed while it was current
    shown_rounds = [len(p.run.speculative.trace.rounds) for p in live.stream_events(run, events, decode, pace_s=0.25)
                    if p.active == "speculative"]
    assert waits == [0.25] * 5  # one wait after each drafting round shown, none for the baseline
    assert shown_rounds[-5:] == [1, 2, 3, 4, 5]  # each round drawn on its own
    assert run.speculative.trace.wall_s == pytest.approx(0.01 + 5 * 0.034)  # the engine's clocks only
    assert live.pace_seconds("1 round/s") == 1.0 and live.pace_seconds("real time") == 0.0
    with pytest.raises(ValueError, match="unknown pace"):
        live.pace_seconds("warp")


def test_a_live_run_pauses_after_each_redraw_before_the_engine_runs_on(monkeypatch):
    """The page draws while no lane's clock runs: after every redraw of a running lane comes a
    wait, and only then is the engine asked for its next event."""
    log = []
    monkeypatch.setattr(live.time, "sleep", lambda s: log.append(("wait", s)))
    clock = iter(range(10_000))
    monkeypatch.setattr(live.time, "perf_counter", lambda: next(clock) * live.LANE_REFRESH_S)  # every event is due a redraw
    monkeypatch.setattr(live, "DRAW_SHARE", 1.0)  # … however long this clock says drawing took

    def pulled(events):
        for event in events:
            log.append(("pull", type(event).__name__))
            yield event

    events = pulled(lane_events("baseline", 2) + lane_events("speculative", 2))
    for progress in live.stream_events(new_run(("baseline", "speculative")), events, decode, settle_s=0.05):
        active = progress.active  # a lane named before its prefill is the next to run, not yet running
        log.append(("drawn", active if active and progress.run.lane(active).trace.prefill else None))
    drawn_running = [i for i, entry in enumerate(log) if entry[0] == "drawn" and entry[1] is not None]
    assert len(drawn_running) == 6  # each lane's prefill and two rounds
    for i in drawn_running:
        assert log[i + 1] == ("wait", 0.05), log[i:i + 3]
    # a finished lane's last redraw needs no wait: nothing is timed until the next lane's prefill
    assert ("drawn", None) in log and log.count(("wait", 0.05)) == 6
    # a replay (no settle) and the pace keep their own waits only
    log.clear()
    list(live.stream_events(new_run(("baseline",)), lane_events("baseline", 2), decode))
    assert not [entry for entry in log if entry[0] == "wait"]


def test_drawing_a_live_run_takes_at_most_its_share_of_the_time(monkeypatch):
    """Redrawing every chart twice a second doubled a lane's time on screen. Each event here takes 0.1 s of
    engine time and each redraw 0.1 s of drawing: progress is still drawn, but the drawing beyond what must be
    drawn (each lane's first token and its end) stays within DRAW_SHARE of the time; only a lane's end redraws
    every chart, and each lane's time on screen is its model work plus its share of the drawing."""
    now = [0.0]
    monkeypatch.setattr(live.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(live.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))

    def engine(events):
        for event in events:
            now[0] += 0.1
            yield event

    run = new_run(("baseline", "speculative"))
    forced, optional, all_charts = 0, 0, 0
    for progress in live.stream_events(run, engine(lane_events("baseline", 60) + lane_events("speculative", 40)), decode,
                                       settle_s=0.05, live=True):
        now[0] += 0.05  # drawing this Progress; the settle adds as much again
        # a Progress shares the live run: what it shows is read now
        first_token = progress.active and not progress.run.lane(progress.active).trace.rounds
        forced += bool(progress.lane_finished or first_token)
        optional += not (progress.lane_finished or first_token)
        all_charts += progress.lane_finished
    assert optional >= 5  # the lanes still move on screen
    assert 0.1 * optional <= live.DRAW_SHARE * now[0]
    assert all_charts == 2  # every chart redrawn at each lane's end only
    for lane in (run.baseline, run.speculative):
        # each event: 0.1 s, of which the trace's clocks hold 0.02–0.034 s; the rest is the engine outside them
        assert 0.1 * len(lane.trace.rounds) < lane.shown_s <= 0.1 * len(lane.trace.rounds) * 1.25


def test_the_reference_lane_is_not_redrawn_while_it_runs():
    run = new_run()
    events = lane_events("baseline", 2) + lane_events("speculative", 2) + lane_events("reference", 30)
    shown = [(len(p.run.lane("reference").trace.rounds), p.active, p.redraw_plots)
             for p in live.stream_events(run, events, decode)
             if p.run.lane("reference").trace.prefill is not None and not p.quiet]
    # its prefill (to say it started) and its finish; never one of its 30 rounds on its own
    assert shown == [(0, "reference", False), (30, None, True)]


def test_the_reference_lane_still_offers_a_chance_to_stop(monkeypatch):
    clock = iter(range(1000))
    monkeypatch.setattr(live.time, "perf_counter", lambda: next(clock) * 0.1)  # 0.1 s per reading
    events = lane_events("reference", 20)
    quiet = [p for p in live.stream_events(new_run(("reference",)), events, decode) if p.quiet]
    assert quiet and len(quiet) < 20  # some chances to stop, not a redraw per chunk


def test_a_run_past_the_hosts_time_cap_stops_with_a_message():
    def slow_events():
        for event in lane_events("baseline", 10):
            time.sleep(0.3)
            yield event

    with pytest.raises(ValueError, match="this server stops runs after 1 s"):
        list(live.stream_events(new_run(), slow_events(), decode, max_run_s=1))


def test_once_a_lane_finishes_the_next_lane_says_it_is_reading_the_prompt():
    """During the speculative lane's prefill of a long prompt its box says it reads the prompt, not "waiting"."""
    run = new_run(("baseline", "speculative"))
    events = lane_events("baseline", 1) + lane_events("speculative", 1)
    for progress in live.stream_events(run, events, decode):
        if run.baseline.trace.done and run.speculative.trace.prefill is None:
            assert progress.active == "speculative"
            assert "reading the prompt…" in render.lanes_html(run, progress.active)[1]
            break
    else:
        pytest.fail("no redraw between the lanes")
    assert live.next_lane(new_run(("baseline", "reference"))) == "baseline"
    assert live.next_lane(new_run(("reference",))) is None  # not redrawn while it runs: never named
