"""One round shape: whatever a round drafts is a DraftTree, verified by one target forward, decided, settled
and told by the same code.

  a chain         a linear tree (node i's parent is node i − 1), its drafts sampled from q
  rival guesses   a one-level tree: an unsure first draft and the drafter's next likeliest tokens there
  a tree          EAGLE-2's dynamic tree (specviz.decoding.tree), picked deterministically

The verify feeds the last committed id and the nodes (a chain causally, the others under the tree's mask),
the decision walks the rows (a chain by the paper's rule, `accept_or_resample`, whose drafts were sampled
from q; the others by `accept_tree`), and the settle keeps the accepted path in every cache. The event
stores the nodes with their verdicts and figures, whatever the shape (RoundEvent.nodes); its chain view
(`drafted`) is derived from them, and with DecodeConfig.inspect the step inspector's top-k of q, p and the
residual (`describe_positions`), as plain values every consumer of the stream reads alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from transformers import DynamicCache

from specviz.decoding.drafters import Drafter, Proposal
from specviz.decoding.events import PositionDetail, RoundEvent, TreeNode
from specviz.decoding.forward import crop_cache, move_cache_positions, node_depths, target_forward
from specviz.decoding.sampling import ProbsFn, TreeVerdict, Verdict, accept_greedy, accept_or_resample, accept_tree
from specviz.decoding.tree import DraftTree, empty_tree, fed_path_slots
from specviz.models.pairs import ModelPair
from specviz.models.slots import to_device

# A chain's decision: (draft ids (γ,), q (γ, vocab), target probs (γ+1, vocab), generator) → Verdict;
# sampling.accept_or_resample, or in the exactness lab a deliberately wrong rule.
AcceptRule = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator], Verdict]
# The walk down a tree: (node ids, parents, q per node or None, target probs (1+N, vocab), generator);
# sampling.accept_tree, or in the exactness lab a deliberately wrong rule.
TreeRule = Callable[..., TreeVerdict]
INSPECT_TOP_K = 8  # tokens shown per distribution in the step inspector


# ---- drafting: every round's drafts as a tree ----------------------------------------------------------

def chain_tree(proposal: Proposal) -> DraftTree:
    """A chain's drafts as the linear tree they are, with the q each was sampled from."""
    num_drafted = proposal.draft_ids.shape[0]
    return DraftTree(proposal.draft_ids, tuple(range(-1, num_drafted - 1)), proposal.confidences,
                     (-1,) * num_drafted, proposal.num_forwards, shape="chain", draft_rows=proposal.draft_probs,
                     stopped_unsure=proposal.stopped_unsure, draft_logits=proposal.draft_logits)


def rivals_tree(proposal: Proposal, rivals: tuple[tuple[int, float], ...]) -> DraftTree:
    """A chain round's unsure first draft and its rival guesses as the one-level tree they are: the drafter's
    own pick first, then its rivals, all children of the text's last id, each with the drafter's probability.
    The tree's verify and walk judge them (greedy: the one that is the target's own pick wins)."""
    first_id = proposal.first_id if proposal.first_id is not None else int(proposal.draft_ids[0])
    guesses = [(first_id, proposal.confidences[0]), *rivals]
    node_ids = to_device([token_id for token_id, _ in guesses], proposal.draft_ids.device)  # (1+k,)
    return DraftTree(node_ids, (-1,) * len(guesses), tuple(prob for _, prob in guesses), (-1,) * len(guesses),
                     proposal.num_forwards, shape="rivals", stopped_unsure=proposal.stopped_unsure,
                     draft_logits=proposal.draft_logits[:1] * len(guesses))  # every guess is read off the first row


def draft_chain(drafter: Drafter, ids: torch.Tensor, gamma: int, room: int) -> DraftTree:
    """Up to γ drafts after the committed ids (1, n); an unsure first draft with rival guesses becomes their
    one-level tree, its rivals cut to the `room` a round's drafts have (they take cache slots as drafts do)."""
    if gamma == 0:
        return empty_tree(ids.device, "chain")
    proposal = drafter.propose(ids, gamma)
    rivals = proposal.rivals[: max(0, room - proposal.draft_ids.shape[0])]
    return rivals_tree(proposal, rivals) if rivals else chain_tree(proposal)


def draft_branches(drafter: Drafter, ids: torch.Tensor, gamma: int, room: int, budget: int) -> DraftTree:
    """A tree of at most `budget` nodes and depth γ after the committed ids (1, n); none without room."""
    return drafter.propose_tree(ids, gamma, budget) if gamma > 0 else empty_tree(ids.device)


