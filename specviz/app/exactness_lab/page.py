"""The exactness lab's page: many short draws of both lanes against the target's exact distribution, with the
wrong rule it must catch (the draws and their test: `draws`); its layout, handlers, wiring, histogram and words."""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import MethodType
from typing import Iterator, Mapping, Sequence

import gradio as gr
import plotly.graph_objects as go

from specviz.app import render, zerogpu
from specviz.app.exactness_lab import draws
from specviz.app.exactness_lab.draws import SIGNIFICANCE, TOO_CLOSE, LabTally, verdict_of
from specviz.app.palette import COLORS, INK
from specviz.app.plots import SECTION_HEIGHT, base_figure, label_of, separate_title_and_legend, with_hint
from specviz.app.render.tokens import escape_text, inline_token, status_html
from specviz.app.request import describe_error, whole_number
from specviz.app.section_jobs import (
    REDRAW_S, going, load_prompt, on_section_queued, over_time, parse_controls, progress_html, record_stopped,
    still_going, time_limit_note, until_stopped,
)
from specviz.app.ui_handlers import session_of
from specviz.app.render.rule import SETTINGS_EXACT, WRONG_CHAIN, WRONG_RULE
from specviz.app.wording import p_equals
from specviz.catalogue import DEFAULT_DRAFTER, drafter_info, lane_info
from specviz.models.interrupt import RunStopped
from specviz.models.pairs import ModelPair

# A setting where the wrong rule shows within a few hundred draws: the tiny-code pair's 2-layer draft
# disagrees with its 8-layer target right after this prompt, and top-k 10 keeps the outcomes few.
LAB_EXAMPLE = {"pair": "tiny-code", "prompt": "        if not", "chat": False, "temperature": 1.0, "top_k": 10,
               "top_p": 1.0, "drafter": DEFAULT_DRAFTER}

LAB_EXAMPLE_DRAWS = 500


# --- layout -------------------------------------------------------------------------------------------------------


@dataclass
class LabSection:
    names: list[str]
    examples: dict[str, gr.Component]  # the main page's controls the example sets, in LAB_EXAMPLE order
    num_draws: gr.Slider
    wrong_rule: gr.Checkbox
    example_button: gr.Button
    run_button: gr.Button
    stop_button: gr.Button
    status: gr.HTML
    chart: gr.Plot


def empty_lab_chart():
    return with_hint(base_figure("First two new tokens", "outcome", "share of draws"), "press Run the lab")


def build_lab(names: list[str], controls: dict[str, gr.Component]) -> LabSection:
    with gr.Accordion("Exactness lab: is the output really the target's?", open=False, elem_id="exactness-lab"):
        gr.Markdown(
            "Draws N short runs from the target alone and N from speculative decoding, with the prompt and sampling "
            "settings above, and compares the first two new tokens of each lane with the target's exact "
            f"distribution, computed from its logits. {SETTINGS_EXACT} Token 1 is the target's own sample in both "
            f"lanes; token 2 is the first token a speculative round decides. Switch on the **wrong rule** ({WRONG_RULE}; with a draft "
            "tree, Medusa's typical acceptance: keep the first guess the target finds plausible, no coin) and watch the speculative histogram drift and its p-value collapse."
        )
        with gr.Row():
            num_draws = gr.Slider(draws.MIN_DRAWS, draws.MAX_DRAWS, value=LAB_EXAMPLE_DRAWS, step=50,
                                  label="N: draws per lane", elem_id="lab-n")
            wrong_rule = gr.Checkbox(value=False, label=f"WRONG rule: {WRONG_CHAIN} at a rejection (with a draft "
                                     "tree: Medusa's typical acceptance)", elem_id="lab-wrong")
        with gr.Row():
            example_button = gr.Button("Example: a setting where the wrong rule is caught", elem_id="lab-example",
                                       size="sm", scale=0)
            run_button = gr.Button("Run the lab", variant="primary", elem_id="lab-run", scale=0)
            stop_button = gr.Button("Stop", variant="stop", elem_id="lab-stop", scale=0)
        status = gr.HTML(render.status_html("Press Run the lab."), elem_id="lab-status", elem_classes=["specviz-status"])
        chart = gr.Plot(empty_lab_chart(), show_label=False, elem_id="chart-exactness")
    examples = {name: controls[name] for name in LAB_EXAMPLE if name in controls}
    return LabSection(names, examples, num_draws, wrong_rule, example_button, run_button, stop_button, status, chart)


