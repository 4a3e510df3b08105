"""The one stream every consumer reads: small, frozen, tensor-free events.

The engine yields these; the UI, the CLI, the benchmark and the tests consume them. Plain
Python values only (the engine calls `.tolist()` once per round), so events can be kept,
compared, and serialised to JSON without touching torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, NamedTuple, Union

# A lane's name tags each of its events: "baseline" (the target alone), "speculative" (ours),
# "reference" (transformers' generate); a run may hold any number of lanes.
Lane = str
# How the target's own token of a round came about: the baseline's plain sample ("target"),
# the correction at the first rejection ("resample"), or the extra token after a fully
# accepted draft ("bonus").
NextKind = Literal["target", "resample", "bonus"]
StopReason = Literal["max_new_tokens", "eos", "context_length", "stopped"]
RoundShape = Literal["chain", "rivals", "tree"]
# How a token is shown, everywhere (page, inspector, explainer, terminal): a draft's verdict,
# or how the target's own token came about (a plain target token, a resample, a bonus).
TokenKind = Literal["accepted", "rejected", "unexamined", "resample", "bonus", "target"]


class ShownToken(NamedTuple):
    """One token of a round as it is shown, in reading order."""

    token_id: int
    kind: TokenKind
    draft_index: int | None  # index into RoundEvent.drafted; None for the target's own tokens


@dataclass(frozen=True)
class DraftedToken:
    """One drafted token and its verdict (Leviathan: q = draft, p = target)."""

    token_id: int
    draft_prob: float  # q(x): probability the draft gave the token it proposed
    target_prob: float  # p(x): probability the target gives the same token
    accept_prob: float  # min(1, p(x) / q(x))
    r: float  # the uniform draw; accepted iff r < accept_prob
    accepted: bool  # verdict as decided, left to right (False after the first rejection too)
    decided: bool  # False for drafts after the first rejection: never examined
    draft_confidence: float | None = None  # the draft model's top probability here (T = 1); None: no model
    # The target's top probability at this position (T = 1, its plain softmax, whatever the run's sampling):
    # how sure the target was of any token here. Easy tokens are where it is sure. None: not recorded.
    target_confidence: float | None = None


@dataclass(frozen=True)
class TreeNode:
    """One node of a tree round's draft tree (DecodeConfig.tree), or the target's own token below it."""

    token_id: int
    parent: int  # index into RoundEvent.tree of its parent; -1: the last committed token
    depth: int  # 1 for a child of the last committed token
    # the drafter's probability of it after its parent: the q a chain's draft was sampled from; a picked node's (a
    # tree's, a rival guess) at temperature 1; 0 for the target's token
    draft_prob: float
    # accepted / rejected (tried and failed) / unexamined (never tried: an ancestor or an earlier sibling
    # decided first) for a drafted node; resample (the target's pick where every child failed) or bonus
    # (after a fully accepted path) for the target's own token, the tree's last entry.
    verdict: TokenKind
    # For a node the walk tried: p(x) at its parent (the target's probability, before any sibling failed),
    # the chance it was accepted with (p′(x), after the siblings tried before it) and the r drawn. None otherwise.
    target_prob: float | None = None
    accept_prob: float | None = None
    r: float | None = None


@dataclass(frozen=True)
class PositionDetail:
    """Heavy payload for the step inspector (only with DecodeConfig.inspect)."""

    draft_top: tuple[tuple[int, float], ...]  # top (id, q) at this position
    target_top: tuple[tuple[int, float], ...]  # top (id, p) at this position
    residual_top: tuple[tuple[int, float], ...]  # top of norm(max(0, p - q)); empty unless rejected here
    # True (greedy runs): the tops are each model's softmax at temperature 1, how sure it was, since the rule's q
    # and p are one-hot on each model's pick there; a draft tree's tops only over the guesses it kept. False: q, p.
    temperature_one: bool = False


@dataclass(frozen=True)
class PrefillEvent:
    """The prompt went through the model(s); the target chose the first new token."""

    lane: Lane
    num_prompt_tokens: int
    next_id: int  # the first generated token, sampled from the target
    prefill_s: float  # seconds of model work, both models' prefills for the speculative lane
    num_target_forwards: int
    num_draft_forwards: int


@dataclass(frozen=True)
class RoundEvent:
    """One round: γ drafted tokens verified by one target forward (γ = 0 for the baseline)."""

    lane: Lane
    round_index: int  # 0-based, prefill not counted
    position: int  # number of new tokens generated before this round
    gamma: int  # tokens drafted this round (≤ the configured γ near max_new_tokens / context)
    drafted: tuple[DraftedToken, ...]
    num_accepted: int
    next_id: int  # the target's token: resample or bonus (speculative), plain sample (baseline)
    next_kind: NextKind
    emitted_ids: tuple[int, ...]  # accepted drafts + next_id, cut after an EOS
    draft_s: float  # seconds drafting (draft forwards + draft sampling)
    verify_s: float  # seconds verifying (target forward + accept/resample + cache rollback)
    num_draft_forwards: int
    num_target_forwards: int
    details: tuple[PositionDetail, ...] | None = None  # per drafted position (+1 for a bonus)
    stopped_unsure: bool = False  # the drafter stopped before γ: its confidence fell below the threshold
    # Greedy rounds whose unsure first draft had rivals (DecodeConfig.rivals): the first guesses the
    # target judged in the same verify and did not take. `drafted` holds the one it followed. (The engine
    # drafts and judges them as a one-level tree, specviz.decoding.tree; the stream tells them this way.)
    rivals: tuple[DraftedToken, ...] = ()
    # Tree rounds (DecodeConfig.tree > 0): every node the one verify checked, then the target's own token;
    # `drafted` holds the chain the walk judged (the accepted path, then the child rejected below it).
    tree: tuple[TreeNode, ...] = ()

    @property
    def num_examined(self) -> int:
        """Drafts the target judged: the accepted prefix plus the first rejection, if any (a first
        position with rivals counts once: accepted when the target took any of its guesses)."""
        return min(self.num_accepted + 1, self.gamma)

    @property
    def took_rival(self) -> bool:
        """The target took a rival guess, not the drafter's own first pick (the guess it was surest of)."""
        return bool(self.rivals) and self.drafted[0].accepted and (
            self.drafted[0].draft_confidence < max(token.draft_confidence for token in self.rivals))

    @property
    def shape(self) -> RoundShape:
        """What the round drafted: a chain, an unsure first draft with its rival guesses, or a tree (nothing
        drafted: a chain of none, the baseline's step)."""
        return "tree" if self.tree else "rivals" if self.rivals else "chain"

    @property
    def nodes(self) -> tuple[TreeNode, ...]:
        """The round as the one shape every round has: each drafted node the verify fed (its parent, depth,
        verdict and, where judged, p, the accept chance and r), then the target's own token below the kept path
        where it was kept. A chain is a linear tree; a rival round a one-level tree (the guess it judged first,
        then the others); a tree round's nodes as drafted."""
        if self.tree:
            return self.tree
        if self.rivals:  # the first guesses, all children of the text: the one judged first, then the others
            guesses = (self.drafted[0], *self.rivals)
            drafted = [node_of(token, self.verdict(0) if index == 0 else "rejected", -1, 1, token.draft_confidence)
                       for index, token in enumerate(guesses)]
        else:
            drafted = [node_of(token, self.verdict(index), index - 1, index + 1, token.draft_prob)
                       for index, token in enumerate(self.drafted)]
        if len(self.emitted_ids) <= self.num_accepted or self.gamma == 0:  # an EOS cut it, or nothing was drafted
            return tuple(drafted)
        own = TreeNode(self.next_id, self.num_accepted - 1, self.num_accepted + 1, 0.0, self.own_kind)
        return (*drafted, own)

    @property
    def num_verify_rows(self) -> int:
        """Rows the round's one target forward computed: the last committed token's, then one per drafted node."""
        return 1 + sum(node.verdict not in ("resample", "bonus") for node in self.nodes)

    @property
    def num_dropped_rows(self) -> int:
        """Rows of that forward the caches drop after it: all but the committed token's and the kept drafts'."""
        return self.num_verify_rows - 1 - self.num_kept_drafts

    @property
    def num_kept_drafts(self) -> int:
        """Accepted drafts that made it into the text: an accepted EOS ends it mid-round, and the
        accepted drafts after it are dropped."""
        return min(self.num_accepted, len(self.emitted_ids))

    def verdict(self, index: int) -> str:
        """accepted / rejected / unexamined for drafted token `index`.

        A draft accepted after an EOS inside the same round is not emitted, so it counts as
        unexamined, like the drafts after a rejection.
        """
        token = self.drafted[index]
        if token.accepted:
            return "accepted" if index < self.num_kept_drafts else "unexamined"
        return "rejected" if token.decided else "unexamined"

    @property
    def own_kind(self) -> TokenKind:
        """How the target's own token(s) of this round are shown."""
        if self.gamma == 0:  # the baseline, a round with nothing drafted, a reference chunk
            return "target"
        return "resample" if self.next_kind == "resample" else "bonus"

    def shown_tokens(self) -> tuple[ShownToken, ...]:
        """Every token of the round in reading order: each draft with its verdict, then the
        target's own tokens that were kept (none when an EOS cut the round short)."""
        drafts = [ShownToken(token.token_id, self.verdict(i), i) for i, token in enumerate(self.drafted)]
        own = [ShownToken(token_id, self.own_kind, None) for token_id in self.emitted_ids[self.num_accepted :]]
        return tuple(drafts + own)