# ---- verify and decide ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class VerifiedRound:
    """A round once the target has judged it: the drafts, the verify's rows, the verdict."""

    tree: DraftTree
    target_logits: torch.Tensor  # (1+N, vocab): the row after the last committed id, then each node's
    target_probs: torch.Tensor | None  # (1+N, vocab); None at temperature 0, where the picks decide
    verdict: TreeVerdict
    # At temperature 0, read off the device in the verify's one transfer: the node ids (N) and the target's
    # picks (1+N), from which every figure a greedy round tells follows. None where probabilities decided.
    node_id_list: list[int] | None = None
    target_picks: list[int] | None = None

    def node_ids_on_host(self) -> list[int]:
        """The nodes' token ids as a list: the verify's copy where it read them, else one transfer."""
        return self.node_id_list if self.node_id_list is not None else self.tree.node_ids.tolist()

    def event(self, lane: str, round_index: int, position: int, emitted: list[int], draft_s: float, verify_s: float,
              inspect: bool, greedy: bool) -> RoundEvent:
        """The round as the stream tells it; built after the clock stopped, so describing costs no lane time."""
        verdict, tree, nodes = self.verdict, self.tree, self.nodes(len(emitted))
        judged = RoundEvent.judged_nodes(nodes, tree.shape)  # the chain the event tells (its `drafted`)
        return RoundEvent(
            lane=lane, round_index=round_index, position=position, gamma=len(judged), nodes=nodes,
            num_accepted=verdict.num_accepted, next_id=verdict.next_id,
            next_kind="bonus" if verdict.is_bonus else "resample", emitted_ids=tuple(emitted), draft_s=draft_s,
            verify_s=verify_s, num_draft_forwards=tree.num_forwards, num_target_forwards=1,
            details=self.positions(judged, greedy) if inspect and judged else None, stopped_unsure=tree.stopped_unsure,
            shape=tree.shape,
        )

    def draft_probs_of(self, nodes: list[int]) -> torch.Tensor:
        """q at each of these nodes (m, vocab): what a chain sampled from, one-hot where a node was picked."""
        if self.tree.draft_rows is not None:
            return self.tree.draft_rows[nodes]
        node_ids = self.tree.node_ids[nodes]  # (m,)
        return torch.nn.functional.one_hot(node_ids, self.target_logits.shape[-1]).float()  # (m, vocab)

    def positions(self, judged: list[int], greedy: bool) -> tuple[PositionDetail, ...]:
        """The step inspector's top-k along the judged chain: each node's row is its parent's, then the row
        after the last node (where the bonus or the correction came from).

        At temperature 0 the rule's q and p are one-hot on each model's pick, a chart that says nothing the
        verdict does not; there the top-k are each model's softmax at temperature 1 instead, how sure it was,
        the figures the inspector's words quote."""
        rows = [self.tree.parents[node] + 1 for node in judged] + [judged[-1] + 1]
        node_ids = self.tree.node_ids[judged].tolist()
        if not greedy:
            return describe_positions(node_ids, self.draft_probs_of(judged), self.target_probs[rows],
                                      self.verdict.num_accepted, self.verdict.next_id, self.verdict.residual)
        target_sure = torch.softmax(self.target_logits[rows].float(), dim=-1)  # (m+1, vocab)
        return describe_positions(node_ids, self.draft_sure_rows(judged), target_sure, self.verdict.num_accepted,
                                  self.verdict.next_id, None, temperature_one=True)

    def draft_sure_rows(self, judged: list[int]) -> torch.Tensor:
        """How sure the drafter was at each judged node (m, vocab), its softmax at temperature 1: a chain's (or a
        rival round's) whole row; a tree's only over the guesses it kept there (the node and its siblings, each
        with its probability); a drafter without a model (it copies): one-hot on its pick."""
        tree = self.tree
        if tree.draft_logits:
            return torch.softmax(torch.cat([tree.draft_logits[node] for node in judged]).float(), dim=-1)
        if tree.draft_probs is None:
            return self.draft_probs_of(judged)
        rows = torch.zeros(len(judged), self.target_logits.shape[-1], device=self.target_logits.device)  # (m, vocab)
        node_ids = self.node_ids_on_host()  # one transfer at most, not one per sibling
        for row, node in enumerate(judged):
            for sibling, parent in enumerate(tree.parents):
                if parent == tree.parents[node]:
                    rows[row, node_ids[sibling]] = tree.draft_probs[sibling]
        return rows

    def nodes(self, num_emitted: int) -> tuple[TreeNode, ...]:
        """Every drafted node with its verdict and the figures it was judged by, then the target's own token below
        the kept path where it was kept (`num_emitted`: the round's emitted tokens, cut at an end-of-text).
        Each figure is read off the device in one transfer per kind."""
        tree, verdict = self.tree, self.verdict
        if not len(tree):
            return ()
        path, decided = verdict.path, {-1, *verdict.path}  # a node below the path (or the text) was decided if tried
        kept = set(path[:num_emitted])  # an accepted node after an accepted end-of-text: the text had ended
        rows = to_device([parent + 1 for parent in tree.parents], tree.node_ids.device)  # (N,) parents' rows
        # how sure the target was there: its top probability at temperature 1, whatever the run samples with
        target_sure = torch.softmax(self.target_logits[rows].float(), dim=-1).amax(dim=-1)  # (N,)
        node_ids = self.node_ids_on_host()
        if self.target_picks is not None:  # p is one-hot on the target's pick at the node's parent's row
            picks = self.target_picks
            target_probs = [float(token_id == picks[parent + 1]) for token_id, parent in zip(node_ids, tree.parents)]
            target_sure = target_sure.tolist()
        else:  # both figures in one transfer
            target_probs, target_sure = torch.stack([self.target_probs[rows, tree.node_ids], target_sure]).tolist()
        if tree.draft_rows is not None and self.target_picks is not None:  # greedy: q one-hot on the draft
            draft_probs = [1.0] * len(tree)
        elif tree.draft_rows is not None:  # a chain's q, what each draft was sampled from
            draft_probs = tree.draft_rows[torch.arange(len(tree), device=rows.device), tree.node_ids].tolist()
        else:  # a picked node's probability at temperature 1; a copied token's q is one-hot
            draft_probs = list(tree.draft_probs) if tree.draft_probs is not None else [1.0] * len(tree)
        accept_probs, uniforms = as_floats(verdict.accept_probs), as_floats(verdict.uniforms)
        nodes = []
        for node, (token_id, parent, depth) in enumerate(zip(node_ids, tree.parents, node_depths(tree.parents))):
            tried = not math.isnan(accept_probs[node])
            kind = ("accepted" if node in kept else "unexamined") if node in path else (
                "rejected" if tried and parent in decided else "unexamined")
            # at temperature 0 no coin is drawn (sampling.accept_greedy): r is None there
            figures = (accept_probs[node], None if math.isnan(uniforms[node]) else uniforms[node]) if tried else (None, None)
            nodes.append(TreeNode(token_id, parent, depth, draft_probs[node], kind, target_probs[node], *figures,
                                  None if tree.draft_probs is None else tree.draft_probs[node], target_sure[node]))
        if num_emitted > len(path):
            nodes.append(TreeNode(verdict.next_id, path[-1] if path else -1, len(path) + 1, 0.0,
                                  "bonus" if verdict.is_bonus else "resample"))
        return tuple(nodes)


