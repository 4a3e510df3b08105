"""Draft trees: many guesses checked in one target pass (EAGLE-2, arXiv 2406.16858; SpecInfer).

One tree round, with committed ids c, depth γ and a budget of N nodes:
  draft   grow a tree level by level: each frontier node's top-k children (k = TREE_WIDTH), a node
          scored by the product of the drafter's probabilities along its path; the best k become
          the next frontier; after γ levels the best N nodes overall   (≤ γ drafter forwards)
  verify  one target forward over [c_-1, the N nodes] under a tree mask (forward.tree_layout): each
          node's logits are those of single steps along its own path   (1 target forward)
  decide  walk down from the root trying children in order (sampling.accept_tree)
  settle  the accepted path's cache entries move to contiguous positions (target, draft model, the
          head's features); the rest are dropped
The drafter picks children deterministically (its top-k at temperature 1), so a child x is accepted
with probability p′(x) whatever the run's temperature: exact, and greedy gives the target's own text.
The verify, the walk and the settle are every round's, a chain's too (specviz.decoding.rounds).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable

import torch
from transformers import DynamicCache

from specviz.decoding.events import RoundShape
from specviz.decoding.forward import crop_cache, move_cache_positions, node_depths
from specviz.models.slots import to_device

TREE_WIDTH = 4  # children tried per expanded node, and nodes expanded per level (EAGLE-2's top-k and K)


@dataclass(frozen=True)
class DraftTree:
    """A round's drafts, nodes in creation order: each after its parent, siblings likeliest first."""

    node_ids: torch.Tensor  # (N,)
    parents: tuple[int, ...]  # each node's parent, -1 for a child of the last committed token
    # The drafter's probability of each node after its parent (temperature 1); a chain's: the drafter's top
    # probability at each drafted position (how sure it was), None for drafters without a model.
    draft_probs: tuple[float, ...] | None
    slots: tuple[int, ...]  # where the drafter fed each node in its own cache, after the text (-1: never fed)
    num_forwards: int  # drafter forwards spent
    shape: RoundShape = "tree"  # what the round drafted: a chain, rival guesses or a tree (specviz.decoding.rounds)
    draft_rows: torch.Tensor | None = None  # (N, vocab) a chain's q at each node, what its drafts were sampled from
    stopped_unsure: bool = False  # the drafter stopped before γ: its confidence fell below the threshold
    # Greedy chains and rival rounds: the drafter's logits (1, vocab) at each node's parent, the row it was picked
    # from (Proposal.draft_logits), for the inspector; empty elsewhere.
    draft_logits: tuple[torch.Tensor, ...] = ()

    def __len__(self) -> int:
        return self.node_ids.shape[0]

    @property
    def depth(self) -> int:
        return max(node_depths(self.parents), default=0)


def empty_tree(device: torch.device, shape: RoundShape = "tree") -> DraftTree:
    """No nodes, on the text's device (the verify joins node ids to the text)."""
    return DraftTree(torch.empty(0, dtype=torch.long, device=device), (), (), (), 0, shape=shape)


# The drafter's logits (K, vocab) for a frontier: its token ids and each one's parent slot (-1: the root).
ExpandFn = Callable[[list[int], list[int]], torch.Tensor]


def top_children(logits: torch.Tensor, width: int) -> list[list[tuple[int, float]]]:
    """The `width` likeliest tokens of each row of logits (K, vocab) at temperature 1, with their
    probabilities, likeliest first; tokens the drafter cannot propose (-inf: outside its rows) never."""
    return read_top_children(logits, width)[0]


