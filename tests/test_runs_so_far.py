"""The noise in plain sight: the page keeps its runs, the verdict's band is
measured (the bench's record or the page's own repeats), never assumed, and unequal texts get no verdict."""

from __future__ import annotations

import re
from html import unescape
from types import SimpleNamespace

from specviz.analysis import payoff
from specviz.app import history, render, runs_page, ui
from specviz.app.runs_page import runs_table_html
from specviz.app.theory_explorer import page as theory_page
from tests.test_render import make_run, timed_run, visible_text
from tests.test_ui_handlers import page_handler

NO_SPREAD = "has not been measured"


def test_lanes_of_different_texts_get_no_verdict_even_beside_a_measured_spread(monkeypatch):
    # T = 1, lanes of different lengths, a speedup a single-run band would call a gain
    monkeypatch.setattr("specviz.app.render.verdict.spread_here", lambda *args: payoff.Spread(0.9, 1.1, "the bench"))
    run = make_run()  # T = 1: 6 tokens alone, 7 speculative
    stats = render.stats_dict(run)
    assert stats["speculation_pays"] is None and stats["recommended_gamma"] is None
    assert stats["verdict"].startswith("No verdict from this run: at temperature 1 each lane drew its own sample, "
                                       "so they wrote different texts (6 and 7 tokens)")
    words = visible_text(render.stats_html(run))
    assert "beyond the noise" not in words and "Speculation pays" not in words
    explained = visible_text(render.explain_html(run))  # How it works tells the rounds; the verdict is the card's
    assert "No verdict" not in explained and "beyond the noise" not in explained and "pays" not in explained
    chart, note = theory_page.theory_values(0.8, 0.1, 1.25, run)  # nor a point: its ratio is no speedup
    assert not [trace for trace in chart.data if trace.meta == "measured"]
    assert "not on the chart: its lanes wrote different texts" in visible_text(note) and "diamond" not in note
    run.speculative.trace.finish = None  # an unfinished run: no verdict either, and not for "different texts"
    _, note = theory_page.theory_values(0.8, 0.1, 1.25, run)
    assert "No verdict: the run did not finish" in visible_text(note) and "pays" not in visible_text(note)


def test_one_run_without_a_measured_spread_is_not_called_beyond_the_noise():
    run = timed_run(speculative_verify_s=0.02)  # about 2×, but no record for this made-up setup and no repeats
    stats = render.stats_dict(run)
    assert stats["speedup"] > 1.8 and stats["speculation_pays"] is False and NO_SPREAD in stats["verdict"]


def test_the_pages_repeats_become_the_band():
    run = timed_run(speculative_verify_s=0.02)
    run.repeats = (1.05, 2.0, 1.9)  # three runs of the setup: their min reaches down to 1.05×
    stats = render.stats_dict(run)
    assert stats["speculation_pays"] is True and "median 1.90× (1.05–2.00× over 3 runs)" in stats["verdict"]
    run.repeats = (0.95, 2.0, 1.9)
    assert render.stats_dict(run)["speculation_pays"] is False


def test_history_keeps_repeats_of_one_setup_bounded_per_session():
    store = history.SessionRuns()
    greedy = timed_run(speculative_verify_s=0.02)
    first = store.add(greedy)
    again = store.add(timed_run(speculative_verify_s=0.03))
    other = timed_run(speculative_verify_s=0.02)
    other.run.settings["gamma"] = 5
    store.add(other)
    tree = timed_run(speculative_verify_s=0.02)
    tree.run.settings["tree"] = 8  # the same γ and drafter as the first: its row must say it drafted a tree
    store.add(tree)
    store.add(make_run())  # sampled, different texts: kept, but no repeat of anything
    runs = store.runs()
    assert [run.number for run in runs] == [1, 2, 3, 4, 5] and history.SessionRuns().runs() == []
    assert history.repeats_of(runs, again) == (first.speedup, again.speedup) and first.speedup > again.speedup
    assert history.repeats_of(runs, runs[-1]) == () and history.repeats_of(runs, runs[3]) == (runs[3].speedup,)  # a tree repeats no chain
    html = runs_table_html(runs)
    assert html.count("<tr") == 6 and "6 / 7" in html and ">no<" in html
    assert html.count(", a tree of 8<") == 1 and runs[3].tree == 8 and runs[0].tree == 0
    assert "wrote different texts (6 / 7 tokens)" in html
    hovered = [row[1] for trace in runs_page.runs_chart(runs).data if trace.type == "scatter" for row in trace.customdata]
    assert sum(label.endswith(", a tree of 8") for label in hovered) == 1  # the chart's hover names the tree too
    for _ in range(history.RUNS_KEPT + 5):
        store.add(greedy)
    assert len(store.runs()) == history.RUNS_KEPT and store.runs()[-1].number == history.RUNS_KEPT + 10
    figure = runs_page.runs_chart(runs[:2])
    assert [list(trace.y) for trace in figure.data if trace.type == "scatter"] == [[first.speedup, again.speedup]]


