"""Step mode's words, as HTML: the stages of one round (draft, verify, rival guesses, accept, verdict,
correction, roll back) on the run's own tokens, the prefill and the finish; the drafting side (what the drafter
guessed and how sure it was, why it drafted fewer than γ, rival guesses); a tree round's stages, each node's why
the inspector's line (specviz.app.render.tree_round), so the two never disagree. At temperature 0 the stages give
the rule that decides there (the target's own top pick) instead of the coin r and the one-hot p and q. Tokens in
render's styles, their text escaped; the rule's words are specviz.app.render.rule's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from specviz.catalogue import drafter_info
from specviz.decoding.events import DraftedToken, FinishEvent, RoundEvent
from specviz.analysis.payoff import listing
from specviz.analysis.trace import Trace
from specviz.app.palette import COLORS
from specviz.app.render.lanes import RoundTexts, stop_text, target_pick_text
from specviz.app.render.rule import (
    COIN_TEST, DROPPED_TEXT, END_OF_TEXT_WORDS, GREEDY_KEEP, GREEDY_RULE, NEVER_EXAMINED, OWN_PICK, TREE_RULE,
    TREE_WALK, all_accepted_sentence, bonus_source, bonus_step, coin_test, cut_sentence, dropped_sentence, pick_test,
    replacement_story, rivals_offered_story, rivals_taken_story, tree_verdict_sentence, verify_story,
)
from specviz.app.render.tokens import escape_text, inline_token, prob, status_html, visible_text
from specviz.app.render.tree_round import (
    drafted_nodes, node_lines, num_branches, own_index, own_line, tree_depth,
)
from specviz.app.wording import as_sentence, count, every

if TYPE_CHECKING:  # annotations only: the words stay free of torch and the models
    from specviz.app.step_mode.session import DraftRoom

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
    rollback. `room` (session.StepRun.draft_room) says what bounded the drafting. `greedy` (temperature 0):
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
    proposed = listing([plain_token(text) for text, _ in drafts_in_order(event, texts)])
    return ("draft", "Draft", draft_sentence(event, texts, drafter, room), f"proposed {proposed}")


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


def settle_caption(event: RoundEvent) -> str:
    return f"{count(len(event.emitted_ids), 'token')} committed; the caches drop {count(event.num_dropped_rows, 'row')}"


def fed_next_text(own_html: str) -> str:
    """The target's own token: no forward has read it yet."""
    return f" The new {own_html} is in no cache yet: the next round feeds it first."


def chain_captions(event: RoundEvent, texts: RoundTexts) -> dict[str, str]:
    """Each stage of a chain round after its drafting in one line, the words of the round's drawing
    (specviz.app.plots_round); the drafting's is draft_stage's."""
    own = inline_token(texts.next_text, event.own_kind) if texts.own else ""
    return {
        "verify": f"one target forward over {count(event.num_verify_rows, 'row')} judged them all at once",
        "rivals": f"{count(len(event.guesses) - 1, 'other guess', 'other guesses')} for draft 1 judged in the same forward",
        "accept": listing([inline_token(text, event.verdict(index)) for index, text in enumerate(texts.drafted)]),
        "verdict": f"{event.num_accepted} of {count(event.gamma, 'draft')} accepted",
        "correction": f"the target adds {own}" if own else "the end of the text came first",
        "rollback": settle_caption(event),
    }


def verify_sentence(event: RoundEvent, texts: RoundTexts, labels: Mapping[int, str], greedy: bool) -> str:
    rivals = (f" (and the {count(len(event.guesses) - 1, 'rival guess', 'rival guesses')}, stage 3)" if event.guesses
              else "")
    drafts = count(event.gamma, "draft")
    if greedy:  # p is one-hot there: the target's own top pick is all it says
        # Its pick after the last draft is the bonus token where every draft was kept (stage 6 names it), and
        # a pick after a rejected draft means nothing: so it is not named here.
        picks = []
        for index, token in enumerate(event.drafted):
            pick = target_pick_text(event, index, texts)
            if pick is not None:
                sure = "" if token.target_confidence is None else f", {token.target_confidence:.0%} sure"
                picks.append(f"at draft {index + 1} {plain_token(pick)}{sure}")
        return verify_story(drafts, rivals, event.gamma + 1, True, listing(picks))
    probs = [f"p({plain_token(text)}) = {prob(token.target_prob)}" for text, token in zip(texts.drafted, event.drafted)]
    sentence = verify_story(drafts, rivals, event.gamma + 1, False, listing(probs))
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
            lines.append(f"{inline_token(text, 'unexamined')}: {NEVER_EXAMINED}")
            continue
        outcome = f"<b>{'accepted' if token.accepted else 'rejected'}</b>"
        if token.accepted and verdict == "unexamined":  # the rule kept it, but an earlier draft ended the text
            outcome = f"<b>{DROPPED_TEXT}</b>"
        lines.append(f"{inline_token(text, verdict)}: {accept_test(event, index, texts, greedy)} → {outcome}")
    items = "".join(f"<li>{line}</li>" for line in lines)
    rule = as_sentence(GREEDY_RULE) if greedy else f"{escape_text(COIN_TEST)}:"
    return f"{rule}<ul style='margin:4px 0 0 0'>{items}</ul>"


