"""The acceptance rule in words: one home for every sentence that says why a draft was kept or thrown away,
where the target's own token came from and when a bonus comes (the lanes' hovers, legend and first view, the
inspector, How it works, a tree round's lines, a round's drawing, the stats, step mode, the charts' titles, the
exactness lab), so no two of them tell it differently and rewording the rule is this one file.

Plain text: the caller escapes it. A function's token arguments (`draft`, `pick`, `own` …) are put in as given, so
a caller may pass them quoted ('x') or as HTML (a drawn token); the words around them hold no <, > or &, so an HTML
caller need not escape them (tests/test_render.py checks that), coin_test's "r < …" aside, which its caller escapes
whole.
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
TREE_WALK = ("From the top, try each node's children in the drafter's order; the first one kept becomes the node "
             "and the walk goes on below it.")
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
# The inspector's table, the greedy round's own token: short, since the answer above it says why in full.
GREEDY_OWN_VERDICT_TEXT = {
    "resample": f"{REPLACEMENT}: {OWN_PICK}",
    "bonus": f"bonus: {FREE_TOKEN}",
}
# A greedy round whose first position had rival guesses: the drafter's first pick, and the rival the target took.
RIVAL_VERDICT_TEXT = {
    "rejected": "rejected: the drafter's first pick, not the target's",
    "taken": f"taken: {OWN_PICK}",
}
# The legend's hover for each kind of token the rule decides.
LEGEND_HELP = {
    "accepted": f"the target agreed (r < {KEEP_CHANCE})",
    "rejected": f"struck through: r ≥ {KEEP_CHANCE}, thrown away",
    "unexamined": "drafted after a rejection, never checked",
    "resample": f"the target's own token in a rejected draft's place: its top pick at temperature 0, else resampled "
                f"from {RESIDUAL}",
    "bonus": f"every draft of the round accepted: {FREE_TOKEN}",
}
# The rule without notation, for the page's first view (each beside a sample token drawn in its colour).
PLAIN_KEY = {
    "accepted": "green: the target agreed with the drafter's guess",
    "rejected": "struck through: the target disagreed, so the guess was thrown away",
    "resample": "orange: the target's own token, written in the rejected guess's place",
    "bonus": "blue: a free extra token when every guess was kept",
}
# "Why is the output still the target's?", in the one line a learner needs.
WHY_EXACT = (
    "Why the text is still the target's: a draft x is kept with probability q(x)·min(1, p(x)/q(x)) = min(p(x), q(x)), "
    f"and a rejection's correction is drawn from {RESIDUAL}, which holds exactly the rest, p(x) − min(p(x), q(x)); "
    "the two add back to exactly p(x)."
)
# Beside the stats' token-by-token check: where the one-line proof above is said (How it works).
WHY_EXACT_POINTER = ("Why the rule keeps the target's distribution (and at temperature 0 its text), in one line: How "
                     "it works, below (a kept draft and a correction add back to exactly the target's probability).")
RULE_EXACT = ("This rule makes the output distributed exactly as if the target had generated alone, only with fewer "
              "slow target passes.")
SAME_DISTRIBUTION = ("The rule above makes each speculative token follow the target's own distribution exactly: the "
                     "same distribution, not the same sample.")
# "Still exact at temperature 1 with top-p (or top-k)?": where the answer lives, the exactness lab, which draws
# with the page's settings; tests/test_distribution checks it statistically with the same warpers.
SETTINGS_EXACT = ("Temperature, top-k and top-p reshape both models' distributions before the rule compares them, so "
                  "speculative decoding samples exactly what the target alone samples with the same settings.")
NOT_EXAMINED = "not examined: a draft before it was rejected, so the target never checked it"
NEVER_EXAMINED = "never examined, it came after a rejection"
# A round an accepted end-of-text token ended (RoundEvent.num_kept_drafts decides which drafts it leaves in the text):
# the drafts after it are dropped, and the target's own token is not kept.
END_OF_TEXT = "the text ended at the end-of-text token"
END_OF_TEXT_WORDS = "the text ended at an accepted end-of-text token, so the target's own token was not kept"
DROPPED_TEXT = "accepted, then dropped: it comes after the end-of-text token"


def coin_text(r: str, accepted: bool) -> str:
    """Where the coin fell against the chance it was compared with (r as the caller shows it)."""
    return f"the coin r = {r} {'fell below' if accepted else 'was above'} it"


def chance_text(chance: str, r: str, accepted: bool) -> str:
    """A chain's draft above temperature 0: its chance to be kept, and where the coin fell."""
    return f"accepted with probability {KEEP_CHANCE} = {chance}; {coin_text(r, accepted)}"