def test_the_page_lists_its_runs_and_judges_the_third_repeat_by_their_spread():
    demo = ui.build_app(preload=False)
    block_fn = page_handler(demo, "on_run", reads="pace")
    settings = {"prompt": "def add(a, b):\n", "chat": False, "pair": "tiny-code", "drafter": "model", "gamma": 3,
                "temperature": 0.0, "max-new-tokens": 16}
    arguments = [settings.get(component.elem_id, component.value) for component in block_fn.inputs]
    request = SimpleNamespace(session_hash="runs-so-far-test")
    kept = block_fn.inputs[0]  # the visitor's runs so far: the page's session sends them in and keeps what comes back
    session_runs = None
    for _ in range(3):
        values = list(block_fn.fn(request, session_runs, *arguments[1:]))
        session_runs = values[-1][kept]
    final = {getattr(component, "elem_id", None): value for component, value in values[-1].items()}
    assert 'data-runs="3"' in final["runs-so-far"]
    assert "Your 3 runs of this setup (same prompt and settings) measured" in final["runs-so-far"]
    assert "their own spread is now the verdict's band" in final["runs-so-far"]
    assert "over 3 runs)" in final["stats"]  # the verdict read the three repeats
    assert len([trace for trace in final["chart-runs"].data if trace.type == "scatter"]) == 1



def test_a_sweep_of_the_runs_setup_gives_the_statistics_their_recommended_gamma():
    """One recommended γ, said once: after a γ sweep of the last run's setup (its prompt and settings but γ) the
    statistics quote the sweep's measured γ, at once and in the next run of that setup, with the formula's best
    beside it as a prediction; a run of another prompt keeps its own one-run answer."""
    demo = ui.build_app(preload=False)
    run_fn, sweep_fn = page_handler(demo, "on_run", reads="pace"), page_handler(demo, "on_sweep_run", reads="sweep-from")
    settings = {"prompt": "def add(a, b):\n", "chat": False, "pair": "tiny-code", "drafter": "model", "gamma": 3,
                "temperature": 0.0, "max-new-tokens": 16, "sweep-from": 1, "sweep-to": 2, "sweep-repeats": 2}
    request = SimpleNamespace(session_hash="sweep-recommends-test")
    session = {}  # the page's session: the visitor's runs so far, which each call reads and writes back

    def run(prompt: str) -> tuple[dict, render.RunView]:
        arguments = [{**settings, "prompt": prompt}.get(component.elem_id, component.value) for component in run_fn.inputs]
        final = list(run_fn.fn(request, session.get("runs"), *arguments[1:]))[-1]
        session["runs"] = next(value for value in final.values() if isinstance(value, history.SessionRuns))
        state = next(value for component, value in final.items() if isinstance(value, render.RunView))
        return {getattr(component, "elem_id", None): value for component, value in final.items()}, state

    first, last_run = run(settings["prompt"])
    # before a sweep: the bench's pick for this machine and pair, and none for a pair no record measured
    assert payoff.NOTHING_WHERE in unescape(first["stats"]) and payoff.SWEEP_WHERE not in unescape(first["stats"])
    arguments = [settings.get(component.elem_id, component.value) for component in sweep_fn.inputs]
    run_at, runs_at = 3, 4  # after the smallest γ, the largest and the repeats: the last run, then the runs so far
    arguments[run_at], arguments[runs_at] = last_run, session["runs"]
    *_, swept = sweep_fn.fn(request, *arguments)
    session["runs"] = swept[-1]
    recommended = re.search(r'id="sweep-recommended" data-gamma="(\w+)"', swept[0]).group(1)
    answer = payoff.sweep_answer(session["runs"].sweep_of(last_run))
    assert recommended == str(answer.gamma if answer.gamma is not None else "none")
    again = run(settings["prompt"])[0]
    for stats in (swept[-2], again["stats"]):  # at once, and in the next run of the setup
        assert answer.text() in unescape(stats), stats
    # said there only: How it works and the theory explorer point to the arithmetic, and name no other γ
    assert "Recommended" not in unescape(again["explainer"]) and "Show the arithmetic" in again["explainer"]
    # the run goes back with the sweep's answer as a new object, so whatever redraws from the state quotes it
    swept_run = swept[-3]
    assert isinstance(swept_run, render.RunView) and swept_run is not last_run and swept_run.sweep is not None
    assert last_run.sweep is None
    *_, explorer_note = theory_page.on_measured_run(swept_run)
    assert "Recommended" not in unescape(explorer_note) and "which γ to pick" in explorer_note
    other = run("def mul(a, b):\n")[0]
    assert payoff.NOTHING_WHERE in unescape(other["stats"]) and payoff.SWEEP_WHERE not in unescape(other["stats"])
