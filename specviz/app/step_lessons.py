"""Step mode's words, as HTML: the stages of one round (draft, verify, rival guesses, accept, verdict,
correction, roll back) on the run's own tokens, the prefill and the finish; the drafting side's words
are specviz.app.step_drafting. At temperature 0 the stages give the rule that decides there (the target's
own top pick) instead of the coin r and the one-hot p and q. No gradio and no models, like
specviz.app.render, whose token styles it reuses so a token looks the same in every part of the page.

Every sentence names this run's own tokens and numbers; token text is always escaped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from specviz.catalogue import drafter_info
from specviz.decoding.events import FinishEvent, RoundEvent
from specviz.app.render.lanes import RoundTexts, stop_text, target_pick_text
from specviz.app.render.tokens import GREEDY_RULE, inline_token, prob, status_html
from specviz.analysis.trace import Trace
from specviz.app.wording import count, every
from specviz.app.step_drafting import draft_sentence, listing, plain_token, rivals_sentence
from specviz.app.step_tree import tree_stages
from specviz.app.render.tree_round import tree_depth

if TYPE_CHECKING:  # annotations only: the words stay free of torch and the models
    from specviz.app.lab.step_mode import DraftRoom

STAGE_DELAY_S = 0.5  # between the stages of a round appearing, so the eye can follow them in order


def stage_html(index: int, name: str, title: str, body: str, caption: str = "") -> str:
    """One stage of a round; each appears STAGE_DELAY_S after the last (none with reduced motion). With a
    caption, the stage is that one line under the drawing of the round, its paragraph one click away."""
    head = f"<b>{index + 1} · {title}.</b>"
    inner = (f'<details><summary>{head} {caption}</summary><div style="margin:4px 0 0 1.2em">{body}</div></details>'
             if caption else f"{head} {body}")
    return (f'<li class="step-stage" data-stage="{name}" style="animation-delay:{index * STAGE_DELAY_S:.1f}s;'
            f'margin:0 0 8px 0">{inner}</li>')


def stages_html(stages: Sequence[tuple[str, ...]], heading: str) -> str:
    """Stages as (name, title, body) or (name, title, body, caption)."""
    items = "".join(stage_html(i, *stage) for i, stage in enumerate(stages))
    return f'<div class="step-round"><p style="margin:0 0 6px 0"><b>{heading}</b></p><ol style="padding-left:0;list-style:none">{items}</ol></div>'


def step_intro_html() -> str:
    return (
        '<div class="step-round"><p>Press <b>Start</b> to read the prompt with the settings above, then '
        '<b>Next round</b> for one real round of speculative decoding: the draft proposes, the target verifies in '
        'one forward, each draft is accepted or rejected, the target adds its own token, and the caches roll back. '
        'The round is drawn above its stages; each stage is one line, a click on it tells why. '
        'Keyboard: Tab to a button and press Enter or Space; or press <kbd>N</kbd> anywhere outside a text box '
        'for the next round.</p></div>'
    )


def prefill_html(first_text: str, num_prompt_tokens: int, drafter: str) -> str:
    body = (f"The target read the prompt ({count(num_prompt_tokens, 'token')}) and chose the first new token "
            f"{inline_token(first_text, 'target')} itself: speculation starts after it. "
            f"{drafter_info(drafter).prefill_words}")
    return stages_html([("prefill", "Prefill", body)], "Ready. Press Next round for round 1.")


def round_html(event: RoundEvent, texts: RoundTexts, labels: Mapping[int, str], num_new_before: int,
               drafter: str, room: DraftRoom, *, greedy: bool) -> str:
    """One round in stages: draft, verify, (rival guesses,) accept test, verdict, correction or bonus,
    rollback. `room` (step_mode.StepRun.draft_room) says what bounded the drafting. `greedy` (temperature 0):
    the stages give the rule that decides there, the target's own top pick, and leave out the coin r and the
    one-hot p and q, as the lane's hover and the inspector do."""
    heading = f"Round {event.round_index + 1}"
    if event.gamma == 0:
        return stages_html(plain_step_stages(event, texts, drafter), heading)
    if event.is_tree and texts.nodes:  # a tree round: its own stages, each node's why as the inspector says it
        return stages_html(tree_stages(event, texts.nodes, greedy), heading)
    captions = chain_captions(event, texts)
    rivals = ([("rivals", "Rival guesses", rivals_sentence(event, texts), captions["rivals"])]
              if event.guesses and texts.guesses else [])
    stages = [
        draft_stage(event, texts, drafter, room, greedy),
        ("verify", "Verify", verify_sentence(event, texts, labels, greedy), captions["verify"]),
        *rivals,
        ("accept", "Accept or reject, left to right", accept_list(event, texts, greedy), captions["accept"]),
        ("verdict", "Verdict", verdict_sentence(event, texts), captions["verdict"]),
        ("correction", correction_title(event, greedy), correction_sentence(event, texts, labels, greedy),
         captions["correction"]),
        ("rollback", "Roll back", rollback_sentence(event, texts, num_new_before, drafter), captions["rollback"]),
    ]
    return stages_html(stages, heading)


