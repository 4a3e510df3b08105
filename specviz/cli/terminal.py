"""A run on the terminal: each lane's tokens coloured by the one display rule as they come, the
figures table with the page's verdict, and the JSON report."""

from __future__ import annotations

import json

from specviz.catalogue import drafter_info, resolve
from specviz.app.palette import ANSI, ANSI_RESET


def terminal_tokens(view, event) -> str:
    """One event of a lane as terminal text: every token coloured by the one display rule."""
    from specviz.decoding.events import PrefillEvent, RoundEvent

    if isinstance(event, PrefillEvent):
        return view.first_text
    if not isinstance(event, RoundEvent):
        return ""
    texts = view.round_texts[event.round_index]
    pieces, own = [], iter(texts.own)
    for shown in event.shown_tokens():
        text = texts.drafted[shown.draft_index] if shown.draft_index is not None else next(own)
        pieces.append(text if shown.kind == "target" else ANSI[shown.kind] + text + ANSI_RESET)
    return "".join(pieces)


def lane_summary(view) -> dict:
    trace = view.trace
    summary = {**trace.summary(), "text": view.text}
    if trace.num_drafted:
        summary["rounds"] = [
            {
                "drafted_ids": [token.token_id for token in event.drafted],
                # a rival round's guesses for its one position, the drafter's surest first
                "guess_ids": [token.token_id for token in event.guesses],
                # a tree round's nodes (each with its parent's index, -1: the text) and how each was judged
                "tree": [{"id": node.token_id, "parent": node.parent, "verdict": node.verdict}
                         for node in (event.nodes if event.is_tree else ())],
                "num_accepted": event.num_accepted,
                "next_id": event.next_id,
                "next_kind": event.next_kind,
                "emitted_ids": list(event.emitted_ids),
                "draft_s": event.draft_s,
                "verify_s": event.verify_s,
            }
            for event in trace.rounds
        ]
    return summary


def lane_by_lane(events):
    """The events regrouped lane by lane, in the order the lanes began: the lanes take turns (events.take_turns),
    and a terminal prints one lane's text at a time. The first lane's come as they happen; a later lane's wait until
    the lanes before it are done, then come at once; a lane cut short (no FinishEvent: a stopped run) still gives
    every event it has, after the stream ends."""
    from specviz.decoding.events import FinishEvent

    order: list[str] = []  # lanes in the order their first event came
    held: dict[str, list] = {}
    done: set[str] = set()
    for event in events:
        if event.lane not in held:
            order.append(event.lane)
            held[event.lane] = []
        held[event.lane].append(event)
        if isinstance(event, FinishEvent):
            done.add(event.lane)
        while order:  # the first unfinished lane's events, and whole lanes finished before it
            lane = order[0]
            yield from held[lane]
            held[lane] = []
            if lane not in done:
                break
            order.pop(0)
    for lane in order:  # what the stream left unfinished
        yield from held[lane]


def play(view_run, events, decode, quiet: bool) -> None:
    """Feed events into the run view; unless quiet, print each lane as it grows, one lane at a time."""
    from specviz.decoding.events import FinishEvent, PrefillEvent
    from specviz.app.render.lanes import lane_title

    legend = " ".join(ANSI[k] + k + ANSI_RESET for k in ("accepted", "rejected", "unexamined", "resample", "bonus"))
    for event in lane_by_lane(events):
        view_run.add(event, decode)
        if quiet:
            continue
        view = view_run.lane(event.lane)
        if isinstance(event, PrefillEvent):
            key = f"   {legend}" if event.lane == "speculative" else ""
            answer = "\n→ " if view_run.chat else ""  # a chat answer starts on its own line
            print(f"── {lane_title(view_run, event.lane)} ──{key}\n{view_run.prompt_text}{answer}", end="")
        print(terminal_tokens(view, event), end="", flush=True)
        if isinstance(event, FinishEvent):
            print("\n")


def print_figures(view_run) -> None:
    from specviz.app.render.stats import comparison_of, faster_verify_text, lane_rows, not_guaranteed_why, same_text_words
    from specviz.app.render.tau import tau_text
    from specviz.app.render.verdict import no_verdict_text, run_payoff

    # the promise first, as on the page's card: is it the target's text, and is that guaranteed here (and why not)
    value, note = same_text_words(view_run, view_run.greedy_parting())
    print(f"same text as the target alone: {value.removeprefix('✓ ').removeprefix('✗ ')} ({note})")
    if (why := not_guaranteed_why(view_run)) is not None:
        print(why)
    names = list(view_run.lane_names)
    rows = [
        (label, ["—" if value is None else format(value, spec) for value in values])
        for label, values, spec in lane_rows([view_run.lane(name).trace for name in names], None)
    ]
    width = max(14, *(len(cell) + 2 for _, cells in rows for cell in cells))
    print(f"{'':30}" + "".join(f"{name:>{width}}" for name in names))
    for label, cells in rows:
        print(f"{label:30}" + "".join(f"{cell:>{width}}" for cell in cells))
    comparison = comparison_of(view_run)
    if comparison is not None:
        print(
            f"\nα̂ = {comparison.acceptance_rate:.3f}   c = {comparison.cost_ratio:.3f}   verify cost v = {comparison.verify_cost:.2f}\n"
            f"speedup = {comparison.speedup:.2f}× measured, {comparison.predicted_speedup:.2f}× predicted (Leviathan, v = 1), "
            f"{comparison.predicted_with_verify:.2f}× with the measured v"
        )
        faster = faster_verify_text(comparison.verify_cost)  # the page's answer to v < 1, in the same words
        if faster:
            print(faster)
        print(tau_text(view_run.speculative.trace, view_run.gamma, view_run.baseline.trace))
        payoff = run_payoff(view_run, comparison)  # the page's verdict, in the same words (none for unequal texts)
        print(payoff.full_verdict_text() if payoff is not None else no_verdict_text(view_run))


def run_report(view_run, extra_config: dict) -> dict:
    from specviz.app.render.stats import stats_dict

    stats = stats_dict(view_run)
    report = {"config": {**view_run.settings, **extra_config}, "prompt": view_run.prompt_text}
    report.update({name: lane_summary(view_run.lane(name)) for name in view_run.lane_names})
    report.update({key: value for key, value in stats.items() if key not in ("settings", *view_run.lane_names)})
    report["identical_outputs"] = all(stats["identical_tokens"].values()) if stats["identical_tokens"] else None
    return report


def show_figures(view_run, as_json: bool, extra_config: dict) -> None:
    """The run's figures: the JSON report, or the table with the page's verdict."""
    if as_json:
        print(json.dumps(run_report(view_run, extra_config), indent=2))
    else:
        print_figures(view_run)


def drafter_description(pair, config) -> str:
    """What drafts in this run, as its drafter's class says it."""
    return resolve(drafter_info(config.drafter).drafter).describe(pair, config)
