"""The run's figures: one column per lane, the measured speedup beside the theory's prediction,
and what a single run can and cannot tell."""

from __future__ import annotations

from dataclasses import asdict

from specviz.analysis import theory
from specviz.app.palette import COLORS
from specviz.analysis.expectations import expect_here, gpu_text_for
from specviz.analysis.payoff import Payoff, shown_below_one, token_counts_text
from specviz.catalogue import lane_info
from specviz.app.render.lanes import RunView, lane_status
from specviz.app.render.rule import WHY_EXACT_POINTER
from specviz.app.render.tau import tau_text
from specviz.app.render.verdict import (
    no_verdict_text, run_payoff, same_text, speedup_is_quoted, verdict_html, which_gamma, which_gamma_html,
)
from specviz.app.render.tokens import escape_text
from specviz.app.wording import count
from specviz.analysis.trace import Comparison, Trace, compare, first_divergence, speedup

def comparison_of(run: RunView) -> Comparison | None:
    baseline, speculative = run.baseline.trace, run.speculative.trace
    if run.has_lane("speculative") and baseline.rounds and speculative.rounds:
        return compare(baseline, speculative, run.gamma)
    return None


def stats_dict(run: RunView) -> dict:
    """The run's figures as plain numbers (the API returns these; the table shows them)."""
    stats = {"settings": dict(run.settings)}
    for name in run.lane_names:
        stats[name] = run.lane(name).trace.summary()
    comparison = comparison_of(run)
    if comparison is not None:
        stats.update(asdict(comparison))  # best_gamma is the formula's: a prediction, as is whether it pays
        stats["predicted_pays"] = stats.pop("pays")
        payoff = run_payoff(run, comparison)
        if payoff is not None:  # the API has no click: the verdict with its detail
            stats.update(speculation_pays=payoff.pays, verdict=payoff.full_verdict_text())
        else:  # never a verdict on unequal work
            stats.update(speculation_pays=None, verdict=no_verdict_text(run))
        answer = which_gamma(run, comparison)  # the page's one answer to "which γ", as the arithmetic says it
        stats.update(recommended_gamma=answer.gamma, recommendation=answer.text())
    reference = run.lane("reference").trace if run.has_lane("reference") else None
    if reference is not None and reference.rounds and run.baseline.trace.rounds:
        stats["reference_speedup"] = speedup(run.baseline.trace, reference)
        stats["ours_over_reference"] = speedup(reference, run.speculative.trace)
    stats["identical_tokens"] = identical_tokens(run)
    if "bitwise_verify" in run.settings:  # measured when the target loaded (specviz.models.invariance)
        stats["bitwise_verify"] = run.settings["bitwise_verify"]
    return stats


def identical_tokens(run: RunView) -> dict:
    """For every lane beside the baseline: does it match the baseline token for token?"""
    baseline = run.baseline.trace
    return {
        name: first_divergence(baseline, run.lane(name).trace) is None
        and run.lane(name).trace.num_tokens == baseline.num_tokens
        for name in run.lane_names
        if name != "baseline" and run.lane(name).trace.done and baseline.done
    }


def lane_rows(traces: list[Trace], limit: int | None, stopped: bool = False) -> list[tuple[str, list, str]]:
    """The lanes table's rows; `stopped`: the run was stopped, so lanes still open say so, as their boxes do."""
    def each(fn, needs="prefill"):
        return [fn(trace) if (trace.rounds if needs == "rounds" else trace.prefill) else None for trace in traces]

    def drafting(fn):  # rounds and acceptance mean nothing for a lane that never drafts
        return [fn(trace) if trace.num_drafted else None for trace in traces]

    return [
        ("tokens generated", each(lambda t: t.num_tokens), "d"),
        ("wall time of model work (s)", each(lambda t: t.wall_s), ".3f"),
        ("tokens / s", each(lambda t: t.tokens_per_s), ".1f"),
        ("target forward passes", each(lambda t: t.num_target_forwards), "d"),
        ("draft forward passes", drafting(lambda t: t.num_draft_forwards), "d"),
        # τ counts the rounds only, as the bench and the formula do (trace.tokens_per_target_forward)
        ("tokens per target pass τ (after the prefill)", each(lambda t: t.tokens_per_target_forward, "rounds"), ".2f"),
        ("acceptance α̂", drafting(lambda t: t.acceptance_rate), ".3f"),
        ("why it stopped", [lane_status(trace, False, limit, stopped) if trace.finish or stopped else None
                            for trace in traces], "s"),
    ]


