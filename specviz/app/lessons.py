"""The lab's, the theory explorer's and the γ sweep's words, as HTML, and the page's status line.
Step mode's words are specviz.app.step_lessons. No gradio and no models, like specviz.app.render, whose
token styles it reuses so a token looks the same in every part of the page.

Every sentence names this run's own tokens and numbers; token text is always escaped.
"""

from __future__ import annotations

from typing import Mapping

from specviz.analysis.payoff import Payoff, judge_run
from specviz.app.render.tokens import escape_text, inline_token, status_html
from specviz.analysis.trace import Comparison
from specviz.app.wording import count, duration_text, p_equals

SIGNIFICANCE = 0.01  # below this p-value the lab says a lane does not follow the target


# --- exactness lab ----------------------------------------------------------------------------------------


def lane_verdict(name: str, p_value: float | None, num_outside: int | None = None, num_bins: int = 0,
                 draws_needed: int = 0) -> str:
    """One lane's verdict against the stated threshold, then its bars against their whiskers, so the words
    and the chart never seem to disagree (a bar outside ±2σ is not, alone, a verdict). `draws_needed`: while
    the lane has fewer draws than the test needs, no verdict, and how many it needs."""
    if p_value is None and draws_needed:
        return (f"{name}: no verdict yet: the test needs every tested pair expected at least 5 times, "
                f"about {draws_needed} draws.")
    if p_value is None:
        return f"{name}: no test (fewer than two outcomes to compare)."
    p_text = escape_text(p_equals(p_value))
    if p_value >= SIGNIFICANCE:
        verdict = f"{name}: {p_text} ≥ {SIGNIFICANCE}: no evidence against the target's exact distribution"
    else:
        verdict = f"{name}: {p_text} &lt; {SIGNIFICANCE}: these draws do not follow the target's distribution"
    if not num_outside:
        return verdict + "."
    bars = f"{num_outside} of its {num_bins} bars" if num_outside > 1 else f"1 of its {num_bins} bars"
    verb = "sit" if num_outside > 1 else "sits"
    if p_value >= SIGNIFICANCE:
        return (f"{verdict}, though {bars} {verb} outside the ±2σ whisker{'s' if num_outside > 1 else ''}: about 1 bar "
                f"in 20 does by chance, and the test weighs all the bars at once.")
    return f"{verdict} ({bars} {verb} outside the ±2σ whisker{'s' if num_outside > 1 else ''})."


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
                    start: str = "", wrong_words: str = "resample from p", draws_needed: int = 0,
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
        f'<div><progress max="{num_planned}" value="{num_done}" style="width:220px;vertical-align:middle"></progress> '
        f"{num_done} of {num_planned} draws per lane · {elapsed_s:.0f} s{time_left_text(num_done, num_planned, elapsed_s)}"
        f"</div>{settings_line}{start}<ul style='margin:6px 0'>{items}</ul>"
        f"<p style='margin:0;color:#555;font-size:13px'>Chi-square test{so_far}: the p-value is the chance of a mismatch "
        f"at least this large if the lane truly follows the target (not the target's probability p of the charts "
        f"above); below {SIGNIFICANCE} the lab says the lane does not follow it, a mistake 1 time in "
        f"{round(1 / SIGNIFICANCE)} for a lane that does. {tested} The chart's whiskers are ±2σ around each exact share, "
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


def time_left_text(num_done: int, num_planned: int, elapsed_s: float) -> str:
    """" · about 3 min left", from the pace so far; nothing before the first draw or after the last."""
    if num_done <= 0 or num_done >= num_planned:
        return ""
    left_s = elapsed_s / num_done * (num_planned - num_done)
    return f' · <span class="time-left" data-left-s="{left_s:.0f}">about {duration_text(left_s)} left</span>'


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


def stopped_html(previous_html: str, what: str) -> str:
    """A section's last status with a line saying the user stopped it (once, however often pressed)."""
    if 'data-kind="stopped"' in previous_html:
        return previous_html
    return f'{previous_html}<div class="status-info" data-kind="stopped">Stopped: {escape_text(what)}</div>'


# --- theory explorer ---------------------------------------------------------------------------------------


