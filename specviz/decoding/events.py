"""The one stream every consumer reads: small, frozen, tensor-free events.

Plain Python values only (the engine calls `.tolist()` once per round), so the UI, the CLI, the benchmark
and the tests can keep, compare and serialise them to JSON without touching torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Iterator, Literal, NamedTuple, Sequence, Union

# A lane's name tags each of its events: "baseline" (the target alone), "speculative" (ours),
# "reference" (transformers' generate); a run may hold any number of lanes.
Lane = str
# How the target's own token of a round came about: the baseline's plain sample, the correction at
# the first rejection, or the extra token after a fully accepted draft.
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
    """One drafted token and its verdict (Leviathan: q = draft, p = target), as a round's chain view tells it
    (RoundEvent.drafted, derived from its nodes)."""

    token_id: int
    draft_prob: float  # q(x): probability the draft gave the token it proposed
    target_prob: float  # p(x): probability the target gives the same token
    accept_prob: float  # min(1, p(x) / q(x))
    r: float  # the uniform draw; accepted iff r < accept_prob
    accepted: bool  # verdict as decided, left to right (False after the first rejection too)
    decided: bool  # False for drafts after the first rejection: never examined
    draft_confidence: float | None = None  # the draft model's top probability here (T = 1); None: no model
    target_confidence: float | None = None  # the target's top probability here (T = 1): how sure it was


@dataclass(frozen=True)
class TreeNode:
    """One node of a round's draft tree (every round is one: a chain a linear tree, rival guesses a one-level
    tree), or the target's own token below the kept path."""

    token_id: int
    parent: int  # index into RoundEvent.nodes of its parent; -1: the last committed token
    depth: int  # 1 for a child of the last committed token
    # the drafter's probability of it after its parent: the q a chain's draft was sampled from; a picked node's (a
    # tree's, a rival guess) at temperature 1; 0 for the target's token
    draft_prob: float
    # accepted / rejected (tried and failed) / unexamined (never tried: an ancestor or an earlier sibling
    # decided first; or accepted after an accepted end-of-text, which ended the text) for a drafted node;
    # resample (the target's pick where every child failed) or bonus (after a fully accepted path) for the
    # target's own token, the last entry.
    verdict: TokenKind
    # p(x) at its parent's row: the one verify computes it for every drafted node. None for the target's token.
    target_prob: float | None = None
    # The chance it was accepted with (p′(x), after the siblings tried before it) and the r drawn, where the rule
    # computed them: a tree's tried nodes; every draft of a chain (its rule draws all of them at once). None otherwise.
    accept_prob: float | None = None
    r: float | None = None
    # How sure each model was here, at temperature 1: the drafter's top probability at a chain's position (a picked
    # node's own probability); the target's top probability at the parent's row. None: no model, or not recorded.
    draft_confidence: float | None = None
    target_confidence: float | None = None


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
    """One round: the nodes one target forward verified (none for the baseline), and what the target kept."""

    lane: Lane
    round_index: int  # 0-based, prefill not counted
    position: int  # number of new tokens generated before this round
    gamma: int  # the chain's length as told (`drafted`): ≤ the configured γ near max_new_tokens / context
    # Every drafted node the verify fed, parents before children, then the target's own token below the kept path
    # where it was kept (none when an accepted end-of-text ended the text). Empty when nothing was drafted.
    nodes: tuple[TreeNode, ...]
    num_accepted: int
    next_id: int  # the target's token: resample or bonus (speculative), plain sample (baseline)
    next_kind: NextKind
    emitted_ids: tuple[int, ...]  # accepted drafts + next_id, cut after an EOS
    draft_s: float  # seconds drafting (draft forwards + draft sampling)
    verify_s: float  # seconds verifying (target forward + accept/resample + cache rollback)
    num_draft_forwards: int
    num_target_forwards: int
    details: tuple[PositionDetail, ...] | None = None  # per position of `drafted` (+1 for a bonus)
    stopped_unsure: bool = False  # the drafter stopped before γ: its confidence fell below the threshold
    # What the round drafted: a chain; an unsure first draft with the drafter's next guesses beside it
    # (DecodeConfig.rivals, greedy), a one-level tree; or a tree (DecodeConfig.tree).
    shape: RoundShape = "chain"

    @staticmethod
    def judged_nodes(nodes: tuple[TreeNode, ...] | list[TreeNode], shape: RoundShape) -> list[int]:
        """The nodes told as a chain (`drafted`): a chain's every draft; for a tree or rival guesses, the path the
        rule accepted (r < its accept chance: an accepted node after an end-of-text is shown unexamined), then the
        first child below it (the first the walk rejected there), if any."""
        drafted = [i for i, node in enumerate(nodes) if node.verdict not in ("resample", "bonus")]
        if shape == "chain":
            return drafted
        path = [i for i in drafted if nodes[i].verdict == "accepted" or
                (None not in (nodes[i].r, nodes[i].accept_prob) and nodes[i].r < nodes[i].accept_prob)]
        below = path[-1] if path else -1
        return path + [i for i in drafted if nodes[i].parent == below][:1]

    # Derived once per event (the lanes ask for them at every redraw); a frozen dataclass keeps them in __dict__,
    # outside its fields, so equality, asdict and the saved JSON see only the nodes.
    @cached_property
    def drafted(self) -> tuple[DraftedToken, ...]:
        """The round told as a chain, for the lanes: a chain's every draft (those after a rejection unexamined);
        a tree's or rival round's kept path, then the child rejected below it. A picked node's q is one-hot."""
        return tuple(
            DraftedToken(node.token_id, node.draft_prob if self.shape == "chain" else 1.0, node.target_prob,
                         node.accept_prob, node.r, index < self.num_accepted, index <= self.num_accepted,
                         node.draft_confidence, node.target_confidence)
            for index, node in enumerate(self.nodes[i] for i in self.judged_nodes(self.nodes, self.shape)))

    @cached_property
    def guesses(self) -> tuple[DraftedToken, ...]:
        """A rival round's guesses in the drafter's own order (surest first, as its nodes are stored), the one the
        target took marked accepted, each with p at the first row; () in any other round."""
        if self.shape != "rivals":
            return ()
        return tuple(DraftedToken(node.token_id, 1.0, node.target_prob, node.target_prob, 0.0,
                                  node.verdict == "accepted" and self.num_accepted > 0, True, node.draft_confidence,
                                  node.target_confidence)
                     for node in self.nodes if node.verdict not in ("resample", "bonus"))

    @property
    def taken_guess(self) -> int | None:
        """Which of `guesses` the target took (0: the drafter's first pick); None where it took none."""
        return next((i for i, token in enumerate(self.guesses) if token.accepted), None)

    @property
    def shown_guess(self) -> int:
        """Which of `guesses` the lanes tell as the round's first draft (`drafted[0]`): the one the target took,
        else the drafter's first pick."""
        return self.taken_guess or 0

    @property
    def is_tree(self) -> bool:
        """A round that drafted a tree (DecodeConfig.tree > 0): its nodes are drawn as one, not told as a chain."""
        return self.shape == "tree" and bool(self.nodes)

    @property
    def num_examined(self) -> int:
        """Drafts the target judged: the accepted prefix plus the first rejection, if any (a first
        position with rivals counts once: accepted when the target took any of its guesses)."""
        return min(self.num_accepted + 1, self.gamma)

    @property
    def took_rival(self) -> bool:
        """The target took a rival guess, not the drafter's own first pick (the guess it was surest of)."""
        return self.shown_guess > 0

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

    def verdict(self, index: int) -> TokenKind:
        """accepted / rejected / unexamined for drafted token `index` (`drafted`'s), as decided left to right: a
        draft accepted after an EOS inside the same round is not emitted, so it counts as unexamined, like the drafts
        after a rejection."""
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


