"""The teaching sections' handlers driven directly, as gradio registered them, without a browser:
step mode on the tiny-code pair, the lab's example button, and the theory explorer before a run."""

from __future__ import annotations

import re
from types import SimpleNamespace

import gradio as gr
import pytest

from specviz.analysis.payoff import Payoff
from specviz.app import plots_round, ui
from specviz.app.step_mode import page as step_page
from specviz.app.exactness_lab import page as lab_page
from specviz.app.theory_explorer import page as theory_page


@pytest.fixture(scope="module")
def demo():
    return ui.build_app(preload=False)


def handler(demo, name: str):
    """The registered BlockFunction whose handler is called `name`."""
    return next(block_fn for block_fn in demo.fns.values() if getattr(block_fn.fn, "__name__", "") == name)


def status_round(status: str) -> int:
    return int(re.search(r'data-round="(\d+)"', status).group(1))


def test_step_mode_goes_one_round_per_press_until_done(demo):
    start_fn, next_fn = handler(demo, "on_step_start"), handler(demo, "on_step_next")
    # Picking tiny-code on the page brings its own drafter, the draft model (pair_pick_js).
    settings = {"prompt": "def fibonacci(n):\n", "pair": "tiny-code", "drafter": "model", "chat": False, "gamma": 3,
                "temperature": 0.0, "max-new-tokens": 16}
    # Every other control at the page's own default; the first input is the (empty) step state.
    arguments = [settings.get(component.elem_id, component.value) for component in start_fn.inputs]
    values = start_fn.fn(*arguments)
    assert len(values) == len(start_fn.outputs)
    session = values[0]
    shown = {component.elem_id: value for component, value in zip(start_fn.outputs[1:], values[1:])}
    status, lane, stages = shown["step-status"], shown["step-lane"], shown["step-stages"]
    assert isinstance(session, step_page.StepSession), status
    assert status_round(status) == 0 and 'data-stage="prefill"' in stages and "one round at a time" in lane
    assert not shown["chart-step-round"].data  # no round yet
    try:
        for press in range(1, 40):
            values = next_fn.fn(session)
            assert len(values) == len(next_fn.outputs)
            shown = {component.elem_id: value for component, value in zip(next_fn.outputs[1:], values[1:])}
            status, button = shown["step-status"], values[-1]
            assert status_round(status) == press and "status-error" not in status  # one press, one round
            drawn = shown["chart-step-round"]  # the round drawn, as the inspector draws it
            assert drawn.layout.title.text.startswith(f"Round {press}:")
            if 'data-done="true"' in status:
                break
        assert press >= 2 and button.interactive is False  # Next round is off once the run is done
        assert "Done" in shown["step-stages"]
    finally:
        step_page.close_step(session)


def test_next_round_before_start_asks_for_start():
    values = step_page.on_step_next(None)
    assert values[0] is None and "press Start first" in values[1] and "status-error" in values[1]


def test_the_lab_example_sets_its_controls_and_clears_the_chart(demo):
    example_fn = handler(demo, "on_lab_example")
    values = example_fn.fn()
    by_id = {component.elem_id: value for component, value in zip(example_fn.outputs, values)}
    assert by_id["pair"] == "tiny-code" and by_id["prompt"] == lab_page.LAB_EXAMPLE["prompt"]
    assert by_id["lab-n"] == lab_page.LAB_EXAMPLE_DRAWS
    assert by_id["lab-wrong"] is True  # "a setting where the wrong rule is caught" ticks the wrong rule
    assert "The example set the page&#x27;s controls" in by_id["lab-status"]  # HTML-escaped
    assert "press Run the lab" in str(by_id["chart-exactness"].layout.annotations[0].text)
    # said beside the controls too: a visitor back at the top finds them changed, and why
    assert "exactness lab&#x27;s example (below) set these controls: pair &#x27;tiny-code&#x27;" in by_id["status"]


def test_the_theory_sliders_wait_for_a_run():
    assert all(value == gr.skip() for value in theory_page.on_measured_run(None))
    run = SimpleNamespace(baseline=SimpleNamespace(trace=SimpleNamespace(rounds=[])),
                          speculative=SimpleNamespace(trace=SimpleNamespace(rounds=[])))
    assert all(value == gr.skip() for value in theory_page.on_measured_run(run))  # no rounds yet: nothing to measure