def theory_note_html(alpha: float, cost_ratio: float, verify_cost: float, comparison: Comparison | None,
                     gamma: int | None, paying_alpha: float | None, verdict: Payoff | str | None = None) -> str:
    """The sliders' prediction, worded as one; then the last run's measured verdict (specviz.analysis.payoff) and
    why prediction and measurement differ, in that run's own numbers. `verdict` is the run's one verdict
    (render.verdict.run_payoff), or the sentence saying why it has none; None: judged here as one run
    with no measured spread."""
    if alpha > cost_ratio:
        free = "with a free verify (v = 1) the point lies in the green area (α &gt; c), where the formula predicts a gain"
    else:
        free = ("even with a free verify (v = 1) the point lies outside the green area (α ≤ c), where the formula "
                "predicts no gain")
    if paying_alpha is None:
        with_v = f"with v = {verify_cost:.2f} no α is enough at c = {cost_ratio:.2f}"
    else:
        side = "above" if alpha > paying_alpha else "below"
        with_v = (f"with v = {verify_cost:.2f} a gain needs α above {paying_alpha:.2f} (the orange line), and "
                  f"α = {alpha:.2f} is {side} it")
    predicted = Payoff(alpha, cost_ratio, verify_cost)
    best = (f"γ = {predicted.predicted_gamma} ({predicted.predicted_speedup:.2f}×)" if predicted.predicted_pays
            else escape_text(predicted.recommendation_text()))
    lines = [f"<b>Predicted</b> at α = {alpha:.2f}, c = {cost_ratio:.2f}, v = {verify_cost:.2f} (the sliders): {free}; "
             f"{with_v}. The formula's best γ there: {best}."]
    if comparison is not None and gamma is not None:
        payoff = verdict if verdict is not None else judge_run(
            comparison.acceptance_rate, comparison.cost_ratio, comparison.verify_cost, gamma, comparison.speedup)
        pays, words = ("none", payoff) if isinstance(payoff, str) else (str(payoff.pays).lower(), payoff.verdict_text())
        lines.append(f'<b>Measured</b>, the last run (γ = {gamma}, the diamond): <span class="verdict" '
                     f'data-pays="{pays}">{escape_text(words)}</span>')
        lines.append(
            f"Its α̂ = {comparison.acceptance_rate:.2f}, c = {comparison.cost_ratio:.2f} and v = "
            f"{comparison.verify_cost:.2f}: the formula with v = 1 predicts {comparison.predicted_speedup:.2f}×, with the "
            f"measured v {comparison.predicted_with_verify:.2f}×, and the clock measured {comparison.speedup:.2f}×. The "
            f"formula takes a (γ+1)-token verify to cost one target step; where it costs more, that is most of the gap "
            f"(the run's statistics break down the rest). One run is one noisy sample; the γ sweep below repeats runs."
        )
    else:
        lines.append("Press Run above: the last run's measured α̂, c and v then fill these sliders, and its measured "
                     "speedup appears on the chart with the measured verdict.")
    return "".join(f"<p style='margin:0 0 6px 0'>{line}</p>" for line in lines)


# --- γ sweep ----------------------------------------------------------------------------------------------------


def sweep_status_html(num_done: int, num_total: int, elapsed_s: float, view=None, note: str = "") -> str:
    """Progress; at the end, the one verdict (specviz.analysis.payoff): the recommended γ (and tree budget, where
    the page drafts a tree and the sweep timed it beside a chain) by the one rule (medians within the noise tie,
    and a tie goes to the cheaper setup), why that one, whether it is the range's edge, what a tree trades, and the
    formula's best γ beside it as a prediction; or, when nothing beats the target alone beyond the noise, "none" and why."""
    done = num_done >= num_total
    parts = [f'<div><progress max="{num_total}" value="{num_done}" style="width:220px;vertical-align:middle"></progress> '
             f"{num_done} of {num_total} timed runs · {elapsed_s:.0f} s{time_left_text(num_done, num_total, elapsed_s)}"
             f"</div>"]
    gamma = tree = ""
    if view is not None and view.payoff is not None:
        chosen = view.recommended_result
        gamma, tree = (str(chosen.gamma), str(chosen.tree)) if chosen is not None else ("none", "none")
        parts.append(sweep_recommended_html(view, "" if done else " so far"))
        parts.append(sweep_prediction_html(view))
    if note:
        parts.append(f"<p class='sweep-note'>{escape_text(note)}</p>")
    return (f'<div class="sweep-status" data-done="{"true" if done else "false"}" data-runs="{num_done}" '
            f'data-gamma="{gamma}" data-tree="{tree}">{"".join(parts)}</div>')


