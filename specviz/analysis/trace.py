"""A run as data: built from the event stream, summarised into the figures people look at, and where its time went.

`Trace.from_events(decode(...))` for a finished run, or `trace.add(event)` as events arrive
(the app redraws from the trace after every event). Everything here is derived from the
events' own timings, so the UI's clock never enters a speed figure.

Where the time went: every lane starts at 0 and its blocks follow one another as the engine ran them: the
prefill, then each round's draft forwards and its target forward. The engine times a round's drafting as a whole
(`RoundEvent.draft_s`), so a round's draft forwards share it evenly; a target forward is one block of its
measured `verify_s`, so a verify that costs more than a step is drawn wider.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from typing import Iterable, Literal

from specviz.analysis import theory
from specviz.decoding.events import Event, FinishEvent, PrefillEvent, RoundEvent, event_from_dict, event_to_dict


@dataclass
class Trace:
    """One lane's run."""

    lane: str = ""
    prefill: PrefillEvent | None = None
    rounds: list[RoundEvent] = field(default_factory=list)
    finish: FinishEvent | None = None

    @classmethod
    def from_events(cls, events: Iterable[Event]) -> "Trace":
        trace = cls()
        for event in events:
            trace.add(event)
        return trace

    def add(self, event: Event) -> None:
        if isinstance(event, PrefillEvent):
            self.prefill = event
        elif isinstance(event, RoundEvent):
            self.rounds.append(event)
        elif isinstance(event, FinishEvent):
            self.finish = event
        else:
            raise TypeError(f"not an engine event: {event!r}")
        self.lane = event.lane

    # --- what was generated -------------------------------------------------------------
    @property
    def token_ids(self) -> list[int]:
        ids = [self.prefill.next_id] if self.prefill else []
        for event in self.rounds:
            ids.extend(event.emitted_ids)
        return ids

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def done(self) -> bool:
        return self.finish is not None

    # --- time (model work only, as measured by the engine) -----------------------------------
    @property
    def wall_s(self) -> float:
        prefill_s = self.prefill.prefill_s if self.prefill else 0.0
        return prefill_s + sum(event.draft_s + event.verify_s for event in self.rounds)

    @property
    def tokens_per_s(self) -> float:
        return self.num_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def timeline(self) -> list[tuple[float, int]]:
        """(seconds since start, tokens so far) after the prefill and after every round."""
        if not self.prefill:
            return []
        seconds = accumulate([self.prefill.prefill_s] + [event.draft_s + event.verify_s for event in self.rounds])
        return list(zip(seconds, accumulate([1] + [len(event.emitted_ids) for event in self.rounds])))

    # --- work done -------------------------------------------------------------------------
    @property
    def num_target_forwards(self) -> int:
        return sum(event.num_target_forwards for event in [self.prefill, *self.rounds] if event is not None)

    @property
    def num_draft_forwards(self) -> int:
        return sum(event.num_draft_forwards for event in [self.prefill, *self.rounds] if event is not None)

    @property
    def mean_draft_step_s(self) -> float:
        """Seconds per draft forward in the rounds (with its sampling), prefill excluded."""
        forwards = sum(event.num_draft_forwards for event in self.rounds)
        return sum(event.draft_s for event in self.rounds) / forwards if forwards else 0.0

    @property
    def mean_target_step_s(self) -> float:
        """Seconds per target forward in the rounds: a 1-token step for the baseline."""
        forwards = sum(event.num_target_forwards for event in self.rounds)
        return sum(event.verify_s for event in self.rounds) / forwards if forwards else 0.0

    # --- acceptance ----------------------------------------------------------------------------
    @property
    def num_drafted(self) -> int:
        return sum(event.gamma for event in self.rounds)

    @property
    def num_accepted(self) -> int:
        return sum(event.num_accepted for event in self.rounds)

    @property
    def num_examined(self) -> int:
        """Drafts the target judged, up to and including each round's first rejection; a first position with
        rivals counts once, as Leviathan's α counts a position."""
        return sum(event.num_examined for event in self.rounds)

    @property
    def acceptance_rate(self) -> float:
        """α̂: accepted drafts over drafts the target examined. Each examined draft is accepted with probability
        α (Leviathan's model), so this is the maximum-likelihood estimate the theory's formulas take."""
        return self.num_accepted / self.num_examined if self.num_examined else 0.0

    @property
    def tokens_per_target_forward(self) -> float:
        """τ over this trace alone. A tree round checks many branches in one pass and keeps one path, so τ (not
        α̂, which counts judged drafts) is what a tree raises."""
        return tokens_per_target_forward([self])

    def per_position_counts(self) -> list[tuple[int, int]]:
        """For draft position i: (accepted, examined); a draft is examined if all before it passed."""
        max_gamma = max((event.gamma for event in self.rounds), default=0)
        accepted, examined = [0] * max_gamma, [0] * max_gamma
        for event in self.rounds:
            for i in range(event.num_examined):
                examined[i] += 1
                accepted[i] += i < event.num_accepted
        return list(zip(accepted, examined))

    def per_position_acceptance(self) -> list[float]:
        """For draft position i: accepted / examined at i."""
        return [a / e if e else 0.0 for a, e in self.per_position_counts()]

    def summary(self) -> dict:
        """The lane's figures as plain values; the CLI's JSON and the app's API both report these."""
        return {
            "token_ids": self.token_ids,
            "num_tokens": self.num_tokens,
            "wall_s": self.wall_s,
            "tokens_per_s": self.tokens_per_s,
            "target_forward_passes": self.num_target_forwards,
            "draft_forward_passes": self.num_draft_forwards,
            "num_rounds": len(self.rounds),
            "tokens_per_target_forward": self.tokens_per_target_forward,
            # the same τ under its first name, for readers of reports written before it had its own
            "mean_tokens_per_round": self.tokens_per_target_forward,
            "acceptance_rate": self.acceptance_rate if self.num_drafted else None,
            "per_position_acceptance": self.per_position_acceptance(),
            "stop_reason": self.finish.stop_reason if self.finish else None,
        }

    # --- persistence -----------------------------------------------------------------------------
    def events(self) -> list[Event]:
        return [e for e in [self.prefill, *self.rounds, self.finish] if e is not None]

    def to_dict(self) -> dict:
        return {"lane": self.lane, "events": [event_to_dict(event) for event in self.events()]}

    @classmethod
    def from_dict(cls, data: dict) -> "Trace":
        trace = cls.from_events(event_from_dict(event) for event in data["events"])
        trace.lane = data.get("lane", trace.lane)
        return trace