def read_top_children(logits: torch.Tensor, width: int, *riders: torch.Tensor) -> tuple[list[list[tuple[int, float]]],
                                                                                       list[float]]:
    """top_children, and the values of `riders` (0-d tensors) read in the same transfer: on a GPU each read
    waits for the device, so a round reads what it needs at once."""
    values, indices = logits.float().softmax(-1).topk(width, dim=-1)  # (K, k)
    # one transfer for all: token ids are exact in float64
    flat = torch.cat([*(rider.double().view(1) for rider in riders), indices.double().view(-1),
                      values.double().view(-1)]).tolist()
    ridden, flat = flat[: len(riders)], flat[len(riders) :]
    num_rows, k = indices.shape
    row_ids, row_values = flat[: num_rows * k], flat[num_rows * k :]
    children = [[(int(token_id), value) for token_id, value in zip(row_ids[row * k : (row + 1) * k],
                                                                   row_values[row * k : (row + 1) * k])
                 if value > 0] for row in range(num_rows)]
    return children, ridden


def grow_tree(root_logits: torch.Tensor, expand: ExpandFn, depth: int, budget: int,
              width: int = TREE_WIDTH) -> DraftTree:
    """EAGLE-2's dynamic tree from the drafter's logits at the root (1, vocab): `expand` runs the
    drafter once per level over the whole frontier. A child's score (log q along its path) never
    exceeds its parent's, so the best `budget` nodes (ties to the older node) always include their
    ancestors, and a level whose best frontier node is no better than the budget's last is not run."""
    tokens, parents, scores, probs, slots = [], [], [], [], []

    def add_children(parent: int, children: list[tuple[int, float]]) -> None:
        base = scores[parent] if parent >= 0 else 0.0
        for token_id, prob in children:
            tokens.append(token_id), parents.append(parent), probs.append(prob), slots.append(-1)
            scores.append(base + math.log(prob))

    add_children(-1, top_children(root_logits, width)[0])
    frontier = list(range(len(tokens)))
    num_forwards, num_fed = 1, 0
    for _ in range(depth - 1):
        frontier = sorted(frontier, key=lambda node: (-scores[node], node))[:width]
        worst_kept = sorted(scores, reverse=True)[budget - 1] if len(scores) >= budget else float("-inf")
        if not frontier or worst_kept >= scores[frontier[0]]:
            break  # nothing below this frontier can beat the worst of the best `budget` nodes so far
        logits = expand([tokens[node] for node in frontier], [slots[parents[node]] if parents[node] >= 0 else -1
                                                              for node in frontier])  # (K, vocab)
        num_forwards += 1
        for node in frontier:
            slots[node], num_fed = num_fed, num_fed + 1
        first_child = len(tokens)
        for node, children in zip(frontier, top_children(logits, width)):
            add_children(node, children)
        frontier = list(range(first_child, len(tokens)))
    return select_best(tokens, parents, scores, probs, slots, budget, num_forwards, root_logits.device)


def select_best(tokens: list[int], parents: list[int], scores: list[float], probs: list[float], slots: list[int],
                budget: int, num_forwards: int, device: torch.device) -> DraftTree:
    """The best `budget` nodes, in creation order (so each after its parent), parents renumbered."""
    kept = sorted(sorted(range(len(tokens)), key=lambda node: (-scores[node], node))[:budget])
    index = {node: i for i, node in enumerate(kept)}
    return DraftTree(to_device([tokens[node] for node in kept], device),
                     tuple(index[parents[node]] if parents[node] >= 0 else -1 for node in kept),
                     tuple(probs[node] for node in kept), tuple(slots[node] for node in kept), num_forwards)


def fed_path_slots(tree: DraftTree, path: tuple[int, ...]) -> list[int]:
    """The drafter's cache slots of the accepted path's nodes it fed (a prefix of the path: only fed
    nodes have children)."""
    return [tree.slots[node] for node in itertools.takewhile(lambda node: tree.slots[node] >= 0, path)]


def keep_fed_path(cache: DynamicCache, start: int, tree: DraftTree, path: tuple[int, ...]) -> None:
    """A drafter's own cache after a tree round: the text (`start` positions), then the accepted path's
    entries it computed while drafting, moved behind the text; the other branches dropped."""
    slots = fed_path_slots(tree, path)
    move_cache_positions(cache, [start + slot for slot in slots], start)
    crop_cache(cache, start + len(slots))