def lanes_table(run: RunView) -> str:
    names = list(run.lane_names)
    traces = [run.lane(name).trace for name in names]
    cell = 'style="padding:3px 12px;border-bottom:1px solid #eee;text-align:right"'
    head = 'style="padding:3px 12px;border-bottom:1px solid #ccc;text-align:right"'

    def fmt(value, spec):
        return "—" if value is None else format(value, spec)

    body = "".join(
        f'<tr><td style="padding:3px 12px;border-bottom:1px solid #eee">{name}</td>'
        + "".join(f"<td {cell}>{fmt(value, spec)}</td>" for value in values)
        + "</tr>"
        for name, values, spec in lane_rows(traces, run.settings.get("max_new_tokens"), run.cut_short)
    )
    columns = "".join(f'<th {head} data-lane="{name}">{lane_info(name).label}</th>' for name in names)
    return (
        '<table class="stats-table" style="border-collapse:collapse;font-size:13.5px">'
        f'<tr><th style="padding:3px 12px;border-bottom:1px solid #ccc;text-align:left"></th>{columns}</tr>{body}</table>'
    )


def theory_table(run: RunView, comparison: Comparison) -> str:
    """The formula's two costs the lanes table has no row for (c, v) and the page's one answer to "which γ"; α̂ and
    τ are the lanes table's, the speedup the card's, the predictions the arithmetic's paragraph: each said once."""
    cell = 'style="padding:3px 12px;text-align:right"'
    left = 'style="padding:3px 12px"'
    rows = [
        ("cost ratio c (draft step / target step)", f"{comparison.cost_ratio:.3f}"),
        ("verify cost v (verify round / target step; the formula assumes 1)", f"{comparison.verify_cost:.2f}"),
        ("which γ: the page's one answer (the bench's pick here, or this setup's γ sweep)",
         which_gamma_html(which_gamma(run, comparison))),
    ]
    body = "".join(f"<tr><td {left}>{name}</td><td {cell}>{value}</td></tr>" for name, value in rows)
    return f'<table class="theory-table" style="border-collapse:collapse;font-size:13.5px">{body}</table>'


def gap_text(run: RunView, comparison: Comparison) -> str:
    """Where prediction and measurement part, in target steps per round: the drafts (γ·c), the verify
    (v), tokens per round short of the formula's (rounds cut short), and what the formula leaves out."""
    speculative, baseline = run.speculative.trace, run.baseline.trace
    rounds = speculative.rounds
    step_s = baseline.mean_target_step_s
    if not rounds or step_s <= 0:
        return ""
    gamma, alpha = run.gamma, comparison.acceptance_rate
    expected_tokens = theory.expected_tokens_per_round(alpha, gamma)
    drafts = sum(event.num_draft_forwards for event in rounds) / len(rounds)
    measured_tokens = speculative.tokens_per_target_forward  # τ: the table's figure, counted the same way
    round_steps = sum(event.draft_s + event.verify_s for event in rounds) / len(rounds) / step_s
    in_rounds = measured_tokens / round_steps if round_steps > 0 else 0.0
    text = (
        f"Where the prediction and the clock part, in target steps (one step = {step_s * 1000:.1f} ms here): the "
        f"formula expects {expected_tokens:.2f} tokens per round for γ·c + v = {gamma}×{comparison.cost_ratio:.2f} + "
        f"{comparison.verify_cost:.2f} = {gamma * comparison.cost_ratio + comparison.verify_cost:.2f} steps. "
        f"The rounds made τ = {measured_tokens:.2f} tokens each (fewer when the end of text or the token limit cut a round "
        f"short) for {drafts:.1f} draft steps and a verify, {round_steps:.2f} steps in all: {in_rounds:.2f}× inside the "
        f"rounds. The rest of the gap to the measured {comparison.speedup:.2f}× is outside them: both prefills (the "
        f"speculative one also fills the draft's cache) and the first token, which each lane takes from the target."
    )
    faster = faster_verify_text(comparison.verify_cost)
    return f"{text} {faster}" if faster else text


