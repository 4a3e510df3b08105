"""The exactness lab's wrong rule for a tree: Medusa's typical acceptance (Cai et al. 2024, arXiv
2401.10774, §2.3.1), a rule that is used in practice and is not exact, for the learner to watch fail.

It keeps a drafted child x wherever the target finds it plausible enough, p(x) ≥ min(ε, δ·exp(−H(p))),
with no coin: the drafter's first plausible guess wins every time, so its favourite tokens come out more
often than the target would write them (the exact rule, sampling.accept_tree, keeps x with p′(x) and
renormalises p′ after each rejection). Where every child fails, the token is drawn from p, not from p′.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from specviz.decoding.sampling import TreeVerdict, node_children, sample

TYPICAL_EPSILON = 0.09  # Medusa's posterior_threshold ε: a child with p(x) ≥ ε is always plausible
TYPICAL_DELTA = 0.3  # Medusa's posterior_alpha δ: where p is flat (high entropy H) the bar is δ·exp(−H)
WRONG_TREE_WORDS = "Medusa's typical acceptance on the tree"


def plausible_bar(probs: torch.Tensor) -> float:
    """min(ε, δ·exp(−H(p))) for one row of target probabilities (vocab,)."""
    entropy = float(-(probs * probs.clamp_min(1e-30).log()).sum())
    return min(TYPICAL_EPSILON, TYPICAL_DELTA * math.exp(-entropy))


def typical_acceptance(
    node_ids: torch.Tensor,  # (N,)
    parents: Sequence[int],  # (N,)
    draft_probs: torch.Tensor | None,  # unused: typical acceptance never looks at q
    target_probs: torch.Tensor,  # (1+N, vocab)
    generator: torch.Generator,
) -> TreeVerdict:
    """Walk down the tree keeping, at each node, the first child the target finds plausible (a tree rule
    with sampling.accept_tree's signature, so the engine runs it in its place)."""
    children = node_children(parents)
    accept_probs = torch.full((node_ids.shape[0],), float("nan"))  # (N,) 1 or 0: no coin decides
    uniforms = torch.full((node_ids.shape[0],), float("nan"))  # (N,)
    token_ids = node_ids.tolist()
    path: list[int] = []
    node = -1
    while True:
        probs = target_probs[node + 1]  # (vocab,)
        bar = plausible_bar(probs)
        taken = None
        for child in children[node]:
            plausible = float(probs[token_ids[child]]) >= bar
            accept_probs[child], uniforms[child] = float(plausible), 0.5  # r < 1 keeps it, r ≥ 0 rejects it
            if plausible:
                taken = child
                break
        if taken is None:
            is_bonus = not children[node]
            next_id = int(sample(probs.unsqueeze(0), generator))  # p, not p′: the rejected guesses' mass stays in
            return TreeVerdict(tuple(path), next_id, is_bonus, accept_probs, uniforms, None if is_bonus else probs)
        path.append(taken)
        node = taken
