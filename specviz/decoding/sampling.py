"""Pure tensor functions: logits → probabilities, and the accept/reject rule.

Temperature, top-k and top-p are applied with transformers' own logits warpers, the same ones
`generate` uses, and *identically* to draft and target logits: the exactness guarantee of
speculative sampling holds for the warped target distribution only if both sides are warped
the same way.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import torch
from transformers.generation.logits_process import (LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper,
                                                    TopPLogitsWarper)


class ProbsFn:
    """Turns raw logits (n, vocab) into sampling probabilities (n, vocab).

    Temperature 0 means greedy: the distribution is one-hot at the argmax. Greedy is then the
    limit case of the same rejection rule (accept iff the draft's token is the target's argmax),
    so one code path serves both.
    """

    def __init__(self, temperature: float, top_k: int = 0, top_p: float = 1.0):
        self.greedy = temperature == 0
        warpers = LogitsProcessorList()
        if not self.greedy:
            if temperature != 1.0:
                warpers.append(TemperatureLogitsWarper(temperature))
            if top_k > 0:
                warpers.append(TopKLogitsWarper(top_k))
            if top_p < 1.0:
                warpers.append(TopPLogitsWarper(top_p))
        self.warpers = warpers

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float()  # (n, vocab)
        if self.greedy:
            one_hot = torch.zeros_like(logits)
            return one_hot.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)  # (n, vocab)
        # The warpers ignore input_ids; transformers' signature still wants the argument.
        warped = self.warpers(None, logits)  # (n, vocab), filtered entries at -inf
        return torch.softmax(warped, dim=-1)  # (n, vocab)

    def pick(self, logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One token per row of logits (n, vocab) → (n,). Greedy: the argmax, the token `sample` draws from the
        one-hot rows __call__ builds (their CDF first reaches any x in (0, 1] there), without building them."""
        if self.greedy:
            return logits.argmax(-1)  # (n,)
        return sample(self(logits), generator)


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row: (n, vocab) → (n,), by inverting the CDF at a uniform draw.

    Exact, and cheaper than torch.multinomial on CPU at vocabulary sizes (it runs once
    per drafted token, on the hot path). With x = (1 − u)·total in (0, total], the first index
    whose cdf reaches x always has positive probability: a zero-probability token i has
    cdf[i] = cdf[i−1], so the search stops before it, and x ≤ total keeps it inside the vocabulary.
    """
    cdf = probs.cumsum(-1)  # (n, vocab)
    uniforms = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device)  # (n, 1) in [0, 1)
    return torch.searchsorted(cdf, (1.0 - uniforms) * cdf[:, -1:]).squeeze(-1)  # (n,)


def residual_distribution(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p − q)): what the target wants that the draft over-proposed away from.

    Falls back to p when the residual has no mass (p == q up to rounding), which only happens
    where a rejection had probability ~0 anyway.
    """
    residual = (target_probs - draft_probs).clamp_min(0.0)  # (vocab,)
    total = residual.sum()
    if total <= 1e-12:
        return target_probs
    return residual / total


class Verdict(NamedTuple):
    """Outcome of one verification; tensors stay on the device until the engine reads them."""

    num_accepted: int
    next_id: int
    is_bonus: bool
    draft_token_probs: torch.Tensor  # (γ,) q(x_i)
    target_token_probs: torch.Tensor  # (γ,) p(x_i)
    accept_probs: torch.Tensor  # (γ,) min(1, p/q)
    uniforms: torch.Tensor  # (γ,) r_i
    residual: torch.Tensor | None  # (vocab,) the distribution the correction came from


def accept_or_resample(
    draft_ids: torch.Tensor,  # (γ,)
    draft_probs: torch.Tensor,  # (γ, vocab)
    target_probs: torch.Tensor,  # (γ+1, vocab)
    generator: torch.Generator,
) -> Verdict:
    """Leviathan et al. 2023, Algorithm 1, steps 3–4, for one sequence.

    Accept x_i while r_i < min(1, p(x_i)/q(x_i)); at the first rejection draw the correction
    from norm(max(0, p − q)) at that position; if all γ are accepted, draw a bonus token from p
    at position γ+1. The output then follows p exactly, whatever q is.
    """
    gamma = draft_ids.shape[0]
    positions = torch.arange(gamma, device=draft_ids.device)
    draft_token_probs = draft_probs[positions, draft_ids]  # (γ,)
    target_token_probs = target_probs[positions, draft_ids]  # (γ,)
    accept_probs = (target_token_probs / draft_token_probs).clamp(max=1.0)  # (γ,)
    uniforms = torch.rand(gamma, generator=generator, device=draft_ids.device)  # (γ,)
    accepted = uniforms < accept_probs  # (γ,)
    num_accepted = int(accepted.int().cumprod(0).sum())  # length of the accepted prefix
    is_bonus = num_accepted == gamma
    if is_bonus:
        residual = None
        next_id = int(sample(target_probs[gamma : gamma + 1], generator))
    else:
        residual = residual_distribution(target_probs[num_accepted], draft_probs[num_accepted])
        next_id = int(sample(residual.unsqueeze(0), generator))
    return Verdict(num_accepted, next_id, is_bonus, draft_token_probs, target_token_probs, accept_probs, uniforms,
                   residual)


