"""Step mode's words, as HTML: the six stages of one round (draft, rival guesses, verify, accept,
correction, roll back) on the run's own tokens, the prefill and the finish. No gradio and no models, like
specviz.app.render, whose token styles it reuses so a token looks the same in every part of the page.

Every sentence names this run's own tokens and numbers; token text is always escaped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from specviz.catalogue import drafter_info
from specviz.decoding.events import DraftedToken, FinishEvent, RoundEvent
from specviz.app.palette import COLORS
from specviz.app.render.lanes import RoundTexts, stop_text
from specviz.app.render.tokens import escape_text, inline_token, prob, visible_text
from specviz.analysis.trace import Trace
from specviz.app.wording import count, every

if TYPE_CHECKING:  # annotations only: the words stay free of torch and the models
    from specviz.app.lab.step_mode import DraftRoom

STAGE_DELAY_S = 0.5  # between the stages of a round appearing, so the eye can follow them in order


def plain_token(text: str) -> str:
    """A drafted token before the target has judged it: outlined in the draft's colour, no verdict yet."""
    return (f'<span class="tok tok-proposed" style="border:1px solid {COLORS["draft"]};border-radius:3px;'
            f'padding:0 2px;font-family:ui-monospace,Menlo,Consolas,monospace">{visible_text(text, keep_breaks=False)}</span>')


