"""The acceptance rule in words: one home for every place that explains it (the lanes' hovers and legend, the
inspector, How it works, a tree round's lines, the stats, step mode, the charts' titles, the exactness lab),
so no two of them tell it differently.
Plain text: the caller escapes it.
"""

from __future__ import annotations

KEEP_CHANCE = "min(1, p/q)"
COIN = "r ~ U(0, 1)"
RESIDUAL = "norm(max(0, p − q))"
COIN_TEST = f"Draw {COIN} and keep the draft if r < {KEEP_CHANCE}"
RESIDUAL_MEANING = "what the target wants there, minus what the draft over-proposed, rescaled to sum to 1"
# The lab's deliberately wrong rules, a chain's and a tree's: the test must catch either.
WRONG_CHAIN = "resample from p"
WRONG_TREE = "Medusa's typical acceptance on the tree"
WRONG_RULE = f"{WRONG_CHAIN} instead of {RESIDUAL}"
# A tree's children are tried in order (SpecInfer's rule): p′ starts as p and loses each rejected guess.
TREE_RULE = "a guess x is kept with probability p′(x); each rejection sets p′(x) to 0 and renormalises p′"
RULE_TEXT = (
    f"Each guess x is kept with probability min(1, p(x)/q(x)), where q is the draft's probability and p the "
    f"target's: the page draws {COIN} and keeps x if r < {KEEP_CHANCE}. At the first rejection the target replaces "
    f"the token with one drawn from the residual {RESIDUAL}; if every guess survives, the same target pass yields "
    "one bonus token."
)
# At temperature 0 q and p are one-hot: the coin is compared with 0 or 1, so the target's top pick decides.
GREEDY_KEEP = "at temperature 0 a draft is kept exactly when it is the target's own top pick"
GREEDY_RULE = f"{GREEDY_KEEP}; no coin is drawn"
OWN_PICK = "the target's own pick"
# The one name of the token the target writes where a draft was rejected (drawn orange): the legend, the lane's
# first view and the round picker all say it. How it was chosen (the target's pick, or resampled) is said beside it.
REPLACEMENT = "replacement"
TARGET_PICK = "the target's own top pick here"
GREEDY_RESIDUAL = (f"that is what {RESIDUAL} comes to at temperature 0: p is all on the target's pick and q all on "
                   "the draft's, so what is left is the target's pick alone")
GREEDY_CORRECTION = "at temperature 0 the target writes its own top pick where a draft fails"
FREE_TOKEN = "the same target pass gives one more token for free"
STAYS_EXACT = "so the text stays exactly the target's"
VERDICT_TEXT = {
    "accepted": f"accepted (r < {KEEP_CHANCE})",
    "rejected": f"rejected (r ≥ {KEEP_CHANCE})",
    "unexamined": "not examined (after the rejection)",
}
GREEDY_VERDICT_TEXT = {
    "accepted": "kept: the target's own pick too",
    "rejected": "rejected: not the target's own pick",
    "unexamined": VERDICT_TEXT["unexamined"],
}
# Q5, "why is the output still the target's?", in the one line a learner needs.
WHY_EXACT = (
    "Why the text is still the target's: a draft x is kept with probability q(x)·min(1, p(x)/q(x)) = min(p(x), q(x)), "
    f"and a rejection's correction is drawn from {RESIDUAL}, which holds exactly the rest, p(x) − min(p(x), q(x)); "
    "the two add back to exactly p(x)."
)


def coin_text(r: str, accepted: bool) -> str:
    """Where the coin fell against the chance it was compared with (r as the caller shows it)."""
    return f"the coin r = {r} {'fell below' if accepted else 'was above'} it"


def chance_text(chance: str, r: str, accepted: bool) -> str:
    """A chain's draft above temperature 0: its chance to be kept, and where the coin fell."""
    return f"accepted with probability {KEEP_CHANCE} = {chance}; {coin_text(r, accepted)}"


def bonus_source(greedy: bool) -> str:
    """Where the bonus token comes from."""
    return "its own top pick" if greedy else "sampled from p"
