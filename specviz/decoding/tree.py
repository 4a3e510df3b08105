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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from transformers import DynamicCache

from specviz.decoding.describe import describe_positions, describe_rivals
from specviz.decoding.events import DraftedToken, PositionDetail, RoundEvent, TreeNode
from specviz.decoding.forward import crop_cache, move_cache_positions, node_depths, row_confidences, target_forward
from specviz.decoding.sampling import ProbsFn, TreeVerdict, accept_tree
from specviz.models.pairs import ModelPair

TREE_WIDTH = 4  # children tried per expanded node, and nodes expanded per level (EAGLE-2's top-k and K)


@dataclass(frozen=True)
class DraftTree:
    """A round's draft tree, nodes in creation order: each after its parent, siblings likeliest first."""

    node_ids: torch.Tensor  # (N,)
    parents: tuple[int, ...]  # each node's parent, -1 for a child of the last committed token
    draft_probs: tuple[float, ...]  # the drafter's probability of each node after its parent (temperature 1)
    slots: tuple[int, ...]  # where the drafter fed each node in its own cache, after the text (-1: never fed)
    num_forwards: int  # drafter forwards spent
    # A chain round's unsure first draft with its rival guesses (DecodeConfig.rivals) is this tree's one-level
    # shape, judged by the same verify and walk; its event tells it as a chain with rivals, not drawn as a tree.
    rivals: bool = False
    stopped_unsure: bool = False  # the drafter stopped before γ: its confidence fell below the threshold

    @property
    def depth(self) -> int:
        return max(node_depths(self.parents), default=0)


def empty_tree(device: torch.device) -> DraftTree:
    """No nodes, on the text's device (the verify joins node ids to the text: a CUDA run failed on a CPU one)."""
    return DraftTree(torch.empty(0, dtype=torch.long, device=device), (), (), (), 0)


# The drafter's logits (K, vocab) for a frontier: its token ids and each one's parent slot (-1: the root).
ExpandFn = Callable[[list[int], list[int]], torch.Tensor]
# The walk down a verified tree: (node ids, parents, q per node or None, target probs (1+N, vocab), generator);
# sampling.accept_tree, or in the exactness lab a deliberately wrong rule.
TreeRule = Callable[..., TreeVerdict]


def top_children(logits: torch.Tensor, width: int) -> list[list[tuple[int, float]]]:
    """The `width` likeliest tokens of each row of logits (K, vocab) at temperature 1, with their
    probabilities, likeliest first; tokens the drafter cannot propose (-inf: outside its rows) never."""
    values, indices = logits.float().softmax(-1).topk(width, dim=-1)  # (K, k)
    return [[(token_id, value) for token_id, value in zip(row_ids, row_values) if value > 0]
            for row_ids, row_values in zip(indices.tolist(), values.tolist())]


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
        if not frontier or worst_kept(scores, budget) >= scores[frontier[0]]:
            break  # nothing below this frontier can enter the best `budget` nodes
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


def worst_kept(scores: list[float], budget: int) -> float:
    """The score a node must beat to be among the best `budget` so far (-inf while fewer are drafted)."""
    return sorted(scores, reverse=True)[budget - 1] if len(scores) >= budget else float("-inf")


def select_best(tokens: list[int], parents: list[int], scores: list[float], probs: list[float], slots: list[int],
                budget: int, num_forwards: int, device: torch.device) -> DraftTree:
    """The best `budget` nodes, in creation order (so each after its parent), parents renumbered."""
    kept = sorted(sorted(range(len(tokens)), key=lambda node: (-scores[node], node))[:budget])
    index = {node: i for i, node in enumerate(kept)}
    return DraftTree(torch.tensor([tokens[node] for node in kept], dtype=torch.long, device=device),
                     tuple(index[parents[node]] if parents[node] >= 0 else -1 for node in kept),
                     tuple(probs[node] for node in kept), tuple(slots[node] for node in kept), num_forwards)


