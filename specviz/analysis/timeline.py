"""Where a lane's time went: its model work as blocks on one clock, read from the events' own timings.

Every lane starts at 0 and its blocks follow one another as the engine ran them: the prefill, then each
round's draft forwards and its target forward (a verify, or the target alone's step). The engine times a
round's drafting as a whole (`RoundEvent.draft_s`, every draft forward with its sampling), so a round's
draft forwards share it evenly here; a target forward is one block of its measured `verify_s`, so a
verify that costs more than a step is drawn wider. Plain data and plain text: the chart
(specviz.app.plots_timeline) and the page's sentence both read `lane_blocks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from specviz.analysis.trace import Trace
from specviz.decoding.events import RoundEvent

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


def target_kind(event: RoundEvent) -> BlockKind:
    if event.gamma == 0:
        return "step"
    return "verify-kept" if event.next_kind == "bonus" else "verify-rejected"


def round_blocks(event: RoundEvent, start_s: float) -> list[Block]:
    """One round's blocks from `start_s` on the lane's clock: its draft forwards, then its target forward."""
    blocks, clock = [], start_s
    kinds = draft_kinds(event)
    each_s = event.draft_s / len(kinds) if kinds else 0.0
    for kind in kinds:
        blocks.append(Block(clock, each_s, kind, event.round_index))
        clock += each_s
    clock += event.draft_s - each_s * len(kinds)  # drafting time with no forward (prompt lookup): no block
    blocks.append(Block(clock, event.verify_s, target_kind(event), event.round_index, len(event.emitted_ids),
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
    """"speculative decoding 1.10 s: prefills 0.23 s + 9 verifies of 71 ms (0.64 s) + …"."""
    target_word = "verifies" if drafts else "steps"
    each_ms = 1000 * split.target_s / split.num_target if split.num_target else 0.0
    text = (f"{label} {split.total_s:.2f} s: {'prefills' if drafts else 'prefill'} {split.prefill_s:.2f} s + "
            f"{split.num_target} {target_word} of {each_ms:.0f} ms ({split.target_s:.2f} s)")
    if drafts and split.draft_s > 0:
        draft_ms = 1000 * split.draft_s / split.num_draft if split.num_draft else 0.0
        if split.num_draft:
            text += (f" + {split.num_draft} draft forwards of {draft_ms:.1f} ms ({split.draft_s:.2f} s, "
                     f"{split.thrown_draft_s:.2f} s of it on drafts the target threw away)")
        else:  # prompt lookup: drafting is a search, no forward
            text += f" + drafting without a model ({split.draft_s:.3f} s)"
    return text


def time_went_text(lanes: list[tuple[str, Trace, bool]]) -> str:
    """Where the time went, lane by lane: (label, trace, whether it drafts) for each lane that has started."""
    parts = [split_text(label, time_split(trace), drafts) for label, trace, drafts in lanes if trace.prefill]
    if not parts:
        return ""
    return ("Where the time went (seconds of model work, each lane's own clock): " + "; ".join(parts) +
            ". A verify checks γ drafts in one target forward, so it costs more than one step but replaces several.")