def tokens_per_target_forward(traces: Iterable[Trace]) -> float:
    """τ, pooled over runs: the tokens the target's forwards gave after the prefill (accepted drafts plus its own
    resample or bonus) over those forwards. The prefill is left out: it gives the first token in every lane
    alike, and counting it would part τ from the formula's (1 − α^(γ+1)) / (1 − α), which counts rounds (without
    it the target alone has τ = 1 exactly)."""
    tokens = forwards = 0
    for trace in traces:
        tokens += sum(len(event.emitted_ids) for event in trace.rounds)
        forwards += sum(event.num_target_forwards for event in trace.rounds)
    return tokens / forwards if forwards else 0.0


@dataclass(frozen=True)
class Comparison:
    """Speculative lane against the baseline lane, with Leviathan's prediction beside it."""

    speedup: float  # measured: speculative tokens/s over baseline tokens/s
    acceptance_rate: float  # α̂
    cost_ratio: float  # c: draft step seconds over baseline target step seconds
    verify_cost: float  # v: seconds of a verify round over a baseline target step (Leviathan assumes 1)
    predicted_speedup: float  # Leviathan's formula at the measured α̂, c and this γ (v = 1)
    predicted_with_verify: float  # the same formula with the measured v: what this machine should give
    best_gamma: int  # the γ the formula recommends for the measured α̂, c and v
    pays: bool  # some γ beats the target alone at the measured α̂, c and v