def fed_path_slots(tree: DraftTree, path: tuple[int, ...]) -> list[int]:
    """The drafter's cache slots of the accepted path's nodes it fed (a prefix of the path: only fed
    nodes have children)."""
    fed = []
    for node in path:
        if tree.slots[node] < 0:
            break
        fed.append(tree.slots[node])
    return fed


def keep_fed_path(cache: DynamicCache, start: int, tree: DraftTree, path: tuple[int, ...]) -> None:
    """A drafter's own cache after a tree round: the text (`start` positions), then the accepted path's
    entries it computed while drafting, moved behind the text; the other branches dropped."""
    slots = fed_path_slots(tree, path)
    move_cache_positions(cache, [start + slot for slot in slots], start)
    crop_cache(cache, start + len(slots))


# ---- the engine's side: draft, verify, settle, tell -------------------------------------------------

def draft_tree(drafter, ids: torch.Tensor, gamma: int, room: int, budget: int) -> DraftTree:
    """A tree of at most `budget` nodes and depth γ after the committed ids (1, n); none without room."""
    return drafter.propose_tree(ids, gamma, budget) if gamma > 0 else empty_tree(ids.device)


@dataclass(frozen=True)
class VerifiedTree:
    """A tree round once the target has judged it."""

    tree: DraftTree
    target_logits: torch.Tensor  # (1+N, vocab): the root's row, then each node's
    target_probs: torch.Tensor  # (1+N, vocab)
    verdict: TreeVerdict

    @property
    def num_drafted(self) -> int:
        return self.tree.depth  # what the γ schedule compares: the longest path it could have accepted

    def event(self, lane: str, round_index: int, position: int, emitted: list[int], draft_s: float, verify_s: float,
              inspect: bool) -> RoundEvent:
        """The round as the stream tells it: `drafted` is the chain the walk judged (the accepted path,
        then the first child it rejected below it, if any), `tree` every node with its verdict, or for rival
        guesses `rivals` the first guesses the walk did not take."""
        path, verdict = self.verdict.path, self.verdict
        judged = list(path) + self.children_of(path[-1] if path else -1)[:1]
        confidences = row_confidences(self.target_logits).tolist()  # (1+N,)
        drafted = tuple(self.drafted_token(node, node in path, confidences) for node in judged)
        return RoundEvent(
            lane=lane, round_index=round_index, position=position, gamma=len(drafted), drafted=drafted,
            num_accepted=len(path), next_id=verdict.next_id, next_kind="bonus" if verdict.is_bonus else "resample",
            emitted_ids=tuple(emitted), draft_s=draft_s, verify_s=verify_s, num_draft_forwards=self.tree.num_forwards,
            num_target_forwards=1, details=self.positions(judged) if inspect and judged else None,
            stopped_unsure=self.tree.stopped_unsure, rivals=self.rivals() if self.tree.rivals else (),
            tree=() if self.tree.rivals else self.nodes(len(emitted) > len(path)),
        )

    def positions(self, judged: list[int]) -> tuple[PositionDetail, ...]:
        """The step inspector's top-k along the judged chain: each node's row is its parent's, then the row
        after the last node (where the bonus or the correction came from)."""
        rows = [self.tree.parents[node] + 1 for node in judged] + [judged[-1] + 1]
        node_ids = self.tree.node_ids[judged]  # (γ',)
        picked = torch.nn.functional.one_hot(node_ids, self.target_probs.shape[-1]).to(self.target_probs.dtype)  # (γ', vocab)
        return describe_positions(node_ids.tolist(), picked, self.target_probs[rows], len(self.verdict.path),
                                  self.verdict.next_id, self.verdict.residual)

    def rivals(self) -> tuple[DraftedToken, ...]:
        """A rival round's first guesses the walk did not take, judged against the first row."""
        guesses = list(zip(self.tree.node_ids.tolist(), self.tree.draft_probs))
        return describe_rivals(guesses, self.verdict.path[0] if self.verdict.path else 0, self.target_probs)

    def children_of(self, node: int) -> list[int]:
        return [child for child, parent in enumerate(self.tree.parents) if parent == node]

    def drafted_token(self, node: int, accepted: bool, confidences: list[float]) -> DraftedToken:
        """A node as one judged draft: q one-hot (picked, not sampled), p at its parent's row."""
        row = self.tree.parents[node] + 1
        token_id = int(self.tree.node_ids[node])
        return DraftedToken(token_id, 1.0, float(self.target_probs[row, token_id]), float(self.verdict.accept_probs[node]),
                            float(self.verdict.uniforms[node]), accepted, True, self.tree.draft_probs[node],
                            confidences[row])

    def nodes(self, own_kept: bool) -> tuple[TreeNode, ...]:
        """Every node with its verdict, then the target's own token below the path (resample or bonus)."""
        depths, path = node_depths(self.tree.parents), self.verdict.path
        nodes = []
        accept_probs, uniforms = self.verdict.accept_probs.tolist(), self.verdict.uniforms.tolist()
        for node, (token_id, parent) in enumerate(zip(self.tree.node_ids.tolist(), self.tree.parents)):
            tried = not math.isnan(accept_probs[node])
            kind = "accepted" if node in path else "rejected" if tried else "unexamined"
            judged = (float(self.target_probs[parent + 1, token_id]), accept_probs[node], uniforms[node]) if tried else ()
            nodes.append(TreeNode(token_id, parent, depths[node], self.tree.draft_probs[node], kind, *judged))
        if own_kept:
            parent = path[-1] if path else -1
            nodes.append(TreeNode(self.verdict.next_id, parent, len(path) + 1, 0.0,
                                  "bonus" if self.verdict.is_bonus else "resample"))
        return tuple(nodes)


