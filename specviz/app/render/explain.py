"""How it works: the algorithm in a paragraph, then pointed at this run's own tokens."""

from __future__ import annotations

from specviz.decoding.events import RoundEvent
from specviz.app.render.lanes import LaneView, RunView
from specviz.app.render.tree_round import answer_text, num_branches, summary_text
from specviz.app.render.rule import (
    GREEDY_KEEP, RULE_EXACT, RULE_TEXT, SAME_DISTRIBUTION, WHY_EXACT, bonus_story, ended_story, rejection_story,
    rival_story,
)
from specviz.app.render.stats import comparison_of
from specviz.app.render.verdict import same_text
from specviz.app.render.tokens import (
    ended_at_end_of_text, escape_text, inline_token, prob, sure_text, target_sure_text,
)
from specviz.analysis.trace import Comparison
from specviz.app.wording import count, every

INTRO = (
    "<p><b>Speculative decoding</b> (Leviathan et al. 2023; Chen et al. 2023) lets a small <i>draft</i> model "
    "guess γ tokens one by one, then runs the big <i>target</i> model <b>once</b> over all of them. "
    f"{escape_text(RULE_TEXT)} {escape_text(RULE_EXACT)}</p>"
    f'<p class="why-exact">{escape_text(WHY_EXACT)}</p>'
)


def explain_html(run: RunView | None) -> str:
    """The explainer, pointing at this run's own tokens."""
    if run is None or not run.speculative.trace.rounds:
        return INTRO + "<p><i>Run the demo to see this explained with its own tokens.</i></p>"
    lane = run.speculative
    rounds = [event for event in lane.trace.rounds if event.gamma > 0]
    rejected = next((e for e in rounds if e.next_kind == "resample"), None)
    bonus = next((e for e in rounds if e.next_kind == "bonus" and not e.took_rival), None)
    rival = next((e for e in rounds if e.took_rival and len(e.emitted_ids) == 2), None)
    # a draft tree's round: the one with the most branches, so the tree is worth a sentence
    tree = max((e for e in rounds if e.is_tree and num_branches(e) > 1), key=num_branches, default=None)
    # One example of each ending (and of a rival the target took, and of a tree), cited in the order the rounds ran,
    # each round once; a tree round is told as the tree it was, whatever its ending (as a chain, its judged path
    # read as "the draft proposed ' x'", one token, where the one pass had checked a tree of eight).
    chosen = {e.round_index: (e, explain_tree if e.is_tree else explain) for e, explain in (
        (rejected, explain_rejection), (bonus, explain_bonus), (rival, explain_rival), (tree, explain_tree)) if e is not None}
    points = [explain(lane, e) for _, (e, explain) in sorted(chosen.items())]
    comparison = comparison_of(run)
    if comparison is not None:
        points += [explain_speed(run, comparison), explain_sameness(run)]
    items = "".join(f"<li style='margin-bottom:6px'>{point}</li>" for point in points)
    return INTRO + f"<p><b>In this run:</b></p><ul>{items}</ul>"


def explain_rejection(lane: LaneView, event: RoundEvent) -> str:
    """One sentence on a round that ended in a rejection: at temperature 0 the target's own pick; above it p, q,
    the chance to keep the draft and the coin, then the resample."""
    texts = lane.round_texts[event.round_index]
    proposed = " ".join(inline_token(text, event.verdict(i)) for i, text in enumerate(texts.drafted))
    bad, rejected = event.drafted[event.num_accepted], inline_token(texts.drafted[event.num_accepted], "rejected")
    own = inline_token(texts.next_text, "resample")
    if lane.greedy:
        why = rejection_story(event.num_accepted, rejected, own, True, target_sure=escape_text(target_sure_text(bad)),
                              draft_sure=escape_text(sure_text(bad)))
    else:
        why = rejection_story(event.num_accepted, rejected, own, False, p=prob(bad.target_prob), q=prob(bad.draft_prob),
                              chance=prob(bad.accept_prob), r=f"{bad.r:.3f}")
    return (f"In round {event.round_index + 1} the drafter proposed {proposed}. {why}: "
            f"{count(event.num_accepted + 1, 'token')} for one target pass.")


