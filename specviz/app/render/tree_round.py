"""A tree round (RoundEvent.nodes: every drafted node, then the target's own token below the kept path) in words:
each node's plain line (why it was kept, rejected or never examined; where the target's own token came from), which
the figure (specviz.app.plots_tree) hovers with too, the inspector's summary and table, and the lane's small mark
on a round that checked more than a chain.
"""

from __future__ import annotations

from typing import Callable, Sequence

from specviz.app.render.rule import (
    ended_sentence, tree_kept_reason, tree_own_reason, tree_rejected_reason, tree_summary_sentence,
    tree_unexamined_reason,
)
from specviz.app.render.tokens import ON_DEMAND, escape_text, prob, quoted, timing_text, token_span
from specviz.app.wording import as_sentence, count
from specviz.decoding.events import RoundEvent, TreeNode

ROOT = -1
# (context ids, token id) → the token's text after that context (render.pieces.token_piece with its decode).
Piece = Callable[[list[int], int], str]
TREE_MARK_HELP = ("a draft tree: the round guessed several branches and the target checked every one in the same "
                  "pass; the text shows the path it kept (open the round in the inspector to see the tree)")


def ancestors(nodes: Sequence[TreeNode], index: int) -> list[int]:
    """The entries above `index`, from depth 1 down (not the entry itself)."""
    chain = []
    parent = nodes[index].parent
    while parent != ROOT:
        chain.append(parent)
        parent = nodes[parent].parent
    return chain[::-1]


def node_texts(event: RoundEvent, committed_ids: list[int], piece: Piece) -> list[str]:
    """The text of each entry of event.nodes, read after the text and its own ancestors."""
    nodes = event.nodes
    return [piece(committed_ids + [nodes[a].token_id for a in ancestors(nodes, i)], node.token_id)
            for i, node in enumerate(nodes)]


def own_index(event: RoundEvent) -> int | None:
    """The target's own token's entry (the tree's last); None where an accepted end-of-text ended the round."""
    return len(event.nodes) - 1 if event.is_tree and event.nodes[-1].verdict in ("resample", "bonus") else None


def drafted_nodes(event: RoundEvent) -> list[int]:
    return [i for i, node in enumerate(event.nodes) if node.verdict not in ("resample", "bonus")]


def tree_depth(event: RoundEvent) -> int:
    """The deepest drafted guess: how far down the tree went, the most drafts the round could keep."""
    return max((event.nodes[i].depth for i in drafted_nodes(event)), default=0)


def num_branches(event: RoundEvent) -> int:
    """Root-to-leaf paths among the drafted nodes: how many ways the round guessed on (a chain has one)."""
    drafted = drafted_nodes(event)
    parents = {event.nodes[i].parent for i in drafted}
    return sum(i not in parents for i in drafted)


def tree_mark(event: RoundEvent) -> str:
    """The lane's mark after a round that checked more than a chain: its branch count, small, explained on hover."""
    if not event.is_tree or num_branches(event) < 2:
        return ""
    title = f"{count(len(drafted_nodes(event)), 'guess', 'guesses')} on {num_branches(event)} branches: {TREE_MARK_HELP}"
    return (f'<sup class="tree-mark {ON_DEMAND}" title="{escape_text(title)}" style="font-size:10px;color:#777;'
            f'font-weight:600;margin-left:1px">{num_branches(event)}</sup>')


def taken_child(nodes: Sequence[TreeNode], parent: int) -> int | None:
    """The entry the walk went on with below `parent`: its accepted child, else the target's own token there."""
    return next((i for i, node in enumerate(nodes)
                 if node.parent == parent and node.verdict in ("accepted", "resample", "bonus")), None)


def after_text(nodes: Sequence[TreeNode], index: int, texts: Sequence[str]) -> str:
    parent = nodes[index].parent
    return "right after the text" if parent == ROOT else f"after {quoted(texts[parent])}"


def tried_before(nodes: Sequence[TreeNode], index: int) -> list[int]:
    """The siblings the walk tried (and rejected) before this node (for the target's own token: all that failed)."""
    parent = nodes[index].parent
    return [i for i in range(index) if nodes[i].parent == parent and nodes[i].verdict == "rejected"]


def rejected_line(nodes: Sequence[TreeNode], index: int, texts: Sequence[str], greedy: bool) -> str:
    node = nodes[index]
    if greedy:
        pick = taken_child(nodes, node.parent)
        return tree_rejected_reason(True, pick=quoted(texts[pick]) if pick is not None else "another token",
                                    guess=quoted(texts[index]), share=f"{node.draft_prob:.0%}")
    earlier = ", ".join(quoted(texts[i]) for i in tried_before(nodes, index))
    return tree_rejected_reason(False, chance=prob(node.accept_prob), p=prob(node.target_prob), r=f"{node.r:.3f}",
                                earlier=earlier)


def unexamined_line(nodes: Sequence[TreeNode], index: int, texts: Sequence[str]) -> str:
    """Why the walk never tried a node: the deepest ancestor (or the node itself) that hung off the kept
    path was rejected, or a sibling of it was taken first."""
    branch = index
    while nodes[branch].parent != ROOT and nodes[nodes[branch].parent].verdict != "accepted":
        branch = nodes[branch].parent
    taken = taken_child(nodes, nodes[branch].parent)
    taken_text = quoted(texts[taken]) if taken is not None else "an earlier guess"
    return tree_unexamined_reason(quoted(texts[branch]), nodes[branch].verdict == "rejected", taken_text, branch == index)


def own_line(event: RoundEvent, index: int, texts: Sequence[str], greedy: bool) -> str:
    """Where the target's own token (the tree's last entry) came from."""
    nodes = event.nodes
    node = nodes[index]
    guesses = ", ".join(quoted(texts[i]) for i in tried_before(nodes, index)) or "none"
    return tree_own_reason(node.verdict == "bonus", after_text(nodes, index, texts), guesses, greedy)