def test_one_listener_redraws_the_theory_explorer_for_all_three_sliders(demo):
    """CI saw the note keep c = 0.10 after c was set to 0.9: with a listener per slider, α's reply (sent first)
    could land after c's and overwrite it. "always_last" only holds back the same listener's next call, so the
    three sliders must share one listener for their redraws to stay in order. It listens to a visitor's own moves
    (input): a run's values are drawn with the sliders they set, by one handler (change events fired in a
    closed accordion would redraw with v still at its start value)."""
    writers = [fn for fn in demo.fns.values() if any(getattr(out, "elem_id", None) == "theory-note" for out in fn.outputs)]
    by_slider = [fn for fn in writers if fn.fn is theory_page.theory_values]
    assert len(by_slider) == 1, [fn.name for fn in writers]
    triggers = {(demo.blocks[block_id].elem_id, event) for block_id, event in by_slider[0].targets}
    assert triggers == {("theory-alpha", "input"), ("theory-c", "input"), ("theory-v", "input")}
    assert by_slider[0].trigger_mode == "always_last"
    others = [fn for fn in writers if fn not in by_slider]
    assert others and all(fn.fn is theory_page.on_measured_run for fn in others)
    for fn in others:  # the sliders and the note they are drawn for, in one reply
        assert {out.elem_id for out in fn.outputs} == {"theory-alpha", "theory-c", "theory-v", "chart-theory", "theory-note"}


def test_a_runs_values_come_with_their_own_chart_and_note(monkeypatch):
    """The note is drawn from the very values the sliders are set to (α 0.78, c 0.04, v 0.97), never the sliders'
    start values ("c = 0.10, v = 1.50")."""
    comparison = SimpleNamespace(acceptance_rate=0.781, cost_ratio=0.043, verify_cost=0.97, speedup=1.2,
                                 predicted_speedup=2.1, predicted_with_verify=1.9)
    monkeypatch.setattr(theory_page, "measured_of", lambda _run: (comparison, 3))
    monkeypatch.setattr(theory_page, "speedup_is_quoted", lambda _run: True)  # a greedy run, quoted so far
    run = SimpleNamespace(done=False)  # a run still under way: no verdict yet, only the sliders' values
    alpha, cost, verify, _chart, note = theory_page.on_measured_run(run)
    assert (alpha, cost, verify) == (0.78, 0.04, 0.97)
    assert "α = 0.78, c = 0.04, v = 0.97" in note, note


def test_the_explorer_after_a_run_predicts_the_best_gamma_the_runs_statistics_predict(monkeypatch):
    """The stats said "the formula predicts γ = 5 would do best (1.99×)" and the explorer, its sliders at the same
    run's α̂ and c rounded to 2 decimals (c 0.054 read 0.05), "The formula's best γ there: γ = 5 (2.02×)"."""
    comparison = SimpleNamespace(acceptance_rate=0.6364, cost_ratio=0.0536, verify_cost=1.0312, speedup=1.65,
                                 predicted_speedup=1.99, predicted_with_verify=1.94)
    monkeypatch.setattr(theory_page, "measured_of", lambda _run: (comparison, 3))
    monkeypatch.setattr(theory_page, "speedup_is_quoted", lambda _run: True)  # a greedy run, quoted so far
    *_, note = theory_page.on_measured_run(SimpleNamespace(done=False))
    runs = Payoff(comparison.acceptance_rate, comparison.cost_ratio, comparison.verify_cost)
    assert runs.formula_text()[1:] in note, note  # the same prediction, worded as one (capitalised in the note)


def test_the_sweep_times_the_pages_tree_budget_beside_a_chain(demo):
    """The sweep reads the page's tree budget. Through the page's own handler, with tree 4 set."""
    sweep_fn = handler(demo, "on_sweep_run")
    settings = {"prompt": "def fibonacci(n):\n", "pair": "tiny-code", "drafter": "model", "chat": False,
                "temperature": 0.0, "max-new-tokens": 8, "tree": 4, "sweep-from": 1, "sweep-to": 2, "sweep-repeats": 1}
    arguments = [settings.get(component.elem_id, component.value) for component in sweep_fn.inputs]
    *_, values = sweep_fn.fn(None, *arguments)  # no visitor: the handler's gr.Request, injected by gradio, is None here
    status, chart = values[0], values[1]
    assert 'data-done="true"' in status and "5 of 5 timed runs" in status, status  # a baseline, γ 1–2 × (chain, tree 4)
    assert re.search(r'id="sweep-recommended" data-gamma="\w+" data-tree="(0|4|none)"', status), status
    measured = {trace.meta: list(trace.x) for trace in chart.data if str(trace.meta).startswith("measured")}
    assert set(measured) == {"measured", "measured-tree-4"} and measured["measured"] == [1, 2]


