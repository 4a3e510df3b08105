"""Hand-made rounds for tests, written as the engine stores them: as nodes (RoundEvent.nodes).

A chain is a linear tree (each draft below the one before), rival guesses a one-level tree (every guess below the
last committed token, surest first); the target's own token hangs below the last accepted draft. `draft` and
`guess` write one node with the figures a test cares about; `chain` and `rivals` place them.
"""

from __future__ import annotations

from dataclasses import replace

from specviz.decoding.events import TokenKind, TreeNode


def draft(token_id: int, q: float, p: float, r: float, verdict: TokenKind, accept_prob: float | None = None,
          draft_confidence: float | None = None, target_confidence: float | None = None) -> TreeNode:
    """A chain's draft: drawn with probability q, p under the target, accepted iff r < min(1, p / q) (unless told)."""
    chance = min(1.0, p / q) if accept_prob is None else accept_prob
    return TreeNode(token_id, -1, 1, q, verdict, p, chance, r, draft_confidence, target_confidence)


def guess(token_id: int, sure: float, p: float, verdict: TokenKind, r: float | None = None,
          target_confidence: float | None = None) -> TreeNode:
    """A rival guess for the round's first position: the drafter `sure` of it (its top probability is its q), p
    under the target; greedy, so the target takes it iff it is its own pick (p = 1). `r`: where one was drawn."""
    judged = (p, r) if verdict != "unexamined" else (None, None)
    return TreeNode(token_id, -1, 1, sure, verdict, p, *judged, draft_confidence=sure,
                    target_confidence=target_confidence)


def own(drafts: list[TreeNode], next_id: int, next_kind: TokenKind) -> TreeNode:
    """The target's own token (a resample or a bonus), below the last draft it accepted."""
    depth = 1 + max((node.depth for node in drafts if node.verdict == "accepted"), default=0)
    parent = max((i for i, node in enumerate(drafts) if node.verdict == "accepted" and node.depth == depth - 1),
                 default=-1)
    return TreeNode(next_id, parent, depth, 0.0, next_kind)


def chain(*drafts: TreeNode, then: tuple[int, TokenKind] | None = None) -> tuple[TreeNode, ...]:
    """Drafts as a chain's linear tree, then the target's own token (`then`: its id and kind) where it was kept."""
    nodes = [replace(node, parent=i - 1, depth=i + 1) for i, node in enumerate(drafts)]
    return tuple(nodes + ([own(nodes, *then)] if then else []))


def rivals(*guesses: TreeNode, then: tuple[int, TokenKind] | None = None) -> tuple[TreeNode, ...]:
    """Guesses for one position as a one-level tree, surest first as the drafter stores them, then the target's own
    token (a bonus below the guess it took, or the resample where it took none)."""
    nodes = sorted(guesses, key=lambda node: -(node.draft_confidence or 0.0))
    return tuple(nodes + ([own(nodes, *then)] if then else []))