def sweep_recommended_html(view, so_far: str) -> str:
    """The recommendation (#sweep-recommended, its γ and tree budget as data), and why that one; or "none" and why."""
    payoff, chosen = view.payoff, view.recommended_result
    if chosen is None:
        return (f'<p id="sweep-recommended" data-gamma="none" data-tree="none" style="margin:6px 0"><b>Recommended '
                f"γ{so_far}: {escape_text(payoff.recommendation_text())}.</b></p>"
                f'<p class="verdict" data-pays="false" style="margin:0 0 6px 0">{escape_text(payoff.verdict_text())}</p>')
    named = f": {view.label_of(chosen)}" if view.has_trees else f" {view.label_of(chosen)}"  # "Recommended: γ = 3, tree 8"
    html = (f'<p id="sweep-recommended" data-gamma="{chosen.gamma}" data-tree="{chosen.tree}" '
            f'data-edge="{payoff.at_range_edge or ""}" style="margin:6px 0"><b>Recommended{named}</b>{so_far}: median '
            f"{chosen.median_speedup:.2f}× ({chosen.min_speedup:.2f}–{chosen.max_speedup:.2f}× over "
            f"{count(chosen.num_runs, 'run')}), above 1× beyond the noise.</p>")
    why = payoff.choice_text()
    if why:  # one γ measured is no choice among several
        html += (f"<p class='sweep-choice' style='margin:0 0 6px 0'>Why this {'setup' if view.has_trees else 'γ'}: "
                 f"{escape_text(why)}</p>")
    return html


def sweep_prediction_html(view) -> str:
    """Beside a recommendation, the formula's best γ as a prediction (a verdict of "none" already gives it, as the
    reason); τ and α̂ per cell; what a tree trades, where one was timed; and what the two curves are."""
    payoff = view.payoff
    beside = f"Beside it, {escape_text(payoff.prediction_text())}. " if payoff.pays else ""
    trade = f"{escape_text(tree_trade_text(view))} " if view.has_trees else ""
    cells = "the chain's γ cells" if view.has_trees else "the sweep"
    curves = (" Both curves are a chain's: the formula has no term for a tree, so the tree's points are measured only."
              if view.has_trees else "")
    return (f"<p class='sweep-prediction' style='margin:0;color:#555;font-size:13px'>{beside}"
            f"{escape_text(sweep_tau_text(view))} {trade}"
            f"The blue curve is the formula at α̂ = {view.alpha:.2f}, c = {view.cost_ratio:.2f} (medians over {cells}) "
            f"with v = 1; the orange one puts in each γ's measured verify cost, which grows with γ where a longer "
            f"verify costs more.{curves} The measured medians decide; the curves explain.</p>")


def tree_trade_text(view) -> str:
    """What a draft tree trades, in the τ and v of the cells the rule picks among the chain's γ and the tree's."""
    chain, tree = view.pick_of(0), view.pick_of(view.trees[-1])
    if chain is None or tree is None:
        return ""
    return (f"A tree trades more tokens per target pass (τ) for a costlier verify (v, in target steps), since one "
            f"pass checks every node: here the chain's pick, γ = {chain.gamma}, gave τ = "
            f"{chain.tokens_per_target_forward:.2f} at v = {chain.verify_cost:.2f}, and tree {tree.tree}'s, "
            f"γ = {tree.gamma}, τ = {tree.tokens_per_target_forward:.2f} at v = {tree.verify_cost:.2f}.")


def sweep_tau_text(view) -> str:
    """τ beside α̂ for each γ swept (and tree budget): a share of drafts kept against the tokens one target pass gave."""
    cells = ("; " if view.has_trees else ", ").join(
        f"{view.label_of(r)}: α̂ {r.acceptance_rate:.2f}, τ {r.tokens_per_target_forward:.2f}" for r in view.results)
    return (f"Per {'setup' if view.has_trees else 'γ'} ({cells}): α̂ is the share of examined drafts the target "
            "accepted, τ the tokens one target pass gave (its own correction or bonus included), so τ ≥ 1, and a "
            "larger γ raises τ only where the drafter keeps drafting and its drafts keep being accepted.")