# --- handlers -----------------------------------------------------------------------------------------------------


def bin_labels(bins: draws.Bins, pair: ModelPair) -> list[str]:
    """"'a' · 'b'" per outcome."""
    texts = {token_id: pair.decode([token_id]) for outcome in bins.outcomes for token_id in outcome}
    labels = [f"{label_of(first, texts)} · {label_of(second, texts)}" for first, second in bins.outcomes]
    return labels + (["other"] if bins.has_other else [])


def lab_values(tally: draws.LabTally, labels: list[str], wrong_rule: bool, started: float, start: str,
               settings: str, note: str = "") -> tuple:
    done = tally.num_draws("speculative")
    p_values = {lane: tally.p_value(lane) for lane in draws.LANES} if done else {}
    outside = {lane: tally.bars_outside(lane) for lane in draws.LANES}
    waiting_for = tally.bins.draws_needed if tally.too_few("speculative") else 0  # the lanes draw in turn
    status = lab_status_html(done, tally.num_planned, p_values, tally.bins.num_bins, wrong_rule,
                             time.perf_counter() - started, note, outside, start, tally.wrong_words, waiting_for,
                             settings)
    return status, exactness_histogram(tally, labels, wrong_rule)


def on_lab_run(section: LabSection, visitor: gr.Request, num_draws_value, wrong_value, *values) -> Iterator[tuple]:
    started = time.perf_counter()
    session = session_of(visitor)
    wrong = bool(wrong_value)
    try:
        request = parse_controls(section.names, values)
        planned = whole_number(num_draws_value, "N (draws per lane)", draws.MIN_DRAWS, draws.MAX_DRAWS)
        config = request.config
        draws.check_lab(config, planned)
        settings = lab_settings_text(request.settings["pair"], config.temperature, config.top_k, config.top_p,
                                     config.gamma, drafter_info(config.drafter).label, config.tree)
        yield going(render.status_html(f"Loading the {request.settings['pair']} pair…")), gr.skip()
        pair, prompt_ids = load_prompt(request)
        yield going(render.status_html("Computing the target's exact distribution…")), gr.skip()
        labels, start, last_drawn, tally = None, "", 0.0, None
        tallies = draws.run_lab(pair, prompt_ids, config, planned, wrong)
        for tally in until_stopped(tallies, pair, session, "lab", started):
            if labels is None:
                labels, lab_start = bin_labels(tally.bins, pair), tally.start
                if lab_start.lead_ids:
                    start = lab_start_html(pair.decode(list(lab_start.lead_ids)), pair.decode(list(lab_start.skipped)),
                                           lab_start.skipped_prob)
            if over_time(started):
                yield lab_values(tally, labels, wrong, started, start, settings, time_limit_note("the lab"))
                return
            if time.perf_counter() - last_drawn >= REDRAW_S:
                yield still_going(lab_values(tally, labels, wrong, started, start, settings))
                last_drawn = time.perf_counter()
        yield lab_values(tally, labels, wrong, started, start, settings)
    except RunStopped:  # Stop: the job ends there, the stopped line stays
        return
    except Exception as error:  # noqa: BLE001 — every failure becomes a message in the page
        yield render.status_html(describe_error(error), "error"), gr.skip()