def without_token(probs: torch.Tensor, token_id: int) -> torch.Tensor:
    """p′ after a deterministically drafted token was rejected: p′(x) := 0, renormalised (vocab,)."""
    rest = probs.clone()
    rest[token_id] = 0.0
    total = rest.sum()
    return rest / total if total > 1e-12 else probs  # no mass left only where x had p′(x) = 1: never rejected


class TreeVerdict(NamedTuple):
    """Outcome of one tree verification; per node (N,) arrays, NaN where a node was never examined."""

    path: tuple[int, ...]  # the accepted nodes, from depth 1 down
    next_id: int  # the correction at the first node whose children all failed, or the bonus after a leaf
    is_bonus: bool
    # (N,) p′(x) (one-hot proposals) or min(1, p′(x)/q(x)) when the node was tried; a tuple where the host decided
    accept_probs: torch.Tensor | tuple[float, ...]
    uniforms: torch.Tensor | tuple[float, ...]  # (N,) the r drawn for it
    residual: torch.Tensor | None  # (vocab,) p′ the correction came from

    @property
    def num_accepted(self) -> int:
        return len(self.path)


def accept_greedy(node_ids: Sequence[int], parents: Sequence[int], target_picks: Sequence[int],
                  chain: bool) -> TreeVerdict:
    """The verdict `accept_or_resample` (a chain) or `accept_tree` (the others) reaches at temperature 0, from the
    target's picks alone (its argmax after the last committed id, then after each node (1+N,)), read off the
    device once: p and q are one-hot there, so a draft is kept iff it is the target's pick, p′ after a
    rejected draft is p again, and the correction or the bonus is the pick where the walk stops. No coin is
    drawn, since none decides anything (r is NaN). A chain's rule judges every draft at once; a tree's walk
    only the children it tries."""
    accept_probs = [math.nan] * len(node_ids)
    if chain:
        accept_probs = [float(token_id == pick) for token_id, pick in zip(node_ids, target_picks)]
    children, path, node = node_children(parents), [], -1
    while True:
        pick = target_picks[node + 1]
        taken = next((child for child in children[node] if node_ids[child] == pick), None)
        if not chain:  # the walk tried its children in order up to the one it took
            for child in children[node][: children[node].index(taken) + 1 if taken is not None else None]:
                accept_probs[child] = float(child == taken)
        if taken is None:
            is_bonus = not children[node]
            return TreeVerdict(tuple(path), pick, is_bonus, tuple(accept_probs), (math.nan,) * len(node_ids), None)
        path.append(taken)
        node = taken


def node_children(parents: Sequence[int]) -> dict[int, list[int]]:
    """Each node's children in the tree's order (the drafter's likeliest first); -1 is the root."""
    children: dict[int, list[int]] = {-1: []}
    for node, parent in enumerate(parents):
        children.setdefault(parent, []).append(node)
        children.setdefault(node, [])
    return children


def accept_tree(
    node_ids: torch.Tensor,  # (N,)
    parents: Sequence[int],  # (N,) each node's parent, -1 for a child of the last committed token
    draft_probs: torch.Tensor | None,  # (N, vocab) the q each node was sampled from; None: picked deterministically
    target_probs: torch.Tensor,  # (1+N, vocab): row 0 at the root, row 1+i after node i
    generator: torch.Generator,
) -> TreeVerdict:
    """Multi-candidate speculative sampling down a draft tree (SpecInfer, Miao et al. 2023; EAGLE-2).

    At each node, starting at the root with p′ = p there, try its children in order. A child x picked
    deterministically (top-k, one-hot q) is accepted with probability p′(x); on rejection p′(x) := 0 and
    p′ is renormalised. A child sampled from q (siblings i.i.d. from the same q) is accepted with
    min(1, p′(x)/q(x)); on rejection p′ := norm(max(0, p′ − q)). The first accepted child becomes the
    node and the walk goes on below it; when all fail, the correction is drawn from p′, and after a leaf
    the bonus from p there. Each step emits x with exactly p(x), so the output follows p. Greedy (one-hot
    p): the longest path on which every node is the target's own pick, then the target's pick.
    """
    num_nodes = node_ids.shape[0]
    children = node_children(parents)
    accept_probs = torch.full((num_nodes,), float("nan"))  # (N,)
    uniforms = torch.full((num_nodes,), float("nan"))  # (N,)
    token_ids = node_ids.tolist()
    path: list[int] = []
    node = -1
    while True:
        probs = target_probs[node + 1]  # (vocab,) p′, starting as p at this node
        taken = None
        for child in children[node]:
            x = token_ids[child]
            q = None if draft_probs is None else draft_probs[child]  # (vocab,)
            accept = probs[x] if q is None else (probs[x] / q[x]).clamp(max=1.0)
            r = torch.rand(1, generator=generator, device=target_probs.device)[0]
            accept_probs[child], uniforms[child] = float(accept), float(r)
            if r < accept:
                taken = child
                break
            probs = without_token(probs, x) if q is None else residual_distribution(probs, q)
        if taken is None:
            is_bonus = not children[node]
            next_id = int(sample(probs.unsqueeze(0), generator))
            return TreeVerdict(tuple(path), next_id, is_bonus, accept_probs, uniforms, None if is_bonus else probs)
        path.append(taken)
        node = taken