def speedup(baseline: Trace, speculative: Trace) -> float:
    """Speculative tokens/s over baseline tokens/s (0 until the baseline has run)."""
    return speculative.tokens_per_s / baseline.tokens_per_s if baseline.tokens_per_s > 0 else 0.0


def verify_cost(baseline: Trace, speculative: Trace) -> float:
    """v: seconds of one verify over one baseline step (1 in Leviathan's model; above 1 where more tokens cost
    more)."""
    target_step_s = baseline.mean_target_step_s
    return speculative.mean_target_step_s / target_step_s if target_step_s > 0 else 1.0


def compare(baseline: Trace, speculative: Trace, gamma: int) -> Comparison:
    """Needs both lanes to have run at least one round; partial traces give running figures."""
    alpha = speculative.acceptance_rate
    target_step_s = baseline.mean_target_step_s
    cost_ratio = speculative.mean_draft_step_s / target_step_s if target_step_s > 0 else 0.0
    verify = verify_cost(baseline, speculative)
    return Comparison(
        speedup=speedup(baseline, speculative),
        acceptance_rate=alpha,
        cost_ratio=cost_ratio,
        verify_cost=verify,
        predicted_speedup=theory.expected_speedup(alpha, gamma, cost_ratio),
        predicted_with_verify=theory.expected_speedup(alpha, gamma, cost_ratio, verify),
        best_gamma=theory.best_gamma(alpha, cost_ratio, verify_cost=verify),
        pays=theory.speculation_pays(alpha, cost_ratio, verify),
    )


def first_divergence(a: Trace, b: Trace) -> int | None:
    """The first generated token where two lanes differ; None when they agree wherever both have tokens."""
    return first_divergence_of_ids(a.token_ids, b.token_ids)


def first_parting(ours: list[int], other: list[int]) -> int | None:
    """Where two greedy outputs part; a run that stops early (one EOS, not the other) parts too."""
    position = first_divergence_of_ids(ours, other)
    if position is None and len(ours) != len(other):
        return min(len(ours), len(other))
    return position


def first_divergence_of_ids(a: list[int], b: list[int]) -> int | None:
    """first_divergence for two plain lists of token ids."""
    return next((index for index, (x, y) in enumerate(zip(a, b)) if x != y), None)


# "prefill": the prompt through the model(s); "step": a target forward that checked no draft (the target
# alone, transformers' chunks, a round with nothing drafted); "verify-kept" / "verify-rejected": a verify
# whose drafts were all kept (+ bonus) or that met a rejection (+ correction); "draft-kept" / "draft-thrown":
# a draft forward whose token the text kept, or one thrown away (rejected, or never examined after a rejection).
BlockKind = Literal["prefill", "step", "verify-kept", "verify-rejected", "draft-kept", "draft-thrown"]


@dataclass(frozen=True)
class Block:
    """One forward (or the prefill) of one lane on its own clock, from 0 at the lane's start."""

    start_s: float
    duration_s: float
    kind: BlockKind
    round_index: int | None  # None: the prefill
    num_tokens: int = 0  # target blocks: the tokens it gave (the prefill: the first one)
    num_forwards: int = 1  # forwards in the block (transformers' chunks may hold several)

    @property
    def is_draft(self) -> bool:
        return self.kind.startswith("draft")


def draft_kinds(event: RoundEvent) -> list[BlockKind]:
    """Each draft forward's fate: the token it drafted was kept, or thrown away (forwards beyond the drafted
    tokens, a head's extra look-ahead, drafted nothing kept)."""
    return ["draft-kept" if index < len(event.drafted) and event.verdict(index) == "accepted" else "draft-thrown"
            for index in range(event.num_draft_forwards)]