def on_lab_example(section: LabSection) -> tuple:
    """Set the example's controls, tick the wrong rule (the button promises a setting where it is caught),
    say which, in the lab and in the page's status line beside the controls, and clear results that were for other
    settings."""
    example = {name: LAB_EXAMPLE[name] for name in section.examples}
    return (*example.values(), LAB_EXAMPLE_DRAWS, True, lab_example_html(example, LAB_EXAMPLE_DRAWS),
            empty_lab_chart(), lab_example_main_html(example))


def on_lab_stop(previous_status, visitor: gr.Request) -> str:
    return record_stopped(visitor, "lab", previous_status, "the chart and the p-values are for the draws made so far.",
                          "lab")


# --- wiring -------------------------------------------------------------------------------------------------------


def lab_tokens(section: LabSection):
    """The most tokens a lab may generate (ZeroGPU's budget): each draw is a round in each of its two lanes."""
    def tokens_of(visitor, num_draws_value, wrong_value, *values) -> int:
        gamma = zerogpu.count(dict(zip(section.names, values)).get("gamma"), 1)
        return 2 * zerogpu.count(num_draws_value, draws.MAX_DRAWS) * (1 + gamma)
    return tokens_of


def wire_lab(section: LabSection, inputs: list, page_status: gr.HTML, concurrency_id: str) -> None:
    """Run streams the tally into the status and the histogram; Stop cancels it; the example sets controls and
    says so in the lab and in the page's status line."""
    queued = section.run_button.click(on_section_queued, None, section.status, queue=False, api_visibility="private",
                                      show_progress="hidden")
    lab_event = queued.then(
        zerogpu.on_gpu(MethodType(on_lab_run, section), [section.status, section.chart], section.status,
                       lab_tokens(section)),
        [section.num_draws, section.wrong_rule, *inputs], [section.status, section.chart], api_visibility="private", concurrency_id=concurrency_id,
        show_progress="hidden",
    )
    section.stop_button.click(on_lab_stop, [section.status], [section.status], cancels=[lab_event], queue=False,
                              api_visibility="private")
    section.example_button.click(MethodType(on_lab_example, section), None,
                                 [*section.examples.values(), section.num_draws, section.wrong_rule, section.status,
                                  section.chart, page_status],
                                 queue=False, api_visibility="private")


# --- figure -------------------------------------------------------------------------------------------------------


def exactness_histogram(tally: LabTally, bin_labels: Sequence[str], wrong_rule: bool) -> go.Figure:
    """Share of draws per outcome in each lane, beside the exact distribution ± 2 standard errors: where a lane's
    bar lands about 95% of the time if its draws follow the target."""
    num_draws = tally.num_draws("speculative")
    title = f"First two new tokens: {num_draws} of {tally.num_planned} draws per lane"
    figure = base_figure(title, "first two generated tokens (token 1 · token 2)", "share of draws")
    exact = list(tally.bins.probs)
    spread = [2 * (p * (1 - p) / num_draws) ** 0.5 for p in exact] if num_draws else None
    baseline, speculative = lane_info("baseline"), lane_info("speculative")
    lanes = ((baseline.name, baseline.label, baseline.colour),
             (speculative.name, f"{speculative.label}, WRONG rule" if wrong_rule else speculative.label,
              COLORS["rejected"] if wrong_rule else speculative.colour))
    for lane, name, color in lanes:
        if num_draws:
            p_value = tally.p_value(lane)
            label = f"{name} ({'too few draws to test yet' if p_value is None and tally.too_few(lane) else p_equals(p_value)})"
            figure.add_bar(x=list(bin_labels), y=tally.frequencies(lane), name=label, marker_color=color, meta=lane,
                           customdata=tally.counts[lane], hovertemplate="%{x}: %{y:.1%} (%{customdata} draws)<extra>" + name + "</extra>")
    figure.add_scatter(
        x=list(bin_labels), y=exact, mode="markers", name="exact, from the target's logits (± 2σ)", meta="exact",
        marker={"symbol": "line-ew-open", "size": 30, "color": INK, "line": {"width": 3, "color": INK}},
        error_y={"type": "data", "array": spread, "visible": spread is not None, "color": "#777", "thickness": 1.5, "width": 6},
        hovertemplate="%{x}: exact %{y:.1%}<extra></extra>",
    )
    figure.update_layout(barmode="group", height=SECTION_HEIGHT + 40, yaxis_tickformat=".0%",
                         xaxis={"type": "category", "tickangle": -30})
    separate_title_and_legend(figure)
    if not num_draws:
        figure.add_annotation(text="drawing…", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.9,
                              font={"color": "#888"})
    return figure