def bonus_source(greedy: bool) -> str:
    """Where the bonus token comes from."""
    return "its own top pick" if greedy else "sampled from p"


def correction_word(greedy: bool) -> str:
    """How the target chose its token in a rejected draft's place, in a chart's few words."""
    return OWN_PICK if greedy else "resampled"


def bonus_word(greedy: bool) -> str:
    """Where the bonus token comes from, in a chart's few words."""
    return OWN_PICK if greedy else "from p"


# --- a chain's draft: why it was kept or thrown away (its hover, the inspector, step mode's test) ---------------


def coin_reason(chance: str, r: str, accepted: bool) -> str:
    """Above temperature 0, in one plain line: the chance to keep the draft, where the coin fell, the verdict."""
    return f"{chance_text(chance, r, accepted)}, so {'accepted' if accepted else 'rejected'}"


def kept_reason(draft: str, sure: str = "") -> str:
    """At temperature 0, a kept draft: it was the target's own top pick too (`sure`: how sure each model was)."""
    return f"kept: {draft} was {TARGET_PICK} too{sure}"


def rejected_reason(pick: str | None, draft: str, pick_sure: str = "", draft_sure: str = "") -> str:
    """At temperature 0, a rejected draft: the target's own top pick (None: not known) against the drafter's guess."""
    return f"rejected: {TARGET_PICK} was {pick or 'another token'}{pick_sure}; the drafter guessed {draft}{draft_sure}"


def rival_rejected_reason(taken: str, taken_sure: str, number: int, first: str, first_sure: str) -> str:
    """At temperature 0, the drafter's first pick where the target took its rival guess `number` instead."""
    return (f"rejected: {TARGET_PICK} was {taken}{taken_sure}, the drafter's rival guess {number}; "
            f"the drafter guessed {first} first{first_sure}")


def rival_kept_sentence(taken: str, taken_sure: str, number: int, first: str, first_sure: str) -> str:
    """The same, as the inspector's answer: why the round kept the rival."""
    return (f"{TARGET_PICK.capitalize()} was {taken}{taken_sure}, not the drafter's first pick {first}{first_sure}; "
            f"{taken} was the drafter's rival guess {number}, checked in the same target pass, so the round kept it.")


def coin_test(r: str, p: str, q: str, chance: str, accepted: bool) -> str:
    """Step mode's test of one draft above temperature 0, in numbers."""
    return f"r = {r} {'<' if accepted else '≥'} min(1, {p} / {q}) = {chance}"


def pick_test(accepted: bool, pick: str | None) -> str:
    """Step mode's test of one draft at temperature 0: the target's own pick (None: not known)."""
    if accepted:
        return f"{OWN_PICK} too"
    return f"the target's pick here is {pick}" if pick is not None else "not the target's pick"


def all_accepted_sentence(drafts: str, accepted: str) -> str:
    """A chain round that kept every draft (`drafts`: "All 3 drafts", capitalised)."""
    return f"{drafts} accepted: {accepted}."


def cut_sentence(num_accepted: int, gamma: int, accepted: str, rejected: str) -> str:
    """A chain round that ended in a rejection: everything after the first rejected draft goes."""
    if num_accepted == 0:
        return f"None accepted: the first draft {rejected} was rejected, and everything after it goes."
    return (f"{num_accepted} of {gamma} accepted ({accepted}); the draft went wrong at {rejected}, "
            f"and everything after it goes.")