@dataclass(frozen=True)
class FinishEvent:
    """The lane is done."""

    lane: Lane
    stop_reason: StopReason
    num_new_tokens: int


Event = Union[PrefillEvent, RoundEvent, FinishEvent]


def model_seconds(event: Event) -> float:
    """The seconds of model work (and sampling) an event reports: a prefill's, a round's drafting and verifying."""
    if isinstance(event, PrefillEvent):
        return event.prefill_s
    if isinstance(event, RoundEvent):
        return event.draft_s + event.verify_s
    return 0.0


def take_turns(streams: Sequence[tuple[str, Iterator[Event]]]) -> Iterator[Event]:
    """The lanes' events interleaved, never computed at once: each next event comes from the unfinished lane whose
    model work so far is least (ties: the first listed), so each lane's clock runs while the others wait and a
    slow spell of a shared machine falls on all of them alike, not on whichever lane ran then. Every lane keeps its
    own caches and generator, so what it writes is what it writes alone."""
    running = dict(streams)
    spent = {lane: 0.0 for lane in running}
    try:
        while running:
            lane = min(running, key=spent.__getitem__)  # dicts keep order: min returns the first of equals
            event = next(running[lane], None)
            if event is None:  # a lane cut short (a stopped run's record) ends without a FinishEvent
                del running[lane]
                continue
            spent[lane] += model_seconds(event)
            yield event
            if isinstance(event, FinishEvent):
                del running[lane]
    finally:  # a consumer that stops early: every lane's caches go back now, not when collected
        for events in running.values():
            if hasattr(events, "close"):  # a decoder's generator: its `with` blocks end
                events.close()


EVENT_TYPES = {cls.__name__: cls for cls in (PrefillEvent, RoundEvent, FinishEvent)}


def event_to_dict(event: Event) -> dict:
    """A JSON-ready dict tagged with the event's type."""
    return {"type": type(event).__name__, **asdict(event)}


def event_from_dict(data: dict) -> Event:
    """Inverse of event_to_dict (JSON turns tuples into lists; turn them back)."""
    fields = dict(data)
    cls = EVENT_TYPES[fields.pop("type")]
    if cls is not RoundEvent:
        return cls(**fields)
    fields["emitted_ids"] = tuple(fields["emitted_ids"])
    if fields.get("details") is not None:
        fields["details"] = tuple(
            PositionDetail(*(tuple(tuple(pair) for pair in detail[key]) for key in ("draft_top", "target_top", "residual_top")),
                           detail["temperature_one"])
            for detail in fields["details"]
        )
    return cls(**{**fields, "nodes": tuple(TreeNode(**node) for node in fields["nodes"])})