def draft_stage(event: RoundEvent, texts: RoundTexts, drafter: str, room: DraftRoom, greedy: bool) -> tuple[str, ...]:
    """A round's first stage, which tells nothing of the verdicts (shown alone while a visitor guesses)."""
    if event.is_tree and texts.nodes:
        return tree_stages(event, texts.nodes, greedy)[0]
    return ("draft", "Draft", draft_sentence(event, texts, drafter, room), draft_caption(event, texts))


def max_kept(event: RoundEvent) -> int:
    """The most drafts the round could keep: a chain's γ, a tree's deepest guess."""
    return tree_depth(event) if event.is_tree else event.gamma


def guess_html(event: RoundEvent, texts: RoundTexts, drafter: str, room: DraftRoom, greedy: bool) -> str:
    """The round so far as a visitor guesses: its drafting, and the question the verify will answer."""
    question = (f'<p id="step-question" style="margin:4px 0"><b>Your guess:</b> one target forward will judge these '
                f"drafts at once. How many of them (0 to {max_kept(event)}) will it keep? Pick it under the status line "
                "above; the verify is shown once you have.</p>")
    return stages_html([draft_stage(event, texts, drafter, room, greedy)], f"Round {event.round_index + 1}") + question


def guess_said(guess: str, event: RoundEvent) -> str:
    """"You guessed 2: the target kept 1 of 3." """
    kept = event.num_kept_drafts
    right = "right" if guess == str(kept) else "not quite"
    return f"You guessed {guess}: the target kept {kept} of {max_kept(event)} ({right})."


def draft_caption(event: RoundEvent, texts: RoundTexts) -> str:
    """A chain round's drafts in the drafter's own order (a rival the target took is not the guess it drafted first)."""
    drafted = [texts.guesses[0], *texts.drafted[1:]] if event.guesses and texts.guesses else texts.drafted
    return f"proposed {listing([plain_token(text) for text in drafted])}"


def chain_captions(event: RoundEvent, texts: RoundTexts) -> dict[str, str]:
    """Each stage of a chain round after its drafting in one line, the words of the round's drawing
    (specviz.app.plots_round); the drafting's is draft_caption."""
    own = inline_token(texts.next_text, event.own_kind) if texts.own else ""
    return {
        "verify": f"one target forward over {count(event.num_verify_rows, 'row')} judged them all at once",
        "rivals": f"{count(len(event.guesses) - 1, 'other guess', 'other guesses')} for draft 1 judged in the same forward",
        "accept": listing([inline_token(text, event.verdict(index)) for index, text in enumerate(texts.drafted)]),
        "verdict": f"{event.num_accepted} of {count(event.gamma, 'draft')} accepted",
        "correction": f"the target adds {own}" if own else "the end of the text came first",
        "rollback": (f"{count(len(event.emitted_ids), 'token')} committed; the caches drop "
                     f"{count(event.num_dropped_rows, 'row')}"),
    }


