"""Draft trees: exact acceptance on a tree (sampling.accept_tree) against the exact distribution.

A toy Markov target over a few tokens: p0 at the root, then p(· | previous token). A tree round emits
its accepted path and the correction or bonus; the joint of the first two emitted tokens must be
p0(a)·p(b | a), with the children picked deterministically (top-k, one-hot q) and sampled from q
(SpecInfer's rule). A deliberately wrong rule is caught each time, so the tests have teeth.
"""

from __future__ import annotations

import numpy as np
import torch

import specviz.decoding.sampling as sampling
from specviz.decoding.sampling import accept_tree
from tests.test_sampling import SIGNIFICANCE, chi_square_p_value, p_instead_of_residual

VOCAB = 6
NUM_DRAWS = 12000


def toy_markov(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(p0 (V,), transitions (V, V)) drawn from a Dirichlet: no zeros, no ties."""
    torch.manual_seed(seed)
    rows = torch.distributions.Gamma(torch.full((VOCAB + 1, VOCAB), 0.8), 1.0).sample()  # (V+1, V)
    rows = rows / rows.sum(-1, keepdim=True)
    return rows[0], rows[1:]


P0, TRANSITIONS = toy_markov(1)
Q0, Q_TRANSITIONS = toy_markov(2)  # the draft: another Markov chain, often wrong


def target_rows(node_ids: list[int]) -> torch.Tensor:
    """(1+N, V): p at the root, then p after each node (a Markov target looks at the last token only)."""
    return torch.stack([P0, *(TRANSITIONS[token] for token in node_ids)])


def first_two_emitted(node_ids: list[int], parents: tuple[int, ...], draft_probs, generator) -> int:
    """One tree round (and, if it emitted one token only, the next round's plain target token): the
    first two emitted tokens as one cell index a·V + b."""
    verdict = accept_tree(torch.tensor(node_ids), parents, draft_probs, target_rows(node_ids), generator)
    emitted = [node_ids[node] for node in verdict.path] + [verdict.next_id]
    if len(emitted) == 1:
        emitted.append(int(sampling.sample(TRANSITIONS[emitted[0]].unsqueeze(0), generator)))
    return emitted[0] * VOCAB + emitted[1]


def exact_joint() -> np.ndarray:
    return (P0[:, None] * TRANSITIONS).double().numpy().ravel()  # (V·V,)


# Deterministic children (the drafter's top-k, as EAGLE-2 picks them): a fixed tree, likeliest first.
FIXED_IDS = [int(i) for i in Q0.argsort(descending=True)[:3]]  # depth 1: three children of the root
FIXED_TREE_IDS = FIXED_IDS + [int(Q_TRANSITIONS[FIXED_IDS[0]].argmax()), int(Q_TRANSITIONS[FIXED_IDS[0]].argsort()[-2]),
                              int(Q_TRANSITIONS[FIXED_IDS[1]].argmax())]
FIXED_PARENTS = (-1, -1, -1, 0, 0, 1)


def deterministic_draws(num_draws: int) -> list[int]:
    generator = torch.Generator().manual_seed(0)
    return [first_two_emitted(FIXED_TREE_IDS, FIXED_PARENTS, None, generator) for _ in range(num_draws)]


def sampled_tree(generator: torch.Generator) -> tuple[list[int], tuple[int, ...], torch.Tensor]:
    """Three children of the root drawn i.i.d. from q0, two under each of the first two drawn from q
    after it (duplicates allowed, as the rule requires): ids, parents, each node's q (N, V)."""
    roots = sampling.sample(Q0.expand(3, VOCAB), generator).tolist()
    node_ids, parents, qs = list(roots), [-1, -1, -1], [Q0] * 3
    for parent in (0, 1):
        q = Q_TRANSITIONS[roots[parent]]
        node_ids += sampling.sample(q.expand(2, VOCAB), generator).tolist()
        parents += [parent, parent]
        qs += [q, q]
    return node_ids, tuple(parents), torch.stack(qs)


def sampled_draws(num_draws: int) -> list[int]:
    generator = torch.Generator().manual_seed(0)
    return [first_two_emitted(*sampled_tree(generator), generator) for _ in range(num_draws)]


def test_deterministic_children_follow_the_target():
    assert chi_square_p_value(deterministic_draws(NUM_DRAWS), exact_joint()) > SIGNIFICANCE


def test_deterministic_children_without_renormalising_are_caught(monkeypatch):
    """Trying the next child against the untouched p (no p′(x) := 0) over-emits the tried tokens."""
    monkeypatch.setattr(sampling, "without_token", lambda probs, token_id: probs)
    assert chi_square_p_value(deterministic_draws(NUM_DRAWS // 2), exact_joint()) < SIGNIFICANCE


def test_sampled_children_follow_the_target():
    assert chi_square_p_value(sampled_draws(NUM_DRAWS), exact_joint()) > SIGNIFICANCE


def test_sampled_children_with_the_wrong_residual_are_caught(monkeypatch):
    monkeypatch.setattr(sampling, "residual_distribution", p_instead_of_residual)
    assert chi_square_p_value(sampled_draws(NUM_DRAWS // 2), exact_joint()) < SIGNIFICANCE


def test_greedy_takes_the_longest_path_of_the_targets_own_picks():
    """One-hot p: the walk follows the target's argmax wherever a child has it, whatever the order."""
    ids = [3, 1, 2, 4, 5, 0]
    parents = (-1, -1, 0, 1, 1, 4)
    target = torch.zeros(7, VOCAB)
    target[0, 1] = 1  # root → 1 (node 1, the second child)
    target[2, 5] = 1  # after node 1 → 5 (node 4)
    target[5, 0] = 1  # after node 4 → 0 (node 5, a leaf)
    target[6, 2] = 1  # after the leaf: bonus 2
    target[[1, 3, 4], 0] = 1
    verdict = accept_tree(torch.tensor(ids), parents, None, target, torch.Generator().manual_seed(0))
    assert verdict.path == (1, 4, 5) and verdict.next_id == 2 and verdict.is_bonus
    target[5, 0], target[5, 3] = 0, 1  # after node 4 the target wants 3, which no child offers
    verdict = accept_tree(torch.tensor(ids), parents, None, target, torch.Generator().manual_seed(0))
    assert verdict.path == (1, 4) and verdict.next_id == 3 and not verdict.is_bonus
    assert torch.isnan(verdict.accept_probs[2])  # under the rejected node 0: never examined
    assert verdict.accept_probs.tolist()[:2] == [0, 1] and verdict.accept_probs[3] == 0  # node 3: tried, not the pick