def round_blocks(event: RoundEvent, start_s: float) -> list[Block]:
    """One round's blocks from `start_s`: its draft forwards, then its target forward."""
    blocks, clock = [], start_s
    kinds = draft_kinds(event)
    each_s = event.draft_s / len(kinds) if kinds else 0.0
    for kind in kinds:
        blocks.append(Block(clock, each_s, kind, event.round_index))
        clock += each_s
    clock += event.draft_s - each_s * len(kinds)  # drafting time with no forward (prompt lookup): no block
    target = "step" if event.gamma == 0 else "verify-kept" if event.next_kind == "bonus" else "verify-rejected"
    blocks.append(Block(clock, event.verify_s, target, event.round_index, len(event.emitted_ids),
                        event.num_target_forwards))
    return blocks


def round_start_s(trace: Trace, round_index: int) -> float:
    """Where a round starts on its lane's clock (the prefill, then every round before it)."""
    earlier = sum(event.draft_s + event.verify_s for event in trace.rounds if event.round_index < round_index)
    return (trace.prefill.prefill_s if trace.prefill else 0.0) + earlier


def lane_blocks(trace: Trace) -> list[Block]:
    """The lane's blocks in the order the engine ran them."""
    if trace.prefill is None:
        return []
    blocks = [Block(0.0, trace.prefill.prefill_s, "prefill", None, 1, trace.prefill.num_target_forwards)]
    clock = trace.prefill.prefill_s
    for event in trace.rounds:
        blocks += round_blocks(event, clock)
        clock += event.draft_s + event.verify_s
    return blocks


@dataclass(frozen=True)
class TimeSplit:
    """A lane's seconds of model work by what they were spent on."""

    prefill_s: float
    target_s: float  # the target's forwards after the prefill
    num_target: int
    draft_s: float
    num_draft: int
    thrown_draft_s: float  # draft forwards whose token was not kept

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.target_s + self.draft_s


def time_split(trace: Trace) -> TimeSplit:
    blocks = lane_blocks(trace)
    targets = [block for block in blocks if block.kind != "prefill" and not block.is_draft]
    drafts = [block for block in blocks if block.is_draft]
    return TimeSplit(
        prefill_s=sum(block.duration_s for block in blocks if block.kind == "prefill"),
        target_s=sum(block.duration_s for block in targets),
        num_target=sum(block.num_forwards for block in targets),
        draft_s=sum(event.draft_s for event in trace.rounds),
        num_draft=len(drafts),
        thrown_draft_s=sum(block.duration_s for block in drafts if block.kind == "draft-thrown"),
    )


def split_text(label: str, split: TimeSplit, drafts: bool) -> str:
    """"speculative decoding 1.10 s: prefills 0.23 s + 9 verifies of 71 ms + …"."""
    target_word = "verifies" if drafts else "steps"
    each_ms = 1000 * split.target_s / split.num_target if split.num_target else 0.0
    text = (f"{label} {split.total_s:.2f} s: {'prefills' if drafts else 'prefill'} {split.prefill_s:.2f} s + "
            f"{split.num_target} {target_word} of {each_ms:.0f} ms")
    if drafts and split.draft_s > 0:
        draft_ms = 1000 * split.draft_s / split.num_draft if split.num_draft else 0.0
        if split.num_draft:
            text += (f" + {split.num_draft} draft forwards of {draft_ms:.1f} ms "
                     f"({split.thrown_draft_s:.2f} s of them thrown away)")
        else:  # prompt lookup: drafting is a search, no forward
            text += f" + drafting without a model ({split.draft_s:.3f} s)"
    return text


def time_went_text(lanes: list[tuple[str, Trace, bool]]) -> str:
    """Where the time went, lane by lane: (label, trace, whether it drafts) for each lane that has started."""
    parts = [split_text(label, time_split(trace), drafts) for label, trace, drafts in lanes if trace.prefill]
    if not parts:
        return ""
    return "Model work, each lane on its own clock: " + "; ".join(parts) + "."