def verify_sentence(event: RoundEvent, texts: RoundTexts, labels: Mapping[int, str], greedy: bool) -> str:
    rivals = (f" (and the {count(len(event.guesses) - 1, 'rival guess', 'rival guesses')}, stage 3)" if event.guesses
              else "")
    forward = f"One target forward over the last committed token and the {count(event.gamma, 'draft')}{rivals} gave "
    if greedy:  # p is one-hot there: the target's own top pick is all it says
        # Its pick after the last draft is the bonus token where every draft was kept (stage 6 names it), and
        # a pick after a rejected draft means nothing: so it is not named here.
        picks = []
        for index, token in enumerate(event.drafted):
            pick = target_pick_text(event, index, texts)
            if pick is not None:
                sure = "" if token.target_confidence is None else f", {token.target_confidence:.0%} sure"
                picks.append(f"at draft {index + 1} {plain_token(pick)}{sure}")
        return (f"{forward}the target's own top pick at {event.gamma + 1} positions at once: at temperature 0 that "
                f"pick is all that counts" + (f" ({listing(picks)})." if picks else "."))
    probs = [f"p({plain_token(text)}) = {prob(token.target_prob)}" for text, token in zip(texts.drafted, event.drafted)]
    sentence = f"{forward}p at {event.gamma + 1} positions at once: {listing(probs)}."
    if event.details and len(event.details) > event.gamma and event.details[event.gamma].target_top:
        token_id, top_prob = event.details[event.gamma].target_top[0]
        sentence += (f" After the last draft the target's favourite would be {plain_token(labels.get(token_id, ''))} "
                     f"(p = {prob(top_prob)}).")
    return sentence


def accept_list(event: RoundEvent, texts: RoundTexts, greedy: bool) -> str:
    """Each draft's test, in order (at temperature 0 against the target's own top pick, above it r against
    min(1, p/q)); the ones after a rejection never looked at."""
    lines = []
    for index, (text, token) in enumerate(zip(texts.drafted, event.drafted)):
        verdict = event.verdict(index)
        if not token.decided:
            lines.append(f"{inline_token(text, 'unexamined')}: never examined, it came after a rejection")
            continue
        outcome = f"<b>{'accepted' if token.accepted else 'rejected'}</b>"
        if token.accepted and verdict == "unexamined":  # the rule kept it, but an earlier draft ended the text
            outcome += ", then dropped: it comes after the end-of-text token"
        lines.append(f"{inline_token(text, verdict)}: {accept_test(event, index, texts, greedy)} → {outcome}")
    items = "".join(f"<li>{line}</li>" for line in lines)
    rule = f"{GREEDY_RULE[0].upper()}{GREEDY_RULE[1:]}." if greedy else "Draw r ~ U(0, 1) and keep the draft if r &lt; min(1, p/q):"
    return f"{rule}<ul style='margin:4px 0 0 0'>{items}</ul>"


def accept_test(event: RoundEvent, index: int, texts: RoundTexts, greedy: bool) -> str:
    """What decided one examined draft: the target's own pick (temperature 0), or the coin against min(1, p/q)."""
    token = event.drafted[index]
    if greedy:
        if token.accepted:
            return "the target's own pick too"
        pick = target_pick_text(event, index, texts)
        return f"the target's pick here is {plain_token(pick)}" if pick is not None else "not the target's pick"
    sign = "&lt;" if token.accepted else "≥"
    return f"r = {token.r:.3f} {sign} min(1, {prob(token.target_prob)} / {prob(token.draft_prob)}) = {prob(token.accept_prob)}"


def verdict_sentence(event: RoundEvent, texts: RoundTexts) -> str:
    accepted = [inline_token(text, "accepted") for text in texts.drafted[: event.num_accepted]]
    dropped = event.num_accepted - event.num_kept_drafts
    if dropped:  # an accepted end-of-text ends the text inside the round
        how_many = (every(event.gamma, "draft").capitalize() if event.num_accepted == event.gamma
                    else f"{event.num_accepted} of {event.gamma}")
        verb = "is" if dropped == 1 else "are"
        return (f"{how_many} accepted, but the text ends at the end-of-text token: the {count(dropped, 'draft')} "
                f"after it {verb} dropped.")
    if event.num_accepted == event.gamma:
        return f"{every(event.gamma, 'draft').capitalize()} accepted: {listing(accepted)}."
    rejected = inline_token(texts.drafted[event.num_accepted], "rejected")
    if event.num_accepted == 0:
        return f"None accepted: the first draft {rejected} was rejected, and everything after it goes."
    return (f"{event.num_accepted} of {event.gamma} accepted ({listing(accepted)}); the draft went wrong at {rejected}, "
            f"and everything after it goes.")


def correction_title(event: RoundEvent, greedy: bool) -> str:
    if event.next_kind != "resample":
        return "Bonus"
    return "The target's own pick" if greedy else "Resample"