def verify_story(drafts: str, aside: str, num_positions: int, greedy: bool, listed: str) -> str:
    """Step mode's verify: one target forward over the `drafts` ("3 drafts"; `aside`: its rival guesses, where any)
    and what it gave at each position: at temperature 0 the target's own top pick (`listed`: the picks it shows, if
    any), above it p (`listed`: p of each draft)."""
    forward = f"One target forward over the last committed token and the {drafts}{aside} gave "
    if greedy:  # p is one-hot there: the target's own top pick is all it says
        return (f"{forward}the target's own top pick at {num_positions} positions at once: at temperature 0 that pick "
                f"is all that counts" + (f" ({listed})." if listed else "."))
    return f"{forward}p at {num_positions} positions at once: {listed}."


# --- a round an accepted end-of-text token ended ----------------------------------------------------------------


def ended_sentence(kept: str) -> str:
    """The inspector's answer for such a round (`kept`: "2 of the drafts", or the kept guesses)."""
    return f"The target kept {kept}, and {END_OF_TEXT_WORDS}."


def ended_story(kept: str, tokens: str) -> str:
    """How it works on such a round (`tokens`: what its one pass gave, "2 tokens")."""
    return f"the target kept {kept} and {END_OF_TEXT}: {tokens} for one target pass, and no bonus"


def dropped_sentence(accepted: str, dropped: str, one: bool) -> str:
    """Step mode's verdict on such a round: `accepted` ("2 of 3", "All 3 drafts"), then the `dropped` drafts after
    the end-of-text token ("1 draft", `one`)."""
    return (f"{accepted} accepted, but the text ends at the end-of-text token: the {dropped} after it "
            f"{'is' if one else 'are'} dropped.")


# --- the target's own token: where the replacement or the bonus came from ------------------------------------------


def bonus_reason(drafts: str, greedy: bool) -> str:
    """A chain round whose `drafts` ("all 3 drafts") were all accepted: its bonus token."""
    return f"bonus: {drafts} accepted, so {FREE_TOKEN}: {bonus_source(greedy)} after the last draft"


def replacement_reason(greedy: bool, rejected: str | None = None) -> str:
    """Where the target's own token in a rejected draft's place (`rejected`, where known) came from."""
    instead = f", in place of the rejected {rejected}" if rejected is not None else ""
    if greedy:
        return f"{OWN_PICK}{instead}: {GREEDY_CORRECTION}"
    return (f"resampled from the residual {RESIDUAL}{instead}: what the target wanted here beyond what the draft "
            f"offered, renormalised, {STAYS_EXACT}")


def all_kept_sentence(drafts: str, one: bool, bonus: str, greedy: bool) -> str:
    """The inspector's answer for a round that kept every draft ("All 3 drafts", capitalised) and its bonus."""
    kept = (f"matched the target's own top pick, so {'it was' if one else 'all were'} kept" if greedy
            else f"{'was' if one else 'were'} accepted (each coin r fell below its {KEEP_CHANCE})")
    return f"{drafts} {kept}; the same target pass then gave one more token, {bonus}, {bonus_source(greedy)}, for free."


def rejection_story(num_kept: int, rejected: str, own: str, greedy: bool, *, target_sure: str = "",
                    draft_sure: str = "", p: str = "", q: str = "", chance: str = "", r: str = "") -> str:
    """How it works on a round that ended in a rejection (`rejected` the draft, `own` the target's token): at
    temperature 0 the target's own pick; above it p, q, the chance to keep the draft and the coin, then the resample."""
    kept = "none of the drafts" if num_kept == 0 else f"the first {num_kept} draft{'s' if num_kept > 1 else ''}"
    if greedy:
        return (f"The target kept {kept}; at {rejected} its own top pick was {own}{target_sure}, while the drafter "
                f"had guessed otherwise{draft_sure}. {GREEDY_CORRECTION.capitalize()}")
    return (f"The target accepted {kept}; at {rejected} it gave p = {p} against the draft's q = {q}, so it was "
            f"{chance_text(chance, r, False)}. The target then resampled {own} from the residual {RESIDUAL}")