# --- words --------------------------------------------------------------------------------------------------------


def lane_verdict(name: str, p_value: float | None, num_outside: int | None, num_bins: int, draws_needed: int) -> str:
    """One lane's verdict against the stated threshold, then its bars against their whiskers, so the words
    and the chart never seem to disagree (a bar outside ±2σ is not, alone, a verdict). `draws_needed`: while
    the lane has fewer draws than the test needs, no verdict, and how many it needs."""
    if p_value is None and draws_needed:
        return (f"{name}: no verdict yet: the test needs every tested pair expected at least 5 times, "
                f"about {draws_needed} draws.")
    if p_value is None:
        return f"{name}: no test (fewer than two outcomes to compare)."
    reading = verdict_of(p_value)
    if reading == "too close":  # two decimals would print 0.012 as "0.01 ≥ 0.01": a verdict on the line itself
        return (f"{name}: p-value = {p_value:.3f}, too close to the {SIGNIFICANCE} threshold to call either way "
                f"(the lab judges only below {TOO_CLOSE[0]:g} or from {TOO_CLOSE[1]:g}): draw again, with more draws.")
    p_text = escape_text(p_equals(p_value))
    if reading == "follows":
        verdict = f"{name}: {p_text} ≥ {SIGNIFICANCE}: no evidence against the target's exact distribution"
    else:
        verdict = f"{name}: {p_text} &lt; {SIGNIFICANCE}: these draws do not follow the target's distribution"
    if not num_outside:
        return verdict + "."
    many = num_outside > 1
    outside = (f"{num_outside} of its {num_bins} bars {'sit' if many else 'sits'} outside the ±2σ "
               f"whisker{'s' if many else ''}")
    if reading == "follows":
        return (f"{verdict}, though {outside}: about 1 bar in 20 does by chance, and the test weighs all the bars "
                "at once.")
    return f"{verdict} ({outside})."


def lab_start_html(lead_text: str, skipped_text: str, skipped_prob: float) -> str:
    """Why the lab tests after the target's own greedy start, not right after the prompt ("" when it does not)."""
    if not lead_text:
        return ""
    return (f"<p class='lab-start' style='margin:0 0 6px 0'>Right after the prompt the target is all but sure: "
            f"{inline_token(skipped_text, 'target')} holds {skipped_prob:.0%} of the first two tokens, so the histogram "
            f"would be one bar and “other”. The lab adds the target's own greedy start "
            f"{inline_token(lead_text, 'target')} to the prompt and tests the two tokens after it, where the target "
            f"is unsure: both lanes and the exact distribution continue from there.</p>")