def correction_sentence(event: RoundEvent, texts: RoundTexts, labels: Mapping[int, str], greedy: bool) -> str:
    """Where the target's own token came from: at temperature 0 its top pick, rejection or bonus alike;
    above it the residual or p."""
    if not texts.own:
        return "The end-of-text token ended the run inside this round, so the target's own token was not kept."
    # A token whose piece of the text is empty (half of a multi-byte character) would draw as ∅: show it alone.
    own = inline_token(texts.next_text or labels.get(event.next_id, ""), event.own_kind)
    detail = event.details[event.num_accepted] if event.details and event.num_accepted < len(event.details) else None
    if event.next_kind == "resample":
        if greedy:
            return (f"At the rejected position the target wrote its own top pick {own}. That is what the rule "
                    f"norm(max(0, p − q)) comes to at temperature 0: p is all on the target's pick and q all on the "
                    f"draft's, so what is left is the target's pick alone, and the text stays exactly the target's.")
        residual = dict(detail.residual_top) if detail else {}
        share = (f"; it had {prob(residual[event.next_id])} of the residual's mass" if event.next_id in residual
                 else "; it was outside the residual's top tokens drawn in the chart")
        return (f"At the rejected position the target drew {own} from norm(max(0, p − q)): what the target wants there, "
                f"minus what the draft over-proposed, rescaled to sum to 1 (chart){share}. That subtraction is what keeps "
                f"the output exactly the target's.")
    if greedy:
        return (f"Every draft survived, so the verify forward's last position came free: the target's own top pick "
                f"there, {own}, is the bonus token.")
    target = dict(detail.target_top) if detail else {}
    share = f" (p = {prob(target[event.next_id])})" if event.next_id in target else ""
    return (f"Every draft survived, so the verify forward's last position came free: the target drew the bonus token "
            f"{own} from p there{share}.")


def rollback_sentence(event: RoundEvent, texts: RoundTexts, num_new_before: int, drafter: str) -> str:
    kept = [inline_token(text, "accepted") for text in texts.drafted[: event.num_kept_drafts]]
    kept += [inline_token(text, event.own_kind) for text in texts.own]
    dropped = [inline_token(text, event.verdict(i + event.num_kept_drafts))
               for i, text in enumerate(texts.drafted[event.num_kept_drafts :])]
    total = num_new_before + len(event.emitted_ids)
    sentence = f"Committed {count(len(event.emitted_ids), 'token')} ({listing(kept)}); the text has {count(total, 'new token')}. "
    drafter_caches = drafter_info(drafter).caches
    caches = "the target's KV cache" + (f" and {drafter_caches}" if drafter_caches else "")
    if dropped:
        sentence += (f"Verifying wrote every draft into {caches}; cropping to the committed text drops "
                     f"{count(len(dropped), 'position')} ({listing(dropped)}).")
    else:
        sentence += "Nothing to crop: every draft was kept."
    if texts.own:
        sentence += f" The new {inline_token(texts.next_text, event.own_kind)} is in no cache yet: the next round feeds it first."
    return sentence


def plain_step_stages(event: RoundEvent, texts: RoundTexts, drafter: str) -> list[tuple[str, str, str, str]]:
    """A round with nothing drafted: no room left, or prompt lookup found no match."""
    why = drafter_info(drafter).none_words
    own = inline_token(texts.next_text, "target") if texts.own else "nothing (end of text)"
    return [
        ("draft", "Draft", f"Nothing drafted: {why}.", "nothing drafted"),
        ("verify", "Target step", f"One plain target forward, as the baseline would do: the target chose {own} "
                                  f"(its top pick at temperature 0, a draw from p above it).",
         f"one plain target forward wrote {own}"),
        ("rollback", "Commit", "Nothing to roll back: one token in, one token kept.", "nothing to drop"),
    ]


def finish_html(trace: Trace, finish: FinishEvent, max_new_tokens: int) -> str:
    rounds = len(trace.rounds)
    body = (f"{count(trace.num_tokens, 'new token')} in {count(rounds, 'round')} "
            f"({stop_text(trace, max_new_tokens)}): the target ran {count(trace.num_target_forwards, 'time')} instead "
            f"of {trace.num_tokens}. With the same seed a normal run's speculative lane writes exactly this text.")
    if trace.num_examined:
        body += f" The target accepted α̂ = {trace.acceptance_rate:.2f} of the drafts it examined."
    return stages_html([("finish", "Done", body)], "Finished")


def step_status_html(message: str, round_number: int, done: bool, num_tokens: int, kind: str = "info") -> str:
    """The step's status line; its data attributes say where the run is (for people's tools and tests)."""
    return status_html(message, kind, round=round_number, done="true" if done else "false", tokens=num_tokens)