def faster_verify_text(verify_cost: float) -> str:
    """A learner's first question at v < 1, how checking several tokens can cost less than writing one: it cannot,
    and what the figure measured instead."""
    if round(verify_cost, 2) >= 1:
        return ""
    return (f"A verify cost below 1 (v = {verify_cost:.2f}) is the clock's, not the work's: a verify does at least a "
            f"step's work, so where the speculative lane's verifies took {100 * (1 - verify_cost):.0f} % less time than "
            "the target alone's steps, the machine ran faster while they ran: the noise the verdict's band is about.")


def sampled_note(run: RunView) -> str:
    """At T > 0 each lane draws its own sample. Where the two differ the verdict's one sentence says why no speedup
    is quoted (no_verdict_text), so nothing here; where they came out the same text, why this one is quoted."""
    temperature = run.settings.get("temperature", 0) or 0
    if temperature == 0 or not same_text(run):  # same_text: both lanes finished, with the same tokens
        return ""
    return (f'<p class="sampled-note" style="margin:2px 0;color:#555">At temperature {temperature:g} each lane drew '
            f"its own sample, and here both drew the same text ({count(run.baseline.trace.num_tokens, 'token')}), so "
            "this speedup compares like for like, as a greedy run's always does.</p>")


INT8_DRAFTERS_WORDS = (", the drafters in int8 (on a CPU a draft step waits on memory, and int8 weights "
                       "halve it; only the guesses can change, never the output: the target verifies as loaded)")
HARD_CASE = "a big target is the easy case, a small one the hard one."


def setup_html(run: RunView) -> str:
    """Where the figures were measured: the answer to "why faster, or not" starts with the machine."""
    settings = run.settings
    if "device" not in settings:  # runs saved before the device was recorded
        return ""
    return (f'<p class="setup" style="margin:2px 0;color:#555">Measured with the {escape_text(str(settings.get("pair")))} '
            f'pair on {escape_text(str(settings.get("recorded_on") or settings["device"]))} in {escape_text(str(settings.get("precision")))}'
            f'{INT8_DRAFTERS_WORDS if settings.get("int8_drafters") else ""}. '
            "The more a target step costs next to a draft step, and the closer a (γ+1)-token verify comes to one "
            f"step, the more speculation gains: {HARD_CASE}{escape_text(gpu_figure_words(run))}</p>")


def gpu_figure_words(run: RunView) -> str:
    """The page's one GPU sentence, for the pair that ran (its own GPU record's figures, "" where none measured it):
    "would a GPU do better?" is asked after a run too, on a CPU and on a GPU alike."""
    words = gpu_text_for(str(run.settings.get("pair", "")))
    return f" {words}" if words else ""


def exactness_html(run: RunView) -> str:
    """Which guarantee this target gives here, before any speed figure: by construction or not (and the check at load)."""
    words = run.settings.get("exactness")
    if not words:
        return ""
    mark = "Exact here" if run.settings.get("bitwise_verify") else "Not guaranteed here"
    return (f'<p class="exactness" data-bitwise="{str(bool(run.settings.get("bitwise_verify"))).lower()}" '
            f'style="margin:2px 0;color:#555"><b>{mark}:</b> {escape_text(words)}.</p>')


def tie_words(divergence_gap: float | None) -> str:
    """How close the target's call was where the lanes parted: a gap of 0 is a tie, not "only 0 apart"."""
    if divergence_gap is None:
        return ""
    if divergence_gap == 0:
        return " There the target's two likeliest tokens had the very same score: an exact tie."
    return f" There the target's two likeliest tokens were only {divergence_gap:.3g} apart in its scores, a near-tie."


def parted_html(run: RunView, index: int, divergence_gap: float | None) -> str:
    """Greedy lanes that wrote different texts: said first, in plain words, and why no verdict follows."""
    baseline, speculative = run.baseline.trace, run.speculative.trace
    gap = tie_words(divergence_gap)
    return (
        f'<p class="parted" data-index="{index}" style="margin:4px 0;padding:6px 8px;background:#fff4e5;'
        f'border-left:4px solid {COLORS["rejected"]}"><b>The two lanes wrote different texts from token {index + 1}</b> (marked ▾ in both lanes). '
        f"At temperature 0 they should be identical: the algorithm keeps the target's own choice at every token. "
        f"They parted because the target's arithmetic was not the same in both lanes: checking several drafted "
        f"tokens in one pass rounded its numbers a little differently from computing one token at a time, and "
        f"that tipped a close call.{gap} What keeps them together: a target that computes a token with the same "
        f"arithmetic however many it checks at once (specviz gives it one; the line above says whether this "
        f"machine's kernels allow it). "
        f"So the speed below compares different texts "
        f"({token_counts_text(baseline.num_tokens, speculative.num_tokens)}) and gives no verdict.</p>"
    )