def lab_status_html(num_done: int, num_planned: int, p_values: Mapping[str, float | None], num_bins: int,
                    wrong_rule: bool, elapsed_s: float, note: str = "", outside: Mapping[str, int] | None = None,
                    start: str = "", wrong_words: str = WRONG_CHAIN, draws_needed: int = 0,
                    settings: str = "") -> str:
    """Progress, then one verdict per lane against the threshold (with its bars outside their whiskers,
    `outside`; none while `draws_needed` says how many draws the test still waits for), the settings the draws
    were made with (`settings`, lab_settings_text), and where the lab tests (`start`, lab_start_html); data
    attributes carry the numbers."""
    done = num_done >= num_planned
    outside = outside or {}
    speculative = f"Speculative decoding, WRONG rule ({wrong_words})" if wrong_rule else "Speculative decoding"
    items = "".join(
        f'<li class="lab-p" data-lane="{lane}" data-p="{"" if p is None else repr(p)}" '
        f'data-outside="{outside.get(lane, 0)}">'
        f'{lane_verdict(name, p, outside.get(lane), num_bins, draws_needed if p is None else 0)}</li>'
        for lane, name, p in (("baseline", "Target alone", p_values.get("baseline")),
                              ("speculative", speculative, p_values.get("speculative")))
    )
    settings_line = f"<p class='lab-settings' style='margin:0 0 6px 0'>{escape_text(settings)}</p>" if settings else ""
    tested = (f"{num_bins - 1} likeliest (token 1, token 2) pairs are tested one by one (each expected at least 5 times), "
              f"the rest pooled as “other”." if num_bins > 1 else "")
    so_far = "" if done else " (so far)"
    return (
        f'<div class="lab-status" data-done="{"true" if done else "false"}" data-draws="{num_done}">'
        f"{progress_html(num_done, num_planned, 'draws per lane', elapsed_s)}{settings_line}{start}"
        f"<ul style='margin:6px 0'>{items}</ul>"
        f"<p style='margin:0;color:#555;font-size:13px'>Chi-square test{so_far}: the p-value is the chance of a mismatch "
        f"at least this large if the lane truly follows the target (not the target's probability p of the charts "
        f"above); below {SIGNIFICANCE} the lab says the lane does not follow it (wrong 1 time in "
        f"{round(1 / SIGNIFICANCE)} for a lane that does), except from {TOO_CLOSE[0]:g} to {TOO_CLOSE[1]:g}, where it "
        f"calls it too close to say either way. {tested} The chart's whiskers are ±2σ around each exact share, "
        f"one bar at a time: a lane that follows the target still has about 1 bar in 20 outside its whisker, so the "
        f"verdict is the test over all the bars, not any one bar.</p>"
        f"{f'<p class=lab-note>{escape_text(note)}</p>' if note else ''}</div>"
    )


def lab_settings_text(pair_name: str, temperature: float, top_k: int, top_p: float, gamma: int, drafter_label: str,
                      tree: int) -> str:
    """The settings the lab's draws were made with, said beside its verdict: the page's controls may have
    changed since."""
    sampling = f"temperature {temperature:g}, top-k {top_k or 'off'}, top-p {'off' if top_p >= 1 else f'{top_p:g}'}"
    drafting = f"a tree of up to {tree} nodes" if tree else f"γ = {gamma}"
    return f"Drawn with the {pair_name} pair at {sampling}; {drafting} from the {drafter_label}."


def setting_text(value: object) -> str:
    """A control's value as the page shows it: quoted text (a prompt's spaces count), on / off."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return repr(value) if isinstance(value, str) else str(value)


def example_settings_text(settings: Mapping[str, object]) -> str:
    return ", ".join(f"{name.replace('_', '-')} {setting_text(value)}" for name, value in settings.items())


def lab_example_html(settings: Mapping[str, object], num_draws: int) -> str:
    """What the lab's example button changed on the page, said once, with old results gone."""
    return status_html(f"The example set the page's controls above to: {example_settings_text(settings)}; and N = "
                        f"{num_draws} and the wrong rule on here (untick it to see the real rule pass the same test). "
                        f"Earlier results are cleared: press Run the lab.")


def lab_example_main_html(settings: Mapping[str, object]) -> str:
    """The same change, said where the controls are: a visitor back at the top finds them changed, and why."""
    return status_html(f"The exactness lab's example (below) set these controls: {example_settings_text(settings)}. "
                        f"Run uses them too.")
