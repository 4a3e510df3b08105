"""The page's streaming loop (live.py) on hand-made events: pace, redraws, the run-time cap."""

from __future__ import annotations

import time

import pytest

from specviz.app import live, render
from specviz.decoding.events import FinishEvent, PrefillEvent, RoundEvent, model_seconds, take_turns
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


def new_run(lanes=("baseline", "speculative", "reference"), in_turns: bool = False) -> render.RunView:
    """A run view; `in_turns`: a run whose lanes take turns, as every live run now does (False: as runs recorded
    before, one lane after another)."""
    settings = {"temperature": 0.0, **({live.IN_TURNS: True} if in_turns else {})}
    return render.RunView("x", [1], gamma=1, settings=settings, lanes=lanes)


def in_turns(*lanes: list) -> list:
    """Hand-made lanes' events as the engine interleaves them (events.take_turns, by their model seconds)."""
    return list(take_turns([(events[0].lane, iter_events(events)) for events in lanes]))


def iter_events(events: list):
    yield from events


def test_pace_shows_every_speculative_round_and_waits_without_touching_timings(monkeypatch):
    waits = []
    monkeypatch.setattr(live.time, "sleep", waits.append)
    run = new_run(("baseline", "speculative"))
    events = lane_events("baseline", 3) + lane_events("speculative", 5)
    # a Progress shares the live run object: note what each one showed while it was current
    shown_rounds = [len(p.run.speculative.trace.rounds) for p in live.stream_events(run, events, decode, pace_s=0.25)
                    if "speculative" in p.active]
    assert waits == [0.25] * 5  # one wait after each drafting round shown, none for the baseline
    assert shown_rounds[-5:] == [1, 2, 3, 4, 5]  # each round drawn on its own
    assert run.speculative.trace.wall_s == pytest.approx(0.01 + 5 * 0.034)  # the engine's clocks only
    assert live.pace_seconds("1 round/s") == 1.0 and live.pace_seconds("real time") == 0.0
    with pytest.raises(ValueError, match="unknown pace"):
        live.pace_seconds("warp")


