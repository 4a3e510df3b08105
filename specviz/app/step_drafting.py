"""Step mode's words for the drafting side of a round: the draft stage (what the drafter guessed and how sure
it was), why it drafted fewer than γ (the real cause, from step_mode.DraftRoom), and rival guesses. The
round's other stages, and the round as a whole, are specviz.app.step_lessons.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from specviz.catalogue import drafter_info
from specviz.decoding.events import DraftedToken, RoundEvent
from specviz.app.palette import COLORS
from specviz.app.render.lanes import RoundTexts
from specviz.app.render.tokens import inline_token, prob, visible_text
from specviz.app.wording import count

if TYPE_CHECKING:  # annotations only: the words stay free of torch and the models
    from specviz.app.lab.step_mode import DraftRoom


def plain_token(text: str) -> str:
    """A drafted token before the target has judged it: outlined in the draft's colour, no verdict yet."""
    return (f'<span class="tok tok-proposed" style="border:1px solid {COLORS["draft"]};border-radius:3px;'
            f'padding:0 2px;font-family:ui-monospace,Menlo,Consolas,monospace">{visible_text(text, keep_breaks=False)}</span>')


def listing(items: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def draft_sentence(event: RoundEvent, texts: RoundTexts, drafter: str, room: DraftRoom) -> str:
    info = drafter_info(drafter)
    drafts = list(zip(texts.drafted, event.drafted))
    if event.guesses and texts.guesses:  # the drafter's own first pick, whichever guess the target then took
        drafts[0] = (texts.guesses[0], event.guesses[0])
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
    sentence = (f"Unsure of its first token {plain_token(first_text)} ({first.draft_confidence:.0%} sure), the drafter "
                f"also offered its {ordinals} guesses for that same position: {offered}. They rode along in the same "
                f"target forward, each placed at that position (the target reads the text and that one guess, never "
                f"the other guesses), so judging them took no extra pass. At temperature 0 a draft is kept only where it "
                f"is the target's own top pick, so the target takes whichever guess is. ")
    if taken is None:
        return sentence + (f"Here none of the {len(guesses)} was: the first pick {inline_token(first_text, 'rejected')} "
                           f"goes to the test below and is rejected, the rivals are dropped, and the target writes its "
                           f"own token.")
    taken_text = texts.guesses[taken]
    if taken == 0:
        return sentence + (f"Here it was the drafter's first pick {inline_token(taken_text, 'accepted')}: the round goes "
                           f"on with it, and the rivals {dropped_guesses(texts, taken)} are dropped.")
    return sentence + (f"Here it was {inline_token(taken_text, 'accepted')}, the drafter's {ordinal(taken + 1)} guess: the "
                       f"round goes on with it as its one draft, and {dropped_guesses(texts, taken)} are dropped. Without rivals, the first pick "
                       f"{inline_token(first_text, 'rejected')} would have been rejected and this token written by the "
                       f"target alone, one token for the pass instead of two.")