def card_tile(label: str, value: str, note: str, name: str) -> str:
    """One figure of the result card: what it is, the number, one line on how to read it."""
    return (f'<div class="card-tile" data-figure="{name}" style="min-width:150px;flex:1;padding:6px 12px;'
            f'border:1px solid #ddd;border-radius:8px;background:#fafafa">'
            f'<div style="font-size:12.5px;color:#555">{label}</div>'
            f'<div style="font-size:22px;font-weight:700;line-height:1.3">{value}</div>'
            f'<div style="font-size:12.5px;color:#555">{note}</div></div>')


def speed_note(run: RunView, payoff: Payoff | None, parting: int | None) -> str:
    """How to read this one clock reading: its noise band here, or why it compares nothing."""
    if parting is not None:
        return "not a speedup: the two texts differ"
    if run.was_stopped:
        return "stopped: the lanes did unequal work"
    if not speedup_is_quoted(run):
        return "not a speedup: two samples of different texts"
    if not run.done:
        return "so far"
    measurement = payoff.measured[0] if payoff is not None and payoff.measured else None
    if measurement is not None and measurement.has_spread:
        low, high = measurement.noise_band
        return f"one noisy sample: could as well read {low:.2f}–{high:.2f}×"
    return "one noisy sample of the clock"


def same_text_tile(run: RunView, parting: int | None) -> str:
    """Did the speculative lane write the target's text: the product's promise, checked token by token."""
    value, note = same_text_words(run, parting)
    return card_tile("Same text as the target alone", value, note, "same-text")


def not_guaranteed_why(run: RunView) -> str | None:
    """The run's "not guaranteed here: …" sentence where its greedy lanes are not exact by construction, else None."""
    if run.settings.get("exactness") and not run.settings.get("bitwise_verify"):
        return run.settings["exactness"]
    return None


def same_text_words(run: RunView, parting: int | None) -> tuple[str, str]:
    """The answer and its note, for the card's tile and the terminal's figures alike."""
    baseline, speculative = run.baseline.trace, run.speculative.trace
    guarantee = "" if not run.settings.get("exactness") else (
        " · not guaranteed here" if not_guaranteed_why(run) else " · exact by construction here")
    if not (baseline.done and speculative.done) and not run.was_stopped:
        value, note = "…", f"checked once both lanes finish{guarantee}"
    elif parting is not None:
        value, note = "✗ no", f"parted at token {parting + 1} (marked ▾){guarantee}"
    elif baseline.token_ids == speculative.token_ids:
        value, note = "✓ yes", f"{count(baseline.num_tokens, 'token')}, checked token by token{guarantee}"
    elif run.settings.get("temperature", 0) == 0:  # greedy, one lane stopped sooner (a Stop): the shared part agrees
        value, note = "✓ so far", (f"agrees wherever both have tokens (speculative {speculative.num_tokens}, "
                                           f"the target alone {baseline.num_tokens})")
    else:  # sampled lanes: two samples of one distribution
        value, note = "different samples", f"temperature {run.settings.get('temperature', 0):g}: the same distribution"
    return value, note


def result_card(run: RunView, comparison: Comparison, payoff: Payoff | None, parting: int | None) -> str:
    """The run in four figures (speedup, τ, α̂, same text) and one sentence of verdict, right under the lanes."""
    state = " (so far)" if not (run.done or run.was_stopped) else ""
    # a ratio of unequal work is never shown as a speedup figure: its tile says why instead
    shown = f"{comparison.speedup:.2f}×" if speedup_is_quoted(run) else "—"
    speed = (f'<b class="speedup" data-speedup="{comparison.speedup:.4f}" style="color:{COLORS["bonus"]}">'
             f"{shown}</b>")
    tau = run.speculative.trace.tokens_per_target_forward
    # the promise first (is it the target's text, and is that guaranteed here), then what it cost
    tiles = (same_text_tile(run, parting)
             + card_tile(f"Speedup, wall clock{state}", speed, speed_note(run, payoff, parting), "speedup")
             + card_tile("τ: tokens per target pass", f"{tau:.2f}", "the target alone: 1", "tau")
             + card_tile("α̂: drafts accepted", f"{comparison.acceptance_rate:.0%}", "of the drafts the target examined",
                         "alpha"))
    verdict = ""
    if payoff is not None or ((run.done or run.was_stopped) and parting is None):  # never one on unequal work: say why
        verdict = verdict_html(payoff, no_verdict_text(run))
    return f'<div class="result-card"><div style="display:flex;gap:10px;flex-wrap:wrap">{tiles}</div>{verdict}</div>'