def verify_tree(pair: ModelPair, drafter, ids: torch.Tensor, tree: DraftTree, target_cache: DynamicCache,
                to_probs: ProbsFn, generator: torch.Generator, tree_rule: TreeRule = accept_tree) -> VerifiedTree:
    """One target forward over the last committed id and the tree's nodes, then the walk down it."""
    num_nodes = tree.node_ids.shape[0]
    verify_ids = torch.cat([ids, tree.node_ids.view(1, -1)], dim=1)  # (1, n+N)
    target_logits = target_forward(pair, drafter, verify_ids, target_cache, parents=tree.parents)[-1 - num_nodes :]
    target_probs = to_probs(target_logits.to(pair.device))  # (1+N, vocab)
    verdict = tree_rule(tree.node_ids, tree.parents, None, target_probs, generator)
    return VerifiedTree(tree, target_logits, target_probs, verdict)


def settle_tree(ids: torch.Tensor, verified: VerifiedTree, target_cache: DynamicCache,
                drafter) -> tuple[torch.Tensor, list[int]]:
    """Commit the accepted path and the next token; every cache keeps the path, behind the text.
    Returns (committed ids (1, n'), the round's new ids)."""
    path, tree = verified.verdict.path, verified.tree
    new_ids = tree.node_ids[list(path)].tolist() + [verified.verdict.next_id]
    # The verify fed node k at position n+k: a path that starts down the first children (node i at depth i+1,
    # often the whole path, always where a rival round kept the drafter's own pick) is already in place.
    in_place = next((depth for depth, node in enumerate(path) if node != depth), len(path))
    sources = [ids.shape[1] + node for node in path[in_place:]]
    move_cache_positions(target_cache, sources, ids.shape[1] + in_place)
    if drafter.reads_target and sources:
        drafter.take_positions(sources, ids.shape[1] + in_place)
    if fed_path_slots(tree, path):  # else the rollback below drops the tree's entries (rival guesses feed none)
        drafter.keep_tree_path(tree, path)
    ids = torch.cat([ids, ids.new_tensor([new_ids])], dim=1)  # (1, n')
    crop_cache(target_cache, ids.shape[1] - 1)
    drafter.rollback(ids.shape[1])
    return ids, new_ids