def bonus_story(drafts: str, one: bool, proposed: str, bonus: str) -> str:
    """How it works on a round whose `drafts` ("all 3 drafts") were all accepted."""
    return f"{drafts} {'was' if one else 'were'} accepted ({proposed}), so {FREE_TOKEN}, the bonus {bonus}"


def replacement_story(own: str, greedy: bool, share: str | None = None) -> str:
    """Step mode's correction after a rejection; above temperature 0 `share` is the token's residual probability
    (None: outside the residual's top tokens drawn in the chart)."""
    if greedy:
        return (f"At the rejected position the target wrote its own top pick {own}. "
                f"{GREEDY_RESIDUAL[:1].upper()}{GREEDY_RESIDUAL[1:]}, {STAYS_EXACT}.")
    said = (f"; it had {share} of the residual's mass" if share is not None
            else "; it was outside the residual's top tokens drawn in the chart")
    return (f"At the rejected position the target drew {own} from {RESIDUAL}: {RESIDUAL_MEANING} "
            f"(chart){said}. That subtraction is what keeps the output exactly the target's.")


def bonus_step(own: str, greedy: bool, p: str | None = None) -> str:
    """Step mode's bonus after every draft survived (`p`: the target's probability of it, where recorded)."""
    if greedy:
        return f"Every draft survived, so {FREE_TOKEN}: the target's own top pick there, {own}, is the bonus token."
    return f"Every draft survived, so {FREE_TOKEN}: the target drew the bonus token {own} from p there{f' (p = {p})' if p else ''}."


# --- a tree round's nodes (the tree's hover, the inspector's table, step mode's walk) -------------------------------


def tree_kept_reason(token: str, greedy: bool, chance: str = "", r: str = "") -> str:
    """A guess on the kept path: the target's own pick at temperature 0, else p′(x) and the coin."""
    if greedy:
        return f"kept: {token} is {OWN_PICK} here too"
    return f"accepted: tried with p′(x) = {chance}; {coin_text(r, True)}"


def tree_rejected_reason(greedy: bool, *, pick: str = "", guess: str = "", share: str = "", chance: str = "",
                         p: str = "", r: str = "", earlier: str = "") -> str:
    """A guess tried and rejected: at temperature 0 the target's own pick there (`pick`, or "another token") against
    the drafter's `guess` it gave `share`; above it p′(x), p(x) with the `earlier` rejected siblings, and the coin."""
    if greedy:
        return f"rejected: {OWN_PICK} here is {pick}; the drafter guessed {guess} (it gave it {share})"
    renorm = f", p′ being p with {earlier} (rejected before it) set to 0 and renormalised" if earlier else ""
    return f"rejected: tried with p′(x) = {chance} (p(x) = {p}{renorm}); {coin_text(r, False)}"


def tree_unexamined_reason(branch: str, branch_rejected: bool, taken: str, is_branch: bool) -> str:
    """A guess the walk never tried: `branch` (the guess itself, `is_branch`, or the ancestor hanging off the kept
    path) was rejected, or `taken`, a sibling tried before it, was kept instead."""
    if branch_rejected:
        return (f"not examined: {branch} above it was rejected, so the walk never came down this branch (the "
                "target's pass computed it with the rest, and it was dropped)")
    if is_branch:
        return (f"not examined: the target took {taken}, tried before it at this step, and the walk went on "
                f"below {taken}; this guess was never tried and was dropped")
    return (f"not examined: {branch} above it was never tried (the target took {taken} before it), so the walk never "
            "came down this branch; it was dropped")