def as_floats(values: torch.Tensor | tuple[float, ...]) -> list[float]:
    """A verdict's per-node figures as floats: a tensor's read off in one transfer, a tuple's as they are."""
    return values.tolist() if isinstance(values, torch.Tensor) else list(values)


def decide(tree: DraftTree, target_probs: torch.Tensor, generator: torch.Generator,
           accept_rule: AcceptRule = accept_or_resample, tree_rule: TreeRule = accept_tree) -> TreeVerdict:
    """The verdict on a verified round: a chain's by the paper's rule, read as the path it accepted; a tree's
    (rival guesses too) by the walk. Nothing drafted: the walk's one step, a plain sample of the target."""
    if tree.shape == "chain" and len(tree):
        verdict = accept_rule(tree.node_ids, tree.draft_rows, target_probs, generator)
        return TreeVerdict(tuple(range(verdict.num_accepted)), verdict.next_id, verdict.is_bonus,
                           verdict.accept_probs, verdict.uniforms, verdict.residual)
    rule = tree_rule if len(tree) else accept_tree  # with nothing to judge, no rule can be wrong
    return rule(tree.node_ids, tree.parents, None, target_probs, generator)


def verify_round(pair: ModelPair, drafter: Drafter, ids: torch.Tensor, tree: DraftTree, target_cache: DynamicCache,
                 to_probs: ProbsFn, generator: torch.Generator, accept_rule: AcceptRule = accept_or_resample,
                 tree_rule: TreeRule = accept_tree) -> VerifiedRound:
    """One target forward over the last committed id and the drafts, then the decision."""
    num_nodes = len(tree)
    verify_ids = torch.cat([ids, tree.node_ids.view(1, -1)], dim=1)  # (1, n+N)
    # A chain's mask is the causal one every forward has: it needs no tree layout.
    parents = () if tree.shape == "chain" else tree.parents
    target_logits = target_forward(pair, drafter, verify_ids, target_cache, parents=parents)[-1 - num_nodes :]
    if to_probs.greedy and accept_rule is accept_or_resample and tree_rule is accept_tree:
        # Decided from the target's picks in one transfer from the device (the nodes' ids ride along), where
        # building one-hot rows and walking them would read the device once per figure: the same verdict,
        # since at temperature 0 the rule compares picks. The exactness lab's wrong rules take the path below.
        target_picks = target_logits.argmax(-1)  # (1+N,)
        known = torch.cat([tree.node_ids, target_picks]).tolist()
        node_ids, picks = known[:num_nodes], known[num_nodes:]
        verdict = accept_greedy(node_ids, tree.parents, picks, chain=tree.shape == "chain")
        return VerifiedRound(tree, target_logits, None, verdict, node_ids, picks)
    target_probs = to_probs(target_logits.to(pair.device))  # (1+N, vocab)
    verdict = decide(tree, target_probs, generator, accept_rule, tree_rule)
    return VerifiedRound(tree, target_logits, target_probs, verdict)


