"""The status line while a live run goes on (live.headway_of, run_section.words.running_summary), from a stream of
hand-made events on a clock the test sets: which lane runs, its tokens of those asked, and the time the run has
left once it is measured; a replay keeps its own status, and a lane not redrawn still says how far it got."""

from __future__ import annotations

import pytest

from specviz.app import live, render
from specviz.app.run_section.words import RUNNING_TEXT, TIME_LEFT_TEXT, TIME_UNKNOWN_TEXT, running_summary
from specviz.app.wording import duration_text
from specviz.catalogue import lane_info
from tests.test_live import lane_events
from tests.test_render import decode

ASKED = 20  # tokens each lane is asked for
LANES = ("baseline", "speculative", "reference")


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    """The run's clock: it moves only when the engine gives an event (one second each), so drawing takes no time."""
    now = [0.0]
    monkeypatch.setattr(live.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(live.time, "sleep", lambda _s: None)
    return now


def ticking(events: list, now: list[float]):
    for event in events:
        now[0] += 1.0
        yield event


def run_events() -> list:
    """Each lane writes ASKED tokens: its first, then a round per token (the speculative lane's give two each)."""
    rounds = {"speculative": (ASKED - 1) // 2}
    return [event for lane in LANES for event in lane_events(lane, rounds.get(lane, ASKED - 1))]


def statuses(clock: list[float], live_run: bool = True, asked: int = ASKED) -> list[tuple[live.Headway, str]]:
    run = render.RunView("x", [1], gamma=1, settings={"temperature": 0.0, "max_new_tokens": asked}, lanes=LANES)
    progresses = live.stream_events(run, ticking(run_events(), clock), decode, live=live_run)
    return [(progress.headway, running_summary(progress.headway)) for progress in progresses if progress.headway]


def said(lane: str, done: int, left: str) -> str:
    return (RUNNING_TEXT.format(number=LANES.index(lane) + 1, lanes=len(LANES), title=lane_info(lane).title,
                                done=done, asked=ASKED) + f"; {left}.")


def test_the_status_says_the_lane_its_tokens_and_the_time_left_once_measured(clock):
    first = [(headway, text) for headway, text in statuses(clock) if headway.lane == "baseline"]
    assert [headway.num_tokens for headway, _ in first] == list(range(1, ASKED + 1))  # each token said
    assert first[0][1] == said("baseline", 1, TIME_UNKNOWN_TEXT)
    # a token a second: once MIN_TIMED_TOKENS follow its first, the lane has ASKED − done seconds left, and each of
    # the two lanes to come is counted as long as this one will take in all (its prompt's 0.01 s included)
    done = 1 + live.MIN_TIMED_TOKENS
    expected_s = ASKED - done + 2 * (ASKED - 1 + 0.01)
    assert first[done - 2][1] == said("baseline", done - 1, TIME_UNKNOWN_TEXT)
    assert first[done - 1][1] == said("baseline", done, TIME_LEFT_TEXT.format(time=duration_text(expected_s)))
    left = [headway.seconds_left for headway, _ in first[done - 1:]]
    assert left == pytest.approx([expected_s - index for index in range(len(left))])


def test_a_finished_lane_times_the_lanes_to_come_and_a_lane_not_redrawn_still_says_how_far_it_got(clock):
    shown = statuses(clock)
    lanes = [headway.lane for headway, _ in shown]
    assert lanes == sorted(lanes, key=LANES.index) and set(lanes) == set(LANES)  # in the run's order, each said
    # the moment the first lane ends, the next has written nothing and the two lanes left take as long as it did
    turn = next(headway for headway, _ in shown if headway.lane == "speculative")
    assert turn.num_tokens == 0 and turn.seconds_left == pytest.approx(2 * (ASKED + 0.01))
    assert all(headway.seconds_left is not None for headway, _ in shown if headway.lane != "baseline")
    # the reference lane is not redrawn (live.STATUS_EVERY_S), yet its status line moves on to its last token
    reference = [(headway, text) for headway, text in shown if headway.lane == "reference"]
    assert [headway.num_tokens for headway, _ in reference] == list(range(ASKED + 1))
    headway, text = reference[-1]
    assert text == said("reference", ASKED, TIME_LEFT_TEXT.format(time=duration_text(headway.seconds_left)))


def test_a_text_that_ended_before_the_tokens_asked_sizes_the_lanes_after_it(clock):
    """Greedy lanes write the same text: once the first ended at ASKED of twice as many asked, the reference lane's
    time left counts the tokens it has left to ASKED at its own pace, not to the tokens asked."""
    reference = [headway for headway, _ in statuses(clock, asked=2 * ASKED) if headway.lane == "reference"]
    timed = next(headway for headway in reference if headway.num_tokens == 1 + live.MIN_TIMED_TOKENS)
    assert timed.max_new_tokens == 2 * ASKED and timed.seconds_left == pytest.approx(ASKED - timed.num_tokens)


def test_a_replay_keeps_its_own_status_line(clock):
    assert statuses(clock, live_run=False) == []