def accept_test(event: RoundEvent, index: int, texts: RoundTexts, greedy: bool) -> str:
    """What decided one examined draft: the target's own pick (temperature 0), or the coin against min(1, p/q)."""
    token = event.drafted[index]
    if greedy:
        pick = None if token.accepted else target_pick_text(event, index, texts)
        return pick_test(token.accepted, plain_token(pick) if pick is not None else None)
    return escape_text(coin_test(f"{token.r:.3f}", prob(token.target_prob), prob(token.draft_prob),
                                 prob(token.accept_prob), token.accepted))


def verdict_sentence(event: RoundEvent, texts: RoundTexts) -> str:
    accepted = [inline_token(text, "accepted") for text in texts.drafted[: event.num_accepted]]
    dropped = event.num_accepted - event.num_kept_drafts
    if dropped:  # an accepted end-of-text ends the text inside the round
        how_many = (every(event.gamma, "draft").capitalize() if event.num_accepted == event.gamma
                    else f"{event.num_accepted} of {event.gamma}")
        return dropped_sentence(how_many, count(dropped, "draft"), dropped == 1)
    if event.num_accepted == event.gamma:
        return all_accepted_sentence(every(event.gamma, "draft").capitalize(), listing(accepted))
    return cut_sentence(event.num_accepted, event.gamma, listing(accepted),
                        inline_token(texts.drafted[event.num_accepted], "rejected"))


def correction_title(event: RoundEvent, greedy: bool) -> str:
    if event.next_kind != "resample":
        return "Bonus"
    return OWN_PICK.capitalize() if greedy else "Resample"


def correction_sentence(event: RoundEvent, texts: RoundTexts, labels: Mapping[int, str], greedy: bool) -> str:
    """Where the target's own token came from: at temperature 0 its top pick, rejection or bonus alike;
    above it the residual or p."""
    if not texts.own:
        return as_sentence(END_OF_TEXT_WORDS)
    # A token whose piece of the text is empty (half of a multi-byte character) would draw as ∅: show it alone.
    own = inline_token(texts.next_text or labels.get(event.next_id, ""), event.own_kind)
    detail = event.details[event.num_accepted] if event.details and event.num_accepted < len(event.details) else None
    if greedy:
        return replacement_story(own, True) if event.next_kind == "resample" else bonus_step(own, True)
    if event.next_kind == "resample":
        residual = dict(detail.residual_top) if detail else {}
        return replacement_story(own, False, prob(residual[event.next_id]) if event.next_id in residual else None)
    target = dict(detail.target_top) if detail else {}
    return bonus_step(own, False, prob(target[event.next_id]) if event.next_id in target else None)


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
        sentence += fed_next_text(inline_token(texts.next_text, event.own_kind))
    return sentence