def explain_rival(lane: LaneView, event: RoundEvent) -> str:
    """One sentence on a round where a rival guess, not the drafter's first pick, was the target's choice."""
    texts = lane.round_texts[event.round_index]
    others = [inline_token(text, "rejected") for i, text in enumerate(texts.guesses) if i not in (0, event.taken_guess)]
    taken = inline_token(texts.drafted[0], "accepted")
    story = rival_story(inline_token(texts.guesses[0], "rejected"), f"{event.guesses[0].draft_confidence:.0%}",
                        " and ".join([taken, *others]), taken, inline_token(texts.next_text, "bonus"),
                        count(len(event.emitted_ids), "token"))
    return f"In round {event.round_index + 1} {story}"


def explain_tree(lane: LaneView, event: RoundEvent) -> str:
    """A round that drafted a tree: what it proposed, what the one pass checked, which path won and why the
    first losing branch lost (the inspector's own sentences, so the two never disagree)."""
    texts = lane.round_texts[event.round_index].nodes
    return (f"{escape_text(summary_text(event, texts))} {escape_text(answer_text(event, texts, lane.greedy))} "
            "Open that round in the inspector (click one of its tokens) to see the tree and its mask.")


def explain_bonus(lane: LaneView, event: RoundEvent) -> str:
    """One sentence on a round whose drafts were all accepted, so the verify pass gave a bonus token."""
    texts = lane.round_texts[event.round_index]
    if ended_at_end_of_text(event):
        kept = " ".join(inline_token(text, "accepted") for text in texts.drafted[: event.num_kept_drafts])
        return f"In round {event.round_index + 1} {ended_story(kept, count(len(event.emitted_ids), 'token'))}."
    proposed = " ".join(inline_token(text, "accepted") for text in texts.drafted)
    story = bonus_story(every(event.gamma, "draft"), event.gamma == 1, proposed, inline_token(texts.next_text, "bonus"))
    return f"In round {event.round_index + 1} {story}: {count(len(event.emitted_ids), 'token')} for one target pass."


def explain_speed(run: RunView, comparison: Comparison) -> str:
    """What the rounds added up to, in the algorithm's own counts (α̂, τ, target passes); what that was worth on the
    clock, the formula's prediction and which γ are the result card's, each said there once."""
    baseline, speculative = run.baseline.trace, run.speculative.trace
    passes, draft_cost = count(speculative.num_target_forwards, "pass", "passes"), f"c = {comparison.cost_ratio:.2f}"
    # the target alone makes one pass a token, so drafts saved passes where the lane made fewer than its tokens
    saved = speculative.num_target_forwards < speculative.num_tokens
    if speculative.num_tokens != baseline.num_tokens:  # sampled lanes of different lengths: each lane's own count
        made = (f"{passes} for {count(speculative.num_tokens, 'token')} (the target alone: "
                f"{baseline.num_target_forwards} for {baseline.num_tokens})")
    elif saved:
        made = f"{passes} instead of {baseline.num_target_forwards}"
    else:  # no draft saved a pass ("12 passes instead of 12" said nothing)
        made = f"{passes}, no fewer than the target alone's {baseline.num_target_forwards}"
    made += (f". Fewer passes are not yet a speedup: every round also runs the drafter (each draft step here cost "
             f"{draft_cost} of a target step), and a pass over several tokens can cost more than a step" if saved
             else f": the drafter's steps (each {draft_cost} of a target step) came on top of them")
    return (
        f"Over the run the target accepted α̂ = {comparison.acceptance_rate:.2f} of the drafts it examined, each of "
        f"its passes gave τ = {speculative.tokens_per_target_forward:.2f} tokens after the prefill, and it made "
        f"{made}. What the clock measured is on the result card above; what the formula predicts, and which γ to "
        f"pick, under its <i>Show the arithmetic</i>."
    )


def explain_sameness(run: RunView) -> str:
    """Why the lanes print the same text (greedy) or different text (sampling), and why both are right."""
    if run.settings.get("temperature", 0) == 0:
        return (f"{GREEDY_KEEP.capitalize()} (greedy: both models pick their most likely token), so the lanes should "
                "print the same tokens, and the figures above say whether they did, checked token by token.")
    # top-k 1 leaves the target one token: both samples are then its greedy text, and the card says "✓ yes"
    drawn = ("here both came out the same text" if same_text(run) else "so their texts can differ")
    return (
        f"At temperature {run.settings.get('temperature')} each lane draws its own random sample, {drawn}. "
        f"{SAME_DISTRIBUTION} The exactness lab draws hundreds of samples from both to show it."
    )