# ---- the step inspector's figures ----------------------------------------------------------------------

def top_pairs(probs: torch.Tensor, k: int = INSPECT_TOP_K, keep: tuple[int, ...] = ()) -> tuple[tuple[int, float], ...]:
    """The k likeliest (id, probability), then any id of `keep` not among them: the tokens this
    round actually drafted and emitted, whose probabilities the inspector must always show."""
    values, indices = probs.topk(min(k, probs.shape[-1]))
    pairs = list(zip(indices.tolist(), values.tolist()))
    shown = {token_id for token_id, _ in pairs}
    pairs += [(token_id, float(probs[token_id])) for token_id in dict.fromkeys(keep) if token_id not in shown]
    return tuple(pairs)


def describe_positions(draft_ids: Sequence[int], draft_probs: torch.Tensor, target_probs: torch.Tensor,
                       num_accepted: int, next_id: int, residual: torch.Tensor | None,
                       temperature_one: bool = False) -> tuple[PositionDetail, ...]:
    """Top-k of q (draft_probs (γ, vocab)), p (target_probs (γ+1, vocab): at each drafted position, then
    after the last) and the residual where the correction was drawn, for the step inspector, always with
    the drafted token and the target's own token (next_id) at their positions. A chain passes its drafts
    as verified; a tree round the chain its walk judged, each node picked (q one-hot on it). `temperature_one`:
    the rows are each model's softmax at temperature 1, not the rule's q and p (PositionDetail)."""
    details = []
    for i in range(target_probs.shape[0]):
        keep = tuple(draft_ids[i : i + 1]) + ((next_id,) if i == num_accepted else ())
        draft_top = top_pairs(draft_probs[i], keep=keep) if i < draft_probs.shape[0] else ()
        residual_top = top_pairs(residual, keep=keep) if residual is not None and i == num_accepted else ()
        details.append(PositionDetail(draft_top, top_pairs(target_probs[i], keep=keep), residual_top, temperature_one))
    return tuple(details)


# ---- settle -------------------------------------------------------------------------------------------

def settle_round(ids: torch.Tensor, verified: VerifiedRound, target_cache: DynamicCache,
                 drafter: Drafter) -> tuple[torch.Tensor, list[int]]:
    """Commit the accepted path and the next token; every cache keeps the path, behind the text.
    Returns (committed ids (1, n'), the round's new ids)."""
    path, tree = verified.verdict.path, verified.tree
    node_ids = verified.node_ids_on_host() if path else []
    new_ids = [node_ids[node] for node in path] + [verified.verdict.next_id]
    # The verify fed node k at position n+k: a path that starts down the first children (node i at depth i+1:
    # a chain's, often a tree's whole path, always a rival round's that kept the drafter's own pick) is
    # already in place.
    in_place = next((depth for depth, node in enumerate(path) if node != depth), len(path))
    sources = [ids.shape[1] + node for node in path[in_place:]]
    move_cache_positions(target_cache, sources, ids.shape[1] + in_place)
    if drafter.reads_target and sources:
        drafter.take_positions(sources, ids.shape[1] + in_place)
    if fed_path_slots(tree, path):  # else the rollback below drops the tree's entries (chains keep their own)
        drafter.keep_tree_path(tree, path)
    ids = torch.cat([ids, to_device([new_ids], ids.device)], dim=1)  # (1, n')
    crop_cache(target_cache, ids.shape[1] - 1)
    drafter.rollback(ids.shape[1])
    return ids, new_ids