def tree_own_reason(bonus: bool, where: str, guesses: str, greedy: bool) -> str:
    """Where a tree round's own token (`where`: "right after the text", "after 'x'") came from; `guesses`: the
    rejected guesses tried there."""
    if bonus:
        return (f"bonus {where}: the kept path ends at a leaf, every guess on it accepted, so {FREE_TOKEN}: "
                f"{bonus_source(greedy)}")
    if greedy:
        return f"{OWN_PICK} {where}: none of the guesses there ({guesses}) was its pick, and {GREEDY_CORRECTION}"
    return (f"resampled {where} from p′: the target's p there with each rejected guess ({guesses}) set to 0 and "
            f"renormalised, {STAYS_EXACT}")


def tree_verdict_sentence(kept: str, num_rejected: int, num_unexamined: int) -> str:
    """Step mode's verdict on a tree round: the kept path (`kept`, "" where no guess was kept) and the other guesses."""
    path = f"The kept path: {kept}" if kept else "No guess was kept"
    return (f"{path}. Of the other guesses, {num_rejected} tried and rejected, {num_unexamined} never examined "
            "(grey: a guess above them failed, or a sibling was kept first); a chain would have checked one branch "
            "only.")


def tree_summary_sentence(round_number: int, guesses: str, num_branches: int, depth: int, num_kept: int,
                          kept: str) -> str:
    """The inspector's and How it works' summary of a tree round: what it proposed (`guesses`: "8 guesses"), what the
    one pass checked, and the path the walk kept."""
    return (f"Round {round_number}: the drafter proposed a tree of {guesses} on {num_branches} branches, up to {depth} "
            "deep; the target checked every one in one forward pass (the mask beside it: each guess sees the text, the "
            "guesses above it and itself, never another branch) and walked down from the top, trying each node's "
            f"children in order: it kept {num_kept} ({kept}).")


# --- rival guesses: a greedy round's unsure first draft, with the drafter's next guesses for its position ------------


def rivals_reason(listed: str, num_guesses: int, first: str, taken_index: int | None, taken: str = "") -> str:
    """Why a round's first position shows more than one guess (`listed`: each with how sure the drafter was), and
    which the target took: `taken_index` 0 the drafter's first pick `first`, another its rival `taken`, None none."""
    if taken_index is None:
        outcome = "none of them was the target's own choice, so the target wrote its token itself"
    elif taken_index == 0:
        outcome = f"the target agreed with the draft's first pick {first}; the others were dropped"
    else:
        outcome = (f"the target's own choice was {taken}, not the draft's first pick {first}, so the round took it: a "
                   "token the chain alone would have lost")
    return (f"rival guesses: the drafter was unsure of its first guess here, so it offered {num_guesses} at once, "
            f"{listed}; the target judged them all in its one verify (each at this position, seeing the text and "
            f"itself, never the others): {outcome}")


def rivals_missed_sentence(listed: str, num_rivals: int) -> str:
    """The inspector's answer, where the first draft fell and none of its `num_rivals` rival guesses (`listed`:
    "' cat' and ' Cats'") was taken either: the timeline draws their rows, so the answer says what became of them."""
    # short: it stands in the answer a first run shows (the page's budget of words, test_app_browser)
    one = num_rivals == 1
    return f"Its rival guess{'' if one else 'es'}, {listed}, {'was' if one else 'were'} not the target's pick either."


def rival_taken_reason(number: int, taken: str, share: str, first: str) -> str:
    """The rival the target took, in its hover: the drafter's guess `number`, which it gave `share`."""
    return (f"rival guess {number} — {OWN_PICK}, taken: the drafter gave {taken} {share}, less than its first pick "
            f"{first}, and offered it beside that pick because it was unsure")


