"""The status line while a live run goes on (live.headway_of, run_section.words.running_summary), from a stream of
hand-made events taking turns as the engine takes them, on a clock that moves by each event's model seconds (so
drawing takes no time): which lanes run, their tokens of those asked, the lanes to come, and the time the run has
left once it is measured; a replay keeps its own status, and a lane not redrawn still says how far it got."""

from __future__ import annotations

import dataclasses

import pytest

from specviz.app import live, render
from specviz.app.run_section.words import (LANE_TOKENS_TEXT, LATER_TEXT, RUNNING_TEXT, TIME_LEFT_TEXT,
                                           TIME_UNKNOWN_TEXT, running_summary)
from specviz.app.wording import duration_text
from specviz.decoding.events import PrefillEvent, RoundEvent, model_seconds, take_turns
from tests.test_live import iter_events, lane_events
from tests.test_render import decode

ASKED = 20  # tokens each lane is asked for
LANES = ("baseline", "speculative", "reference")
STEP_S = {"baseline": 1.0, "speculative": 1.5, "reference": 1.0}  # a round's model seconds; a prefill takes 1 s
SPECULATIVE_TOKEN_S = STEP_S["speculative"] / 2  # its rounds give two tokens each


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    now = [0.0]
    monkeypatch.setattr(live.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(live.time, "sleep", lambda _s: None)
    return now


def ticking(events: list, now: list[float]):
    for event in events:
        now[0] += model_seconds(event)
        yield event


def timed(events: list) -> list:
    """A lane's hand-made events with whole seconds of model work (STEP_S), so each is said (STATUS_EVERY_S)."""
    def retimed(event):
        if isinstance(event, PrefillEvent):
            return dataclasses.replace(event, prefill_s=1.0)
        if isinstance(event, RoundEvent):
            return dataclasses.replace(event, draft_s=STEP_S[event.lane] - 1.0, verify_s=1.0)
        return event
    return [retimed(event) for event in events]


def run_events() -> list:
    """The target alone and the speculative lane in turns, then the reference lane alone, each asked ASKED tokens:
    a first token, then a round per token (the speculative lane's give two each)."""
    rounds = {"speculative": (ASKED - 1) // 2}
    lanes = {lane: timed(lane_events(lane, rounds.get(lane, ASKED - 1))) for lane in LANES}
    turns = take_turns([(lane, iter_events(lanes[lane])) for lane in ("baseline", "speculative")])
    return list(turns) + lanes["reference"]


def statuses(clock: list[float], live_run: bool = True, asked: int = ASKED) -> list[tuple[live.Headway, str]]:
    run = render.RunView("x", [1], gamma=1, settings={"temperature": 0.0, "max_new_tokens": asked, live.IN_TURNS: True},
                         lanes=LANES)
    progresses = live.stream_events(run, ticking(run_events(), clock), decode, live=live_run)
    return [(progress.headway, running_summary(progress.headway)) for progress in progresses if progress.headway]


def said(running: tuple, later: tuple, left: str, asked: int = ASKED) -> str:
    labels = {"baseline": "target alone", "speculative": "speculative", "reference": "transformers"}
    lanes = ", ".join(LANE_TOKENS_TEXT.format(label=labels[lane], done=done, asked=asked) for lane, done in running)
    parts = [RUNNING_TEXT[min(len(running), 2)].format(lanes=lanes)]
    parts += [LATER_TEXT.format(lanes=", ".join(labels[lane] for lane in later))] if later else []
    return "; ".join(parts + [left]) + "."


def test_the_status_says_the_lanes_in_turns_their_tokens_and_the_time_left_once_measured(clock):
    shown = statuses(clock)
    first, text = shown[0]
    # the target alone's first token: the speculative lane is reading its prompt, the reference lane comes after
    assert first.running == (("baseline", 1), ("speculative", 0)) and first.later == ("reference",)
    assert text == said(first.running, ("reference",), TIME_UNKNOWN_TEXT)
    # once both have timed MIN_TIMED_TOKENS after their first: each one's tokens left at its own pace, and the
    # reference lane as long as the two will take in all, on average (the clock is the model's: no drawing)
    measured = [(headway, text) for headway, text in shown if headway.seconds_left is not None]
    headway, text = measured[0]
    (_, done_b), (_, done_s) = headway.running
    assert min(done_b, done_s) == 1 + live.MIN_TIMED_TOKENS
    all_b, all_s = 1.0 + (ASKED - 1) * STEP_S["baseline"], 1.0 + (ASKED - 1) * SPECULATIVE_TOKEN_S
    expected_s = (ASKED - done_b) * STEP_S["baseline"] + (ASKED - done_s) * SPECULATIVE_TOKEN_S + (all_b + all_s) / 2
    assert headway.seconds_left == pytest.approx(expected_s)
    assert text == said(headway.running, ("reference",), TIME_LEFT_TEXT.format(time=duration_text(expected_s)))
    # every line after that one says a time, and every token each lane writes is said
    assert all(headway.seconds_left is not None for headway, _ in shown[shown.index(measured[0]):])
    tokens = [dict(headway.running).get("baseline") for headway, _ in shown]
    assert set(range(1, ASKED + 1)) <= set(tokens)


def test_after_the_turns_the_reference_lane_runs_alone_timed_by_the_lanes_before_and_still_says_how_far_it_got(clock):
    shown = statuses(clock)
    reference = [(headway, text) for headway, text in shown if headway.lanes == ("reference",)]
    assert reference and all(headway.later == () for headway, _ in reference)
    assert shown[-len(reference):] == reference  # it runs after the turns, alone
    # the moment the turns end it has written nothing; then, not yet timed, it takes as long as the finished lanes'
    # model work took (20 s and 14.5 s), less its own so far (its prefill's second)
    assert reference[0][0].running == (("reference", 0),) and reference[1][0].running == (("reference", 1),)
    finished_s = (1.0 + 19 * STEP_S["baseline"] + 1.0 + 9 * STEP_S["speculative"]) / 2
    assert [headway.seconds_left for headway, _ in reference[:2]] == pytest.approx([finished_s, finished_s - 1.0])
    # the reference lane is not redrawn (live.STATUS_EVERY_S), yet its status line moves on to its last token
    assert [dict(headway.running)["reference"] for headway, _ in reference] == list(range(ASKED + 1))
    headway, text = reference[-1]
    assert text == said((("reference", ASKED),), (), TIME_LEFT_TEXT.format(time=duration_text(headway.seconds_left)))


def test_a_text_that_ended_before_the_tokens_asked_sizes_the_lanes_after_it(clock):
    """Greedy lanes write the same text: once a lane ended at ASKED of twice as many asked, the reference lane's
    time left counts the tokens it has left to ASKED at its own pace, not to the tokens asked."""
    reference = [headway for headway, _ in statuses(clock, asked=2 * ASKED) if headway.lanes == ("reference",)]
    measured = next(headway for headway in reference if headway.running[0][1] == 1 + live.MIN_TIMED_TOKENS)
    assert measured.max_new_tokens == 2 * ASKED
    assert measured.seconds_left == pytest.approx(ASKED - measured.running[0][1])


def test_a_replay_keeps_its_own_status_line(clock):
    assert statuses(clock, live_run=False) == []