def listing(items: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def stage_html(index: int, name: str, title: str, body: str) -> str:
    """One stage of a round; each appears STAGE_DELAY_S after the last (none with reduced motion)."""
    return (f'<li class="step-stage" data-stage="{name}" style="animation-delay:{index * STAGE_DELAY_S:.1f}s;'
            f'margin:0 0 8px 0"><b>{index + 1} · {title}.</b> {body}</li>')


def stages_html(stages: Sequence[tuple[str, str, str]], heading: str) -> str:
    items = "".join(stage_html(i, name, title, body) for i, (name, title, body) in enumerate(stages))
    return f'<div class="step-round"><p style="margin:0 0 6px 0"><b>{heading}</b></p><ol style="padding-left:0;list-style:none">{items}</ol></div>'


def step_intro_html() -> str:
    return (
        '<div class="step-round"><p>Press <b>Start</b> to read the prompt with the settings above, then '
        '<b>Next round</b> for one real round of speculative decoding: the draft proposes, the target verifies in '
        'one forward, each draft is accepted or rejected, the target adds its own token, and the caches roll back. '
        'Keyboard: Tab to a button and press Enter or Space; or press <kbd>N</kbd> anywhere outside a text box '
        'for the next round.</p></div>'
    )


def prefill_html(first_text: str, num_prompt_tokens: int, drafter: str) -> str:
    body = (f"The target read the prompt ({count(num_prompt_tokens, 'token')}) and sampled the first new token "
            f"{inline_token(first_text, 'target')} itself: speculation starts after it. "
            f"{drafter_info(drafter).prefill_words}")
    return stages_html([("prefill", "Prefill", body)], "Ready. Press Next round for round 1.")


def round_html(event: RoundEvent, texts: RoundTexts, labels: Mapping[int, str], num_new_before: int,
               drafter: str, room: DraftRoom) -> str:
    """One round in stages: draft, verify, (rival guesses,) accept test, verdict, correction or bonus,
    rollback. `room` (step_mode.StepRun.draft_room) says what bounded the drafting."""
    heading = f"Round {event.round_index + 1}"
    if event.gamma == 0:
        return stages_html(plain_step_stages(event, texts, drafter), heading)
    rivals = [("rivals", "Rival guesses", rivals_sentence(event, texts))] if event.rivals and texts.rivals else []
    stages = [
        ("draft", "Draft", draft_sentence(event, texts, drafter, room)),
        ("verify", "Verify", verify_sentence(event, texts, labels)),
        *rivals,
        ("accept", "Accept or reject, left to right", accept_list(event, texts)),
        ("verdict", "Verdict", verdict_sentence(event, texts)),
        ("correction", "Resample" if event.next_kind == "resample" else "Bonus", correction_sentence(event, texts, labels)),
        ("rollback", "Roll back", rollback_sentence(event, texts, num_new_before, drafter)),
    ]
    return stages_html(stages, heading)


def draft_sentence(event: RoundEvent, texts: RoundTexts, drafter: str, room: DraftRoom) -> str:
    info = drafter_info(drafter)
    drafts = list(zip(texts.drafted, event.drafted))
    if event.rivals and texts.rivals:  # the drafter's own first pick, whichever guess the target then took
        drafts[0] = guesses_in_order(event, texts)[0]
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
        last = first_pick(event) if event.rivals else event.drafted[-1]
        why = (f"the drafter was only {last.draft_confidence:.0%} sure of its {ordinal(event.gamma)} draft, under the "
               f"“draft only while sure” threshold {room.threshold:.2f}, so it stopped there: a draft it is unsure of "
               f"is often rejected, and each extra draft makes the verify dearer.")
        if event.rivals:
            why += (f" Unsure of the round's first token, it offered its next {count(len(event.rivals), 'guess', 'guesses')} "
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


def first_pick(event: RoundEvent) -> DraftedToken:
    """A rival round's first guess as the drafter made it (its surest), whichever guess the target took."""
    return max((event.drafted[0], *event.rivals), key=lambda token: token.draft_confidence or 0.0)


def guesses_in_order(event: RoundEvent, texts: RoundTexts) -> list[tuple[str, DraftedToken]]:
    """A rival round's guesses for its first position in the drafter's own order (surest first), with
    their texts: the first draft the target went on with (event.drafted[0]) and its rivals."""
    guesses = list(zip([texts.drafted[0], *texts.rivals], (event.drafted[0], *event.rivals)))
    return sorted(guesses, key=lambda guess: -(guess[1].draft_confidence or 0.0))


def dropped_guesses(guesses: Sequence[tuple[str, DraftedToken]], kept: DraftedToken) -> str:
    return listing([inline_token(text, "rejected") for text, token in guesses if token is not kept])


def rivals_sentence(event: RoundEvent, texts: RoundTexts) -> str:
    """What rival guesses are, and what became of this round's (greedy only: DecodeConfig.rivals)."""
    guesses = guesses_in_order(event, texts)
    (first_text, first), others = guesses[0], guesses[1:]
    taken = event.drafted[0] if event.drafted[0].accepted else None
    ordinals = listing([ordinal(i + 2) for i in range(len(others))])
    offered = listing([f"{plain_token(text)} ({token.draft_confidence:.0%})" for text, token in others])
    sentence = (f"Unsure of its first token {plain_token(first_text)} ({first.draft_confidence:.0%} sure), the drafter "
                f"also offered its {ordinals} guesses for that same position: {offered}. They rode along in the same "
                f"target forward, each placed at that position (the target reads the text and that one guess, never "
                f"the other guesses), so judging them took no extra pass. At temperature 0 a draft is kept only where it "
                f"is the target's own top pick, so the target takes whichever guess is. ")
    if taken is None:
        return sentence + (f"Here none of the {len(guesses)} was: the first pick {inline_token(first_text, 'rejected')} "
                           f"goes to the test below and is rejected, the rivals are dropped, and the target writes its "
                           f"own token.")
    taken_text = texts.drafted[0]
    if taken is first:
        return sentence + (f"Here it was the drafter's first pick {inline_token(taken_text, 'accepted')}: the round goes "
                           f"on with it, and the rivals {dropped_guesses(guesses, taken)} are dropped.")
    rank = ordinal(1 + next(i for i, (_, token) in enumerate(guesses) if token is taken))
    return sentence + (f"Here it was {inline_token(taken_text, 'accepted')}, the drafter's {rank} guess: the round goes "
                       f"on with it as its one draft, and {dropped_guesses(guesses, taken)} are dropped. Without rivals, the first pick "
                       f"{inline_token(first_text, 'rejected')} would have been rejected and this token written by the "
                       f"target alone, one token for the pass instead of two.")


def verify_sentence(event: RoundEvent, texts: RoundTexts, labels: Mapping[int, str]) -> str:
    probs = [f"p({plain_token(text)}) = {prob(token.target_prob)}" for text, token in zip(texts.drafted, event.drafted)]
    rivals = f" (and the {count(len(event.rivals), 'rival guess', 'rival guesses')}, stage 3)" if event.rivals else ""
    sentence = (f"One target forward over the last committed token and the {count(event.gamma, 'draft')}{rivals} gave "
                f"p at {event.gamma + 1} positions at once: {listing(probs)}.")
    if event.details and len(event.details) > event.gamma and event.details[event.gamma].target_top:
        token_id, top_prob = event.details[event.gamma].target_top[0]
        sentence += (f" After the last draft the target's favourite would be {plain_token(labels.get(token_id, ''))} "
                     f"(p = {prob(top_prob)}).")
    return sentence


def accept_list(event: RoundEvent, texts: RoundTexts) -> str:
    """Each draft's r against min(1, p/q), in order; the ones after a rejection never looked at."""
    lines = []
    for i, (text, token) in enumerate(zip(texts.drafted, event.drafted)):
        verdict = event.verdict(i)
        if not token.decided:
            lines.append(f"{inline_token(text, 'unexamined')}: never examined, it came after a rejection")
            continue
        sign = "&lt;" if token.accepted else "≥"
        outcome = f"<b>{'accepted' if token.accepted else 'rejected'}</b>"
        if token.accepted and verdict == "unexamined":  # the rule kept it, but an earlier draft ended the text
            outcome += ", then dropped: it comes after the end-of-text token"
        lines.append(
            f"{inline_token(text, verdict)}: r = {token.r:.3f} {sign} min(1, {prob(token.target_prob)} / {prob(token.draft_prob)}) "
            f"= {prob(token.accept_prob)} → {outcome}"
        )
    items = "".join(f"<li>{line}</li>" for line in lines)
    return f"Draw r ~ U(0, 1) and keep the draft if r &lt; min(1, p/q):<ul style='margin:4px 0 0 0'>{items}</ul>"


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


def correction_sentence(event: RoundEvent, texts: RoundTexts, labels: Mapping[int, str]) -> str:
    if not texts.own:
        return "The end-of-text token ended the run inside this round, so the target's own token was not kept."
    # A token whose piece of the text is empty (half of a multi-byte character) would draw as ∅: show it alone.
    own = inline_token(texts.next_text or labels.get(event.next_id, ""), event.own_kind)
    detail = event.details[event.num_accepted] if event.details and event.num_accepted < len(event.details) else None
    if event.next_kind == "resample":
        residual = dict(detail.residual_top) if detail else {}
        share = (f"; it had {prob(residual[event.next_id])} of the residual's mass" if event.next_id in residual
                 else "; it was outside the residual's top tokens drawn in the chart")
        return (f"At the rejected position the target drew {own} from norm(max(0, p − q)): what the target wants there, "
                f"minus what the draft over-proposed, rescaled to sum to 1 (chart){share}. That subtraction is what keeps "
                f"the output exactly the target's.")
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


def plain_step_stages(event: RoundEvent, texts: RoundTexts, drafter: str) -> list[tuple[str, str, str]]:
    """A round with nothing drafted: no room left, or prompt lookup found no match."""
    why = drafter_info(drafter).none_words
    own = inline_token(texts.next_text, "target") if texts.own else "nothing (end of text)"
    return [
        ("draft", "Draft", f"Nothing drafted: {why}."),
        ("verify", "Target step", f"One plain target forward, as the baseline would do: the target sampled {own} from p."),
        ("rollback", "Commit", "Nothing to roll back: one token in, one token kept."),
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
    return (f'<div class="status-{kind}" data-kind="{kind}" data-round="{round_number}" '
            f'data-done="{"true" if done else "false"}" data-tokens="{num_tokens}">{escape_text(message)}</div>')