def node_of(token: DraftedToken, verdict: TokenKind, parent: int, depth: int, draft_prob: float) -> TreeNode:
    """A drafted token as a node of its round's tree, with the figures the target judged it by where it did."""
    judged = (token.target_prob, token.accept_prob, token.r) if token.decided else ()
    return TreeNode(token.token_id, parent, depth, draft_prob, verdict, *judged)


@dataclass(frozen=True)
class FinishEvent:
    """The lane is done."""

    lane: Lane
    stop_reason: StopReason
    num_new_tokens: int


Event = Union[PrefillEvent, RoundEvent, FinishEvent]


EVENT_TYPES = {cls.__name__: cls for cls in (PrefillEvent, RoundEvent, FinishEvent)}


def event_to_dict(event: Event) -> dict:
    """A JSON-ready dict tagged with the event's type."""
    return {"type": type(event).__name__, **asdict(event)}


def event_from_dict(data: dict) -> Event:
    """Inverse of event_to_dict (JSON turns tuples into lists; turn them back)."""
    fields = dict(data)
    cls = EVENT_TYPES[fields.pop("type")]
    if cls is RoundEvent:
        fields["drafted"] = tuple(DraftedToken(**token) for token in fields["drafted"])
        fields["rivals"] = tuple(DraftedToken(**token) for token in fields.get("rivals", ()))
        fields["tree"] = tuple(TreeNode(**node) for node in fields.get("tree", ()))
        fields["emitted_ids"] = tuple(fields["emitted_ids"])
        if fields.get("details") is not None:
            fields["details"] = tuple(
                PositionDetail(*(tuple(tuple(pair) for pair in detail[key]) for key in ("draft_top", "target_top", "residual_top")),
                               detail.get("temperature_one", False))  # a run saved before it was recorded: q and p
                for detail in fields["details"]
            )
    return cls(**fields)