def arithmetic_html(run: RunView, comparison: Comparison) -> str:
    """Behind "Show the arithmetic": the prediction beside the clock, the machine, α̂ against τ (the noise is the
    verdict's own question, answered under it: render.verdict.verdict_html)."""
    text = exactness_html(run) + (
        f'<p class="prediction" style="margin:4px 0">Predicted: Leviathan\'s formula, (1 − α̂^(γ+1)) / '
        f'((1 − α̂)(γc + 1)), gives <b class="predicted-speedup">{comparison.predicted_speedup:.2f}×</b> at '
        f'γ = {run.gamma} for a free verify; with the verify '
        f'cost measured here (v = {comparison.verify_cost:.2f}), <b class="predicted-with-verify">'
        f"{comparison.predicted_with_verify:.2f}×</b>; {clock_text(run, comparison)}.</p>"
    )
    text += setup_html(run) + sampled_note(run)
    reference = run.lane("reference").trace if run.has_lane("reference") else None
    if reference is not None and reference.done and run.baseline.trace.rounds:
        text += (
            f'<p class="reference-speed" style="margin:2px 0">transformers\' own generate() on the same pair ran at '
            f"{speedup(run.baseline.trace, reference):.2f}× the target alone; ours ran at "
            f"{speedup(reference, run.speculative.trace):.2f}× transformers'.</p>"
        )
    expectation = expect_here(precision=str(run.settings.get("precision"))) if run.settings.get("precision") else None
    against_plain = expectation.against_plain_text(len(run.prompt_ids)) if expectation else ""
    notes = (("against-plain", against_plain),
             ("on-screen", on_screen_text(run)),
             ("gap", gap_text(run, comparison) if run.done and same_text(run) else ""),
             ("tau", tau_text(run.speculative.trace, run.gamma, run.baseline.trace) if run.done else ""))
    text += "".join(f'<p class="{name}" style="margin:2px 0;color:#555;font-size:13.5px">{escape_text(words)}</p>'
                    for name, words in notes if words)
    return text


def clock_text(run: RunView, comparison: Comparison) -> str:
    """What the clock measured, beside the prediction: a speedup only where the lanes wrote the same text."""
    if not speedup_is_quoted(run):
        return (f"the clock's tokens/s ratio, {comparison.speedup:.2f}×, compares texts that differ, "
                "so it measures no speedup")
    # a slowdown is never worded as a gain
    return (f"the clock measured {comparison.speedup:.2f}× "
            f"{'the speed of the target alone (slower)' if shown_below_one(comparison.speedup) else 'as fast as the target alone'}")


def on_screen_text(run: RunView) -> str:
    """What one watched beside what the speedup compares: when each lane finished on screen (LaneView.shown_s, from
    the moment the first lane began reading its prompt), its model work, and what the page's drawing took (a live
    run's; "" for a replay or an unfinished run). The lanes take turns, so each waited while the other computed."""
    lanes = (run.baseline, run.speculative)
    if any(lane.shown_s is None or not lane.trace.done for lane in lanes):
        return ""
    (baseline, speculative), (model_b, model_s) = lanes, (lane.trace.wall_s for lane in lanes)
    drawing_s = max(0.0, max(baseline.shown_s, speculative.shown_s) - model_b - model_s)
    return (f"On screen the target alone finished {baseline.shown_s:.1f} s after the run began and speculative "
            f"decoding {speculative.shown_s:.1f} s after. The lanes take turns, one forward at a time, so each waits "
            f"while the other computes: their model work, which the speedup compares, took {model_b:.1f} s and "
            f"{model_s:.1f} s, and the page drawing them as they ran {drawing_s:.1f} s.")


def headline_html(run: RunView, comparison: Comparison | None, divergence_gap: float | None = None) -> str:
    """A parting said first, in plain words; then the result card. The rest is the arithmetic's."""
    if comparison is None:
        if run.was_stopped:  # no round will come: "appears once…" would wait for nothing
            return (exactness_html(run)
                    + "<p>No speedup: the run was stopped before the speculative lane ran a round.</p>")
        return exactness_html(run) + "<p>Speedup appears once the speculative lane has run a round.</p>"
    parting = run.greedy_parting()
    payoff = run_payoff(run, comparison) if run.done else None
    parted = parted_html(run, parting, divergence_gap) if parting is not None else ""
    return hub_copy_html(run) + parted + result_card(run, comparison, payoff, parting)