def test_a_live_run_pauses_after_each_redraw_before_the_engine_runs_on(monkeypatch):
    """The page draws while no lane's clock runs: after every redraw while a lane still runs comes a
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

    events = pulled(in_turns(lane_events("baseline", 2), lane_events("speculative", 2)))
    for progress in live.stream_events(new_run(("baseline", "speculative"), in_turns=True), events, decode,
                                       settle_s=0.05):
        log.append(("drawn", bool(live.lanes_now(progress.run)[0])))
    drawn = [i for i, entry in enumerate(log) if entry[0] == "drawn"]
    assert len(drawn) == 8 and [log[i] for i in drawn].count(("drawn", True)) == 7  # each event, the last ends the run
    for i in drawn[:-1]:  # a lane finished while the other runs on: its clock runs next, so the drawing settles too
        assert log[i + 1] == ("wait", 0.05), log[i:i + 3]
    # the run's last redraw needs no wait: nothing is timed after it
    assert log[-1] == ("drawn", False) and log.count(("wait", 0.05)) == 7
    # a replay (no settle) and the pace keep their own waits only
    log.clear()
    list(live.stream_events(new_run(("baseline",)), lane_events("baseline", 2), decode))
    assert not [entry for entry in log if entry[0] == "wait"]


def test_drawing_a_live_run_takes_at_most_its_share_of_the_time(monkeypatch):
    """Redrawing every chart twice a second doubled a lane's time on screen. Each event here takes 0.1 s of
    engine time and each redraw 0.1 s of drawing: progress is still drawn, but the drawing beyond what must be
    drawn (each lane's first token and its end) stays within DRAW_SHARE of the time; only a lane's end redraws
    every chart, and the lanes' time on screen is their model work plus the drawing's share."""
    now = [0.0]
    monkeypatch.setattr(live.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(live.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    last = []  # the event the engine gave last

    def engine(events):
        for event in events:
            now[0] += 0.1
            last[:] = [event]
            yield event

    run = new_run(("baseline", "speculative"), in_turns=True)
    events = in_turns(lane_events("baseline", 60), lane_events("speculative", 40))
    forced, optional, all_charts = 0, 0, 0
    for progress in live.stream_events(run, engine(events), decode, settle_s=0.05, live=True):
        now[0] += 0.05  # drawing this Progress; the settle adds as much again
        must = isinstance(last[0], (PrefillEvent, FinishEvent))  # a lane's first token, a lane's end
        forced += must
        optional += not must
        all_charts += progress.lane_finished
    assert optional >= 5  # the lanes still move on screen
    assert 0.1 * optional <= live.DRAW_SHARE * now[0]
    assert all_charts == 2  # every chart redrawn at each lane's end only
    # the lanes took turns: the target alone (60 steps of 0.02 s against 40 rounds of 0.034 s) ends first, and the
    # last lane's time on screen is every event's 0.1 s (the first prefill's own, before it, not counted) plus the
    # drawing
    assert run.baseline.shown_s < run.speculative.shown_s
    assert 0.1 * (len(events) - 1) < run.speculative.shown_s <= 0.1 * (len(events) - 1) * 1.25


def test_the_reference_lane_is_not_redrawn_while_it_runs():
    run = new_run()
    events = lane_events("baseline", 2) + lane_events("speculative", 2) + lane_events("reference", 30)
    shown = [(len(p.run.lane("reference").trace.rounds), p.active, p.redraw_plots)
             for p in live.stream_events(run, events, decode)
             if p.run.lane("reference").trace.prefill is not None and not p.quiet]
    # its prefill (to say it started) and its finish; never one of its 30 rounds on its own
    assert shown == [(0, ("reference",), False), (30, (), True)]


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


def test_lanes_taking_turns_both_say_they_run_and_one_not_begun_says_it_is_reading_the_prompt():
    """During the speculative lane's prefill of a long prompt its box says it reads the prompt, not "waiting": in
    turns, right after the target alone's first token; in a run recorded one lane after another, once the first ends."""
    run = new_run(("baseline", "speculative", "reference"), in_turns=True)
    events = in_turns(lane_events("baseline", 3), lane_events("speculative", 3)) + lane_events("reference", 3)
    progresses = live.stream_events(run, events, decode)
    first = next(progresses)
    assert first.active == ("baseline", "speculative") and run.speculative.trace.prefill is None
    htmls = render.lanes_html(run, first.active)
    assert "generating…" in htmls[0] and "reading the prompt…" in htmls[1] and "waiting" in htmls[2]
    assert next(progresses).active == ("baseline", "speculative") and run.speculative.trace.prefill is not None
    # the reference lane runs alone after the turns, and says it runs only from its first token (it is not redrawn)
    after_turns = [p.active for p in progresses if run.speculative.trace.done and run.baseline.trace.done]
    assert after_turns[0] == () and ("reference",) in after_turns and after_turns[-1] == ()

    run = new_run(("baseline", "speculative"))
    for progress in live.stream_events(run, lane_events("baseline", 1) + lane_events("speculative", 1), decode):
        if run.baseline.trace.done and run.speculative.trace.prefill is None:
            assert progress.active == ("speculative",)
            assert "reading the prompt…" in render.lanes_html(run, progress.active)[1]
            break
    else:
        pytest.fail("no redraw between the lanes")


def test_the_lanes_take_turns_by_their_model_time_and_stop_together():
    """events.take_turns: each next event from the lane whose model work so far is least, never two at once; a
    consumer that stops early closes every lane (their caches go back)."""
    events = in_turns(lane_events("baseline", 6), lane_events("speculative", 4))
    spent = {"baseline": 0.0, "speculative": 0.0}
    for event in events:  # the lane that moved had the least model work so far among those unfinished
        others = [spent[lane] for lane in spent if lane != event.lane and not done_before(events, event, lane)]
        assert all(spent[event.lane] <= other for other in others), event
        spent[event.lane] += model_seconds(event)
    assert [type(e).__name__ for e in events[:2]] == ["PrefillEvent", "PrefillEvent"]
    assert sorted(events, key=lambda e: e.lane) == sorted(lane_events("baseline", 6) + lane_events("speculative", 4),
                                                          key=lambda e: e.lane)  # each lane's own order, all of it
    closed = []

    def lane(events, name):
        try:
            yield from events
        finally:
            closed.append(name)
    turns = take_turns([("baseline", lane(lane_events("baseline", 6), "baseline")),
                        ("speculative", lane(lane_events("speculative", 4), "speculative"))])
    next(turns), next(turns), next(turns)
    turns.close()
    assert sorted(closed) == ["baseline", "speculative"]


def done_before(events: list, event, lane: str) -> bool:
    return any(isinstance(e, FinishEvent) and e.lane == lane for e in events[:events.index(event)])