def rivals_offered_story(first: str, first_share: str, ordinals: str, offered: str) -> str:
    """Step mode: what rival guesses are (`ordinals`: "2nd and 3rd"; `offered`: each with how sure the drafter was),
    and the rule that picks among them."""
    return (f"Unsure of its first token {first} ({first_share} sure), the drafter also offered its {ordinals} guesses "
            f"for that same position: {offered}. They rode along in the same target forward, each placed at that "
            "position (the target reads the text and that one guess, never the other guesses), so judging them took "
            f"no extra pass. {GREEDY_KEEP.capitalize()}, so the target takes whichever guess is.")


def rivals_taken_story(taken_index: int | None, num_guesses: int, first: str, taken: str = "", ordinal: str = "",
                       dropped: str = "") -> str:
    """Step mode: which guess the target took (`taken_index` as rivals_reason's; `ordinal`: its place, "2nd") and
    what became of the others (`dropped`)."""
    if taken_index is None:
        return (f"Here none of the {num_guesses} was: the first pick {first} goes to the test below and is rejected, "
                "the rivals are dropped, and the target writes its own token.")
    if taken_index == 0:
        return (f"Here it was the drafter's first pick {first}: the round goes on with it, and the rivals {dropped} "
                "are dropped.")
    return (f"Here it was {taken}, the drafter's {ordinal} guess: the round goes on with it as its one draft, and "
            f"{dropped} are dropped. Without rivals, the first pick {first} would have been rejected and this token "
            "written by the target alone, one token for the pass instead of two.")


def rival_story(first: str, first_share: str, offered: str, taken: str, bonus: str, tokens: str) -> str:
    """How it works on a round where a rival guess, not the drafter's first pick `first`, was the target's choice
    (`offered`: the taken rival and the others; `tokens`: what the pass gave, "2 tokens")."""
    return (f"the drafter was unsure of its first guess {first} ({first_share}), so it also offered {offered} for the "
            f"same position, all checked in the same target pass. The target's own choice was {taken}, so the round "
            f"kept it and the bonus {bonus}: {tokens} for one target pass, where its first guess alone would have "
            "given 1.")


# --- a round's drawing (specviz.app.plots_round): what each row of its one target forward said ----------------------


def draft_forward_reason(ms: str, kept: bool | None) -> str:
    """A draft forward's block: how long it took and whether its token was kept (None: not said yet)."""
    fate = "" if kept is None else f": its token {'kept' if kept else 'thrown away'}"
    return f"a draft forward, {ms} ms{fate}"


def draft_row_reason(number: int, draft: str, verdict: str, greedy: bool, own: str = "") -> str:
    """The row that judged a chain's draft `number`: kept, rejected (the same row gives the target's own token
    `own`), or past the cut."""
    where = f"the row that judges draft {number}, {draft}"
    if verdict == "accepted":
        return f"{where}: kept"
    if verdict == "rejected":
        return f"{where}: rejected; the same row gives {correction_word(greedy)} {own}. The cut falls here."
    return f"{where}: after the cut, never judged; its row is dropped"


def rival_row_reason(rival: str) -> str:
    """The row of a rival guess the target did not take."""
    return f"a rival guess for draft 1, {rival}, checked in the same pass and not taken; its row is dropped"


def last_row_reason(bonus: str | None) -> str:
    """A chain's last row: the `bonus` token where every draft was kept (None: it was not)."""
    if bonus is None:
        return "the last row: past the cut, unused"
    return f"the last row: every draft kept, so it gives a bonus token, {bonus}"


def plain_row_reason(own: str) -> str:
    """A round that drafted nothing: its one row."""
    return f"nothing drafted: one plain target step, which wrote {own}"


def tree_row_reason(node: str, depth: int, verdict: str) -> str:
    """The row of a tree's drafted node."""
    what = {"accepted": "on the kept path", "rejected": "tried and rejected",
            "unexamined": "never tried: its row is dropped"}[verdict]
    return f"node {node} at depth {depth}: {what}"


def tree_own_row_reason(own: str) -> str:
    """The row that gives a tree round's own token."""
    return f"the target's own token, {own}: the row under the last kept node gives it"


TREE_UNUSED_ROW = "the row below the last kept node: unused, the text had ended"