def hub_copy_html(run: RunView) -> str:
    """Said before any speed figure where the target is the hub's copy of the default one (a Space that could
    not fetch the GGUF): the drafters learned from the 4-bit file, so the records' α̂ and speed may not hold."""
    if not run.settings.get("target_hub_copy"):
        return ""
    return ('<p class="hub-copy">This target is the hub\'s SmolLM2-135M-Instruct, not the 4-bit GGUF copy the '
            "drafters were trained on: their acceptance, and so the speedup, may differ from the bench's records."
            "</p>")


def agreement_html(run: RunView, divergence_gap: float | None = None) -> str:
    """What the lanes' tokens say, checked token by token rather than assumed."""
    if not (run.baseline.trace.done and run.has_lane("speculative") and run.speculative.trace.done):
        return ""
    greedy = run.settings.get("temperature", 0) == 0
    baseline = run.baseline.trace
    parts = []
    for name in run.lane_names:
        if name == "baseline" or not run.lane(name).trace.done:
            continue
        other = run.lane(name).trace
        index = first_divergence(baseline, other)
        if index is None and other.num_tokens == baseline.num_tokens:
            css, words = "agree", ("identical to the target alone, checked token by token "
                                   f"({baseline.num_tokens} tokens)")
        elif index is None:
            css, words = "agree", (f"agrees with the target alone wherever both have tokens ({other.num_tokens} written "
                                   f"here, {baseline.num_tokens} by the target alone)")
        elif greedy:
            gap = (f"; the target's top-2 logit gap there is {divergence_gap:.3g}"
                   if divergence_gap is not None and name == "speculative" else "")
            css, words = "diverge", (f"parts from the target alone at token {index + 1}{gap}: the arithmetic differed, "
                                     "not the rule (see above)")
        else:
            css, words = "differ", (
                f"differs from the target alone from token {index + 1}, as it should at temperature "
                f"{run.settings.get('temperature')}: both follow the target's distribution, but each draws its own "
                "sample (the same distribution, not the same text); the exactness lab shows the distributions agree")
        at = "" if index is None else f' data-index="{index}"'
        parts.append(f'<span class="{css}" data-lane="{name}"{at}>{lane_info(name).label}: {words}</span>')
    items = "".join(f"<li>{part}.</li>" for part in parts)
    # the rule's one-line proof has one home, How it works; beside the check, only where to read it
    why = WHY_EXACT_POINTER if run.greedy_parting() is None else (
        "The rule keeps the target's text in exact arithmetic; this run's lanes parted because their arithmetic was "
        f"not the same (see above), not because of the rule. {WHY_EXACT_POINTER}")
    items += f'<li class="why-exact">{escape_text(why)}</li>'
    return f'<ul class="agreement" style="margin:4px 0 8px;font-size:13.5px">{items}</ul>'


def expectation_html() -> str:
    """What the bench's records say this machine gives (specviz.analysis.expectations), before any run."""
    expectation = expect_here()
    if expectation is None:
        return ""
    return f'<div class="expect-here" style="color:#555;margin-top:4px">{escape_text(expectation.text())}</div>'


def stats_html(run: RunView | None, divergence_gap: float | None = None) -> str:
    if run is None or not run.baseline.trace.prefill:
        return f'<div class="stats" style="color:#999">Statistics appear once a run starts.{expectation_html()}</div>'
    comparison = comparison_of(run)
    theory = theory_table(run, comparison) if comparison else ""
    arithmetic = arithmetic_html(run, comparison) if comparison else ""
    return (
        f'<div class="stats">{headline_html(run, comparison, divergence_gap)}'
        f'<details class="arithmetic" style="margin-top:6px"><summary style="cursor:pointer;color:#444">'
        f"Show the arithmetic: prediction vs clock, α̂ vs τ, the machine, each lane</summary>"
        f'{arithmetic}{agreement_html(run, divergence_gap)}'
        f'<div style="display:flex;gap:28px;flex-wrap:wrap;align-items:flex-start">{lanes_table(run)}{theory}</div>'
        f"</details></div>"
    )