def test_the_sweep_says_when_no_round_reached_the_larger_gammas(demo):
    """A learner saw γ 2–5 measure the same α̂ and τ: the confidence stop had capped every round at 2 drafts, and
    nothing said so. With the stop at its highest the tiny pair's rounds stop early, and the status names the γ that
    drafted no more than a smaller one."""
    sweep_fn = handler(demo, "on_sweep_run")
    settings = {"prompt": "def fibonacci(n):\n", "pair": "tiny-code", "drafter": "model", "chat": False,
                "temperature": 0.0, "max-new-tokens": 12, "draft-confidence": 0.95, "sweep-from": 3, "sweep-to": 6,
                "sweep-repeats": 1}
    arguments = [settings.get(component.elem_id, component.value) for component in sweep_fn.inputs]
    *_, values = sweep_fn.fn(None, *arguments)
    status = values[0]
    match = re.search(r'data-most-drafted="(\d+)"', status)
    assert 'data-done="true"' in status and match, status
    most = int(match.group(1))
    unreached = ", ".join(str(gamma) for gamma in range(max(most + 1, 3), 7))
    assert most < 6 and f"γ = {unreached} drafted no more than γ = {most} does" in status, status
    assert f"so a γ above {most} changes nothing here" in status, status
    settings["draft-confidence"] = 0.0  # always draft γ: every γ is reached, and nothing is said
    arguments = [settings.get(component.elem_id, component.value) for component in sweep_fn.inputs]
    *_, values = sweep_fn.fn(None, *arguments)
    assert 'data-done="true"' in values[0] and "sweep-capped" not in values[0], values[0]


def test_step_mode_gives_the_confidence_stop_as_the_reason_a_round_drafted_fewer(demo):
    """A round the confidence stop ended says so, not "Only 1 of γ = 3: the token limit is near." at token 2 of
    64. Through the page's own handlers, with the page's "draft only while sure" at 0.9."""
    start_fn, next_fn = handler(demo, "on_step_start"), handler(demo, "on_step_next")
    settings = {"prompt": "def fibonacci(n):\n", "pair": "tiny-code", "drafter": "model", "chat": False, "gamma": 3,
                "temperature": 1.0, "max-new-tokens": 64, "draft-confidence": 0.9, "rivals": 0}
    session = start_fn.fn(*[settings.get(component.elem_id, component.value) for component in start_fn.inputs])[0]
    assert isinstance(session, step_page.StepSession)
    try:
        reasons = []
        for _ in range(6):
            stages = re.sub(r"<[^>]+>", "", next_fn.fn(session)[3])
            reasons += re.findall(r"Only \d+ of γ = 3: (?:[^.]|\.\d)*", stages)  # to the sentence's end
        assert reasons, "no round stopped early"
        assert all("sure of its" in reason and "threshold 0.90" in reason for reason in reasons), reasons
        assert not any("limit" in reason for reason in reasons), reasons
    finally:
        step_page.close_step(session)


def test_step_mode_asks_for_a_guess_before_it_shows_the_verify(demo):
    """With "guess first", Next round runs the round but shows only its drafting, keeps the lane as it was and
    asks how many drafts the target keeps; the guess shows the whole round and says how it went."""
    start_fn, next_fn = handler(demo, "on_step_start"), handler(demo, "on_step_next")
    guess_fn = handler(demo, "on_step_guess")
    settings = {"prompt": "def fibonacci(n):\n", "pair": "tiny-code", "drafter": "model", "chat": False, "gamma": 3,
                "temperature": 0.0, "max-new-tokens": 16, "rivals": 0}
    session = start_fn.fn(*[settings.get(component.elem_id, component.value) for component in start_fn.inputs])[0]
    names = [component.elem_id for component in next_fn.outputs]
    assert names == [component.elem_id for component in guess_fn.outputs]
    try:
        shown = dict(zip(names, next_fn.fn(session, True)))
        event = session.lane.trace.rounds[-1]
        assert event.gamma and session.pending is not None
        assert "how many drafts will the target keep" in shown["step-status"]
        assert 'data-stage="draft"' in shown["step-stages"] and 'data-stage="verify"' not in shown["step-stages"]
        assert "tok-accepted" not in shown["step-stages"] and "tok-rejected" not in shown["step-stages"]
        assert shown["step-lane"] == gr.skip()  # the lane as it was: its verdicts wait for the guess
        assert shown["step-guess"].visible and shown["step-guess"].choices == [(str(n), str(n)) for n in range(event.gamma + 1)]
        assert shown["step-next"].interactive is False  # no next round before the guess
        assert plots_round.GUESS_WORDS in str(shown["chart-step-round"].data)
        again = dict(zip(names, next_fn.fn(session, True)))  # Next again (the N key) shows the waiting round
        assert session.pending is None and 'data-stage="verify"' in again["step-stages"]
        for _ in range(10):  # on to the next round that drafts (one that drafts nothing asks no guess)
            next_fn.fn(session, True)
            if session.pending is not None:
                break
        assert session.pending is not None, "no other round drafted"
        event = session.lane.trace.rounds[-1]
        guessed = dict(zip(names, guess_fn.fn(session, "0")))
        kept = event.num_kept_drafts
        assert f"You guessed 0: the target kept {kept} of {event.gamma}" in guessed["step-status"]
        assert ("(right)" in guessed["step-status"]) == (kept == 0)
        assert 'data-stage="verify"' in guessed["step-stages"] and f'data-round="{event.round_index + 1}"' in guessed["step-lane"]
        assert guessed["step-guess"].visible is False and guessed["step-next"].interactive is not False
    finally:
        step_page.close_step(session)
