"""Step mode's run: speculative decoding held between presses (`StepRun`); each press runs one real
round of the engine's own generator."""

from __future__ import annotations

from dataclasses import dataclass

from specviz.decoding.config import DecodeConfig, next_gamma
from specviz.decoding.engine import context_budget, speculative_decode
from specviz.decoding.events import Event, FinishEvent, PrefillEvent, RoundEvent
from specviz.models.pairs import ModelPair
from specviz.analysis.trace import Trace


@dataclass(frozen=True)
class DraftRoom:
    """What bounded one round's drafting besides the drafter itself, so step mode can say why a round
    drafted fewer than γ instead of guessing."""

    gamma: int  # the configured γ
    planned: int  # the γ the schedule planned for this round (config.gamma unless "heuristic")
    room: int  # drafts the run's remaining budget left room for: a round yields up to γ + 1 tokens
    limit: int  # new tokens the run may produce
    limit_is_context: bool  # that limit is the models' context length, not max new tokens
    threshold: float  # "draft only while sure" (DecodeConfig.draft_confidence); 0 = off

    def fewer_cause(self, event: RoundEvent) -> str:
        """Why `event` drafted fewer than planned: "unsure" (the confidence stop, which a round with
        rival guesses also counts), "limit" or "context" (no room before the run's end), "schedule"
        (the heuristic schedule planned fewer than γ), "drafter" (it found no more: prompt lookup's
        copied stretch ended); "" where it drafted all it was asked."""
        wanted = max(self.gamma, self.planned)
        if event.gamma >= wanted:
            return ""
        if event.stopped_unsure:
            return "unsure"
        if event.gamma < min(self.planned, self.room):
            return "drafter"
        if self.room < self.planned:
            return "context" if self.limit_is_context else "limit"
        return "schedule"


class StepRun:
    """Speculative decoding held between presses: each `advance` runs exactly one real round of the engine's own
    generator, with the same seed, drafter and rule as a normal run, so the text ends up the same."""

    def __init__(self, pair: ModelPair, prompt_ids: list[int], config: DecodeConfig):
        self.events = speculative_decode(pair, prompt_ids, config)
        self.budget = context_budget(pair, len(prompt_ids), config)  # raises the prompt's message early
        self.config = config
        self.eos_id = pair.eos_id if config.stop_at_eos else None
        self.trace = Trace(lane="speculative")
        self.num_taken = 0  # the engine's events taken so far (a resume replays as many)

    @property
    def done(self) -> bool:
        return self.trace.done

    def start(self) -> list[Event]:
        """The prefill: both models read the prompt, the target samples token 1 (and an EOS ends it)."""
        return self.take(PrefillEvent)

    def advance(self) -> list[Event]:
        """One round; and the finish too when that round ended the run (so no press is wasted on it)."""
        if self.done:
            return []
        events = self.take(RoundEvent)
        if not self.done and self.round_ended_run():
            events += self.take(FinishEvent)  # the engine's loop has ended: no model work here
        return events

    def round_ended_run(self) -> bool:
        last = self.trace.rounds[-1] if self.trace.rounds else None
        hit_eos = last is not None and self.eos_id is not None and self.eos_id in last.emitted_ids
        return hit_eos or self.trace.num_tokens >= self.budget

    def take(self, kind: type) -> list[Event]:
        """Events up to the first of `kind` (or the finish), each added to the trace."""
        taken = []
        for event in self.events:
            self.num_taken += 1
            self.trace.add(event)
            taken.append(event)
            if isinstance(event, (kind, FinishEvent)):
                break
        return taken

    def draft_room(self, event: RoundEvent) -> DraftRoom:
        """What bounded `event`'s drafting: the engine's own rules (next_gamma, the budget) replayed
        over the rounds before it."""
        planned = self.config.gamma
        for earlier in self.trace.rounds[: event.round_index]:
            planned = next_gamma(self.config, planned, earlier.gamma, earlier.num_accepted)
        return DraftRoom(self.config.gamma, planned, self.budget - event.position - 1, self.budget,
                         self.budget < self.config.max_new_tokens, self.config.draft_confidence)

    @property
    def is_live(self) -> bool:
        """Whether the engine's generator is here: a run that crossed a process (pickled) comes without it."""
        return "events" in self.__dict__

    def resume(self, pair: ModelPair, prompt_ids: list[int]) -> None:
        """The engine's generator again, at the event the trace has reached: the rounds so far run again, with the
        same seed and the same call shapes, so they decide what they decided (ZeroGPU runs each press in a
        worker that may not be the last one's)."""
        self.events = speculative_decode(pair, prompt_ids, self.config)
        for _ in range(self.num_taken):
            next(self.events)

    def __getstate__(self) -> dict:
        return {name: value for name, value in self.__dict__.items() if name != "events"}

    def close(self) -> None:
        if self.is_live:
            self.events.close()
