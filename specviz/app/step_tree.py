"""Step mode's words for a tree round: grow, verify under the tree mask, walk down, the kept
path, the target's own token, settle. The chart beside them is the inspector's tree and mask
(specviz.app.plots_tree); each node's why is the inspector's line (specviz.app.render.tree_round), so
the two never disagree. No gradio and no models, like specviz.app.step_lessons, which calls it.
"""

from __future__ import annotations

from typing import Sequence

from specviz.app.render.tokens import escape_text, inline_token
from specviz.app.render.tree_round import (
    END_OF_TEXT_WORDS, drafted_nodes, node_lines, num_branches, own_index, own_line, tree_depth,
)
from specviz.app.step_drafting import listing, plain_token
from specviz.app.wording import count
from specviz.decoding.events import RoundEvent


def grow_sentence(event: RoundEvent, texts: Sequence[str]) -> str:
    """What the drafter proposed: the tree's size and shape, and its guesses for the first token."""
    drafted = drafted_nodes(event)
    first = [f"{plain_token(texts[i])} ({event.nodes[i].draft_prob:.0%})" for i in drafted if event.nodes[i].depth == 1]
    return (f"The drafter grew a tree of {count(len(drafted), 'guess', 'guesses')} on {num_branches(event)} branches, "
            f"up to {tree_depth(event)} deep, in {count(event.num_draft_forwards, 'drafter pass', 'drafter passes')} (one per level, "
            f"each over the whole frontier): it expanded its likeliest nodes, scored each by the product of its "
            f"probabilities along the path, and kept the best. For the next token it offered {listing(first)}; the "
            "chart draws the whole tree.")


def verify_sentence(event: RoundEvent) -> str:
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
    rule = ("At temperature 0 a guess is kept exactly when it is the target's own pick there."
            if greedy else "A guess x is kept with probability p′(x); each rejection sets p′(x) to 0 and renormalises p′.")
    return (f"From the top, try each node's children in the drafter's order; the first one kept becomes the node "
            f"and the walk goes on below it. {rule}<ul style='margin:4px 0 0 0'>{items}</ul>")


def kept_sentence(event: RoundEvent, texts: Sequence[str]) -> str:
    drafted = drafted_nodes(event)
    kept = kept_tokens(event, texts)
    unexamined = sum(event.nodes[i].verdict == "unexamined" for i in drafted)
    rejected = sum(event.nodes[i].verdict == "rejected" for i in drafted)
    path = f"The kept path: {listing(kept)}" if kept else "No guess was kept"
    return (f"{path}. Of the other guesses, {rejected} tried and rejected, {unexamined} never examined (grey: a "
            "guess above them failed, or a sibling was kept first); a chain would have checked one branch only.")


def settle_sentence(event: RoundEvent, texts: Sequence[str]) -> str:
    num_kept = sum(node.verdict == "accepted" for node in event.nodes)
    moved = (f"the {count(num_kept, 'kept guess', 'kept guesses')}' entries move right behind the text and the other "
             "branches' are dropped" if num_kept else "no guess was kept, so every guess's entries are dropped")
    own = own_index(event)
    new = ("" if own is None else f" The new {inline_token(texts[own], event.nodes[own].verdict)} is in no cache yet: "
           "the next round feeds it first.")
    return (f"Committed {count(len(event.emitted_ids), 'token')}. The verify wrote every guess into the target's "
            f"KV cache: {moved}, and the drafter's own caches keep the same path.{new}")


def tree_stages(event: RoundEvent, texts: Sequence[str], greedy: bool) -> list[tuple[str, str, str, str]]:
    """A tree round's stages for step mode: (name, title, body HTML, its one-line caption)."""
    own = own_index(event)
    drafted = drafted_nodes(event)
    if own is None:  # an accepted end-of-text ended the text inside the round
        correction = ("correction", "The end of the text", f"{END_OF_TEXT_WORDS[0].upper()}{END_OF_TEXT_WORDS[1:]}.",
                      "the text ended on a kept guess")
    else:
        own_token = inline_token(texts[own], event.nodes[own].verdict)
        correction = ("correction", "Bonus" if event.nodes[own].verdict == "bonus" else "The target's own token",
                      f"{own_token}: {escape_text(own_line(event, own, texts, greedy))}.", f"the target adds {own_token}")
    kept = kept_tokens(event, texts)
    return [
        ("draft", "Draft a tree", grow_sentence(event, texts),
         f"{count(len(drafted), 'guess', 'guesses')} on {count(num_branches(event), 'branch', 'branches')}, up to {tree_depth(event)} deep"),
        ("verify", "Verify every branch in one pass", verify_sentence(event),
         f"one target forward over {count(event.num_verify_rows, 'row')}, under the tree mask"),
        ("accept", "Walk down the tree", walk_list(event, texts, greedy),
         listing([inline_token(texts[i], event.nodes[i].verdict) for i in tried_nodes(event)])),
        ("verdict", "Verdict", kept_sentence(event, texts),
         f"the kept path: {listing(kept)}" if kept else "no guess kept"),
        correction,
        ("rollback", "Settle the caches", settle_sentence(event, texts),
         f"{count(len(event.emitted_ids), 'token')} committed; the caches drop {count(event.num_dropped_rows, 'row')}"),
    ]