def node_line(event: RoundEvent, index: int, texts: Sequence[str], greedy: bool) -> str:
    """The plain line for one entry of event.nodes, the same in the figure's hover and the inspector's table."""
    nodes = event.nodes
    node = nodes[index]
    if node.verdict in ("resample", "bonus"):
        return f"{quoted(texts[index])}\n{own_line(event, index, texts, greedy)}"
    head = f"{quoted(texts[index])} · depth {node.depth}, {after_text(nodes, index, texts)} · the drafter gave it {node.draft_prob:.0%}"
    if node.verdict == "accepted":
        why = (tree_kept_reason(quoted(texts[index]), True) if greedy else
               tree_kept_reason(quoted(texts[index]), False, prob(node.accept_prob), f"{node.r:.3f}"))
    elif node.verdict == "rejected":
        why = rejected_line(nodes, index, texts, greedy)
    else:
        why = unexamined_line(nodes, index, texts)
    return f"{head}\n{why}"


def node_lines(event: RoundEvent, texts: Sequence[str], greedy: bool) -> list[str]:
    return [node_line(event, i, texts, greedy) for i in range(len(event.nodes))]


def root_line(event: RoundEvent) -> str:
    return (f"the text so far: every guess of depth 1 follows it; the target's one pass checked all "
            f"{len(drafted_nodes(event))} guesses at once")


def kept_text(event: RoundEvent, texts: Sequence[str]) -> str:
    path = [i for i, node in enumerate(event.nodes) if node.verdict == "accepted"]
    return " ".join(quoted(texts[i]) for i in path) or "no guess"


def tree_title(event: RoundEvent, texts: Sequence[str]) -> str:
    own = own_index(event)
    ending = ("; the text ended there" if own is None else
              f", then {'bonus' if event.nodes[own].verdict == 'bonus' else 'the target' + chr(39) + 's own'} {quoted(texts[own])}")
    return (f"Round {event.round_index + 1}: {count(len(drafted_nodes(event)), 'guess', 'guesses')} on "
            f"{num_branches(event)} branches; kept {kept_text(event, texts)}{ending}")


def summary_text(event: RoundEvent, texts: Sequence[str]) -> str:
    drafted = drafted_nodes(event)
    num_kept = sum(event.nodes[i].verdict == "accepted" for i in drafted)
    summary = tree_summary_sentence(event.round_index + 1, count(len(drafted), "guess", "guesses"), num_branches(event),
                                    tree_depth(event), num_kept, kept_text(event, texts))
    return f"{summary} {timing_text(event)}."


def answer_text(event: RoundEvent, texts: Sequence[str], greedy: bool) -> str:
    """The round's deciding node in plain words, before the table: why the first guess tried there was rejected,
    and where the target's own token came from."""
    own = own_index(event)
    if own is None:
        return ended_sentence(kept_text(event, texts))
    failed = tried_before(event.nodes, own)
    where = f"Where did {quoted(texts[own])} come from? It is {own_line(event, own, texts, greedy)}."
    if not failed:
        return where
    why = rejected_line(event.nodes, failed[0], texts, greedy)
    return f"Why was {quoted(texts[failed[0]])} rejected? {as_sentence(why)} {where}"


CELL = 'style="padding:3px 8px;border-bottom:1px solid #eee;vertical-align:top"'
PICK_HINT = "Click a node in the tree to read its line here (its row below is marked)."
COLUMNS = ("#", "token", "after", "the drafter gave it", "why")


def tree_inspector_html(event: RoundEvent, texts: Sequence[str], greedy: bool) -> str:
    """The inspector for a tree round: the deciding node in words, the tree in one sentence, a row per node."""
    lines = node_lines(event, texts, greedy)
    rows = []
    for i, node in enumerate(event.nodes):
        own = node.verdict in ("resample", "bonus")
        parent = "the text" if node.parent == ROOT else escape_text(f"{node.parent + 1} {quoted(texts[node.parent])}")
        why = lines[i].split("\n", 1)[1]
        rows.append(
            f'<tr class="inspect-row tree-row inspect-{node.verdict}" data-node="{i}">'
            f"<td {CELL}>{'+' if own else i + 1}</td>"
            f"<td {CELL}>{token_span(texts[i], node.verdict, lines[i], keep_breaks=False)}</td>"
            f"<td {CELL}>{parent}</td><td {CELL}>{'—' if own else f'{node.draft_prob:.0%}'}</td>"
            f"<td {CELL}>{escape_text(why)}</td></tr>")
    header = "".join(f'<th style="padding:3px 8px;border-bottom:1px solid #ccc;text-align:left">{name}</th>'
                     for name in COLUMNS)
    return (f'<div class="inspector inspector-tree"><p class="inspect-answer" style="margin:2px 0 6px;font-weight:600">'
            f"{escape_text(answer_text(event, texts, greedy))}</p>"
            f'<p style="margin:2px 0 6px">{escape_text(summary_text(event, texts))}</p>'
            f'<p class="tree-picked" style="margin:2px 0 6px;color:#555">{PICK_HINT}</p>'
            f'<table class="inspector-table tree-table" style="border-collapse:collapse;font-size:13px">'
            f'<tr>{header}</tr>{"".join(rows)}</table></div>')


def figure_words(event: RoundEvent, texts: Sequence[str], greedy: bool) -> dict:
    """What the tree figure (plots_tree.tree_figure) writes: each entry's text and hover line, the root's, the title."""
    return {"texts": texts, "lines": node_lines(event, texts, greedy), "root_line": root_line(event),
            "title": tree_title(event, texts)}