def plain_step_stages(event: RoundEvent, texts: RoundTexts, drafter: str) -> list[tuple[str, str, str, str]]:
    """A round with nothing drafted: no room left, or prompt lookup found no match."""
    why = drafter_info(drafter).none_words
    own = inline_token(texts.next_text, "target") if texts.own else "nothing (end of text)"
    return [
        ("draft", "Draft", f"Nothing drafted: {why}.", "nothing drafted"),
        ("verify", "Target step", f"One plain target forward, as the baseline would do: the target chose {own} "
                                  f"({bonus_source(True)} at temperature 0, {bonus_source(False)} above it).",
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


# --- the drafting side ---------------------------------------------------------------------------------------


def plain_token(text: str) -> str:
    """A drafted token before the target has judged it: outlined in the draft's colour, no verdict yet."""
    return (f'<span class="tok tok-proposed" style="border:1px solid {COLORS["draft"]};border-radius:3px;'
            f'padding:0 2px;font-family:ui-monospace,Menlo,Consolas,monospace">{visible_text(text, keep_breaks=False)}</span>')


def drafts_in_order(event: RoundEvent, texts: RoundTexts) -> list[tuple[str, DraftedToken]]:
    """A chain round's drafts in the drafter's own order: a rival the target took is not the guess it drafted first."""
    drafts = list(zip(texts.drafted, event.drafted))
    if event.guesses and texts.guesses:
        drafts[0] = (texts.guesses[0], event.guesses[0])
    return drafts


def draft_sentence(event: RoundEvent, texts: RoundTexts, drafter: str, room: DraftRoom) -> str:
    info = drafter_info(drafter)
    drafts = drafts_in_order(event, texts)
    proposals = [f"{plain_token(text)} ({q_words(token)})" for text, token in drafts]
    sentence = info.draft_words.format(label=info.label, forwards=count(event.gamma, "forward"),
                                       tokens=count(event.gamma, "token"), proposals=listing(proposals),
                                       texts=listing([plain_token(text) for text, _ in drafts]))
    if any(", " in q_words(token) for _, token in drafts):
        sentence += " At temperature 0 q is 1 for any top guess: the percentage is how sure the drafter was."
    return sentence + fewer_sentence(event, drafter, room)


def q_words(token: DraftedToken) -> str:
    """"q = 0.412"; at temperature 0, where q is 1 for any top guess, how sure the drafter was too."""
    if token.draft_prob == 1.0 and token.draft_confidence is not None and token.draft_confidence < 0.995:
        return f"q = 1, {token.draft_confidence:.0%} sure"
    return f"q = {prob(token.draft_prob)}"


def ordinal(number: int) -> str:
    """1st, 2nd, 3rd, 4th … 11th, 12th, 13th … 21st."""
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def fewer_sentence(event: RoundEvent, drafter: str, room: DraftRoom) -> str:
    """" Only 1 of γ = 3: …" with the real cause (DraftRoom.fewer_cause); "" when the round drafted all it could."""
    cause = room.fewer_cause(event)
    if not cause:
        return ""
    planned = max(room.gamma, room.planned)
    of = f"γ = {room.gamma}" if planned == room.gamma else f"the {planned} the heuristic γ schedule planned"
    if cause == "unsure":
        last = event.guesses[0] if event.guesses else event.drafted[-1]  # a rival round's: its first pick
        why = (f"the drafter was only {last.draft_confidence:.0%} sure of its {ordinal(event.gamma)} draft, under the "
               f"“draft only while sure” threshold {room.threshold:.2f}, so it stopped there: a draft it is unsure of "
               f"is often rejected, and each extra draft makes the verify dearer.")
        if event.guesses:
            why += (f" Unsure of the round's first token, it offered its next {count(len(event.guesses) - 1, 'guess', 'guesses')} "
                    f"for that position instead (rival guesses, stage 3).")
    elif cause in ("limit", "context"):
        limit = (f"the models' context leaves room for {count(room.room + 1, 'more token')}" if cause == "context"
                 else f"the {room.limit}-token limit leaves room for {count(room.room + 1, 'more token')}")
        why = f"{limit}, and a round adds its drafts plus one token of the target's own."
    elif cause == "schedule":
        why = (f"the heuristic γ schedule planned {room.planned} for this round (it takes 1 away after a round with a "
               f"rejection and adds 2 after one whose drafts were all accepted).")
    else:
        why = drafter_info(drafter).fewer_words
    return f" Only {event.gamma} of {of}: {why}"


def dropped_guesses(texts: RoundTexts, kept: int) -> str:
    return listing([inline_token(text, "rejected") for i, text in enumerate(texts.guesses) if i != kept])


def rivals_sentence(event: RoundEvent, texts: RoundTexts) -> str:
    """What rival guesses are, and what became of this round's (greedy only: DecodeConfig.rivals)."""
    guesses = list(zip(texts.guesses, event.guesses))
    (first_text, first), others = guesses[0], guesses[1:]
    taken = event.taken_guess
    ordinals = listing([ordinal(i + 2) for i in range(len(others))])
    offered = listing([f"{plain_token(text)} ({token.draft_confidence:.0%})" for text, token in others])
    offered_story = rivals_offered_story(plain_token(first_text), f"{first.draft_confidence:.0%}", ordinals, offered)
    first_html = inline_token(first_text, "accepted" if taken == 0 else "rejected")
    outcome = (rivals_taken_story(None, len(guesses), first_html) if taken is None else
               rivals_taken_story(taken, len(guesses), first_html, inline_token(texts.guesses[taken], "accepted"),
                                  ordinal(taken + 1), dropped_guesses(texts, taken)))
    return f"{offered_story} {outcome}"


# --- a tree round ------------------------------------------------------------------------------------------------


def grow_sentence(event: RoundEvent, texts: Sequence[str]) -> str:
    """What the drafter proposed: the tree's size and shape, and its guesses for the first token."""
    drafted = drafted_nodes(event)
    first = [f"{plain_token(texts[i])} ({event.nodes[i].draft_prob:.0%})" for i in drafted if event.nodes[i].depth == 1]
    return (f"The drafter grew a tree of {count(len(drafted), 'guess', 'guesses')} on {num_branches(event)} branches, "
            f"up to {tree_depth(event)} deep, in {count(event.num_draft_forwards, 'drafter pass', 'drafter passes')} (one per level, "
            f"each over the whole frontier): it expanded its likeliest nodes, scored each by the product of its "
            f"probabilities along the path, and kept the best. For the next token it offered {listing(first)}; the "
            "chart draws the whole tree.")


def tree_verify_sentence(event: RoundEvent) -> str:
    num_nodes = len(drafted_nodes(event))
    return (f"One target forward over the last committed token and all {count(num_nodes, 'guess', 'guesses')} at "
            "once, under a tree mask (the heatmap beside the tree): each guess sees the text, the guesses above it and "
            "itself, never another branch, and sits at the position its depth gives it. So every guess gets the very "
            "p that single steps along its own path would give: one pass checks every branch.")


def tried_nodes(event: RoundEvent) -> list[int]:
    """The guesses the walk tried, in the order it tried them: level by level, siblings in the drafter's order."""
    tried = [i for i in drafted_nodes(event) if event.nodes[i].verdict in ("accepted", "rejected")]
    return sorted(tried, key=lambda i: (event.nodes[i].depth, i))


def kept_tokens(event: RoundEvent, texts: Sequence[str]) -> list[str]:
    """The kept path's guesses, drawn as kept tokens."""
    return [inline_token(texts[i], "accepted") for i in drafted_nodes(event) if event.nodes[i].verdict == "accepted"]


def walk_list(event: RoundEvent, texts: Sequence[str], greedy: bool) -> str:
    """The guesses the walk tried, in the order it tried them, each with its verdict and why."""
    lines = node_lines(event, texts, greedy)
    items = "".join(f"<li>{inline_token(texts[i], event.nodes[i].verdict)}: "
                    f"{escape_text(lines[i].split(chr(10), 1)[1])}</li>" for i in tried_nodes(event))
    rule = as_sentence(GREEDY_KEEP if greedy else TREE_RULE)
    return f"{TREE_WALK} {rule}<ul style='margin:4px 0 0 0'>{items}</ul>"


def kept_sentence(event: RoundEvent, texts: Sequence[str]) -> str:
    drafted = drafted_nodes(event)
    kept = kept_tokens(event, texts)
    unexamined = sum(event.nodes[i].verdict == "unexamined" for i in drafted)
    rejected = sum(event.nodes[i].verdict == "rejected" for i in drafted)
    return tree_verdict_sentence(listing(kept), rejected, unexamined)


def settle_sentence(event: RoundEvent, texts: Sequence[str]) -> str:
    num_kept = sum(node.verdict == "accepted" for node in event.nodes)
    moved = (f"the {count(num_kept, 'kept guess', 'kept guesses')}' entries move right behind the text and the other "
             "branches' are dropped" if num_kept else "no guess was kept, so every guess's entries are dropped")
    own = own_index(event)
    new = "" if own is None else fed_next_text(inline_token(texts[own], event.nodes[own].verdict))
    return (f"Committed {count(len(event.emitted_ids), 'token')}. The verify wrote every guess into the target's "
            f"KV cache: {moved}, and the drafter's own caches keep the same path.{new}")


def tree_stages(event: RoundEvent, texts: Sequence[str], greedy: bool) -> list[tuple[str, str, str, str]]:
    """A tree round's stages for step mode: (name, title, body HTML, its one-line caption)."""
    own = own_index(event)
    drafted = drafted_nodes(event)
    if own is None:  # an accepted end-of-text ended the text inside the round
        correction = ("correction", "The end of the text", as_sentence(END_OF_TEXT_WORDS),
                      "the text ended on a kept guess")
    else:
        own_token = inline_token(texts[own], event.nodes[own].verdict)
        correction = ("correction", "Bonus" if event.nodes[own].verdict == "bonus" else "The target's own token",
                      f"{own_token}: {escape_text(own_line(event, own, texts, greedy))}.", f"the target adds {own_token}")
    kept = kept_tokens(event, texts)
    return [
        ("draft", "Draft a tree", grow_sentence(event, texts),
         f"{count(len(drafted), 'guess', 'guesses')} on {count(num_branches(event), 'branch', 'branches')}, up to {tree_depth(event)} deep"),
        ("verify", "Verify every branch in one pass", tree_verify_sentence(event),
         f"one target forward over {count(event.num_verify_rows, 'row')}, under the tree mask"),
        ("accept", "Walk down the tree", walk_list(event, texts, greedy),
         listing([inline_token(texts[i], event.nodes[i].verdict) for i in tried_nodes(event)])),
        ("verdict", "Verdict", kept_sentence(event, texts),
         f"the kept path: {listing(kept)}" if kept else "no guess kept"),
        correction,
        ("rollback", "Settle the caches", settle_sentence(event, texts),
         settle_caption(event)),
    ]
