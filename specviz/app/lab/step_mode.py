"""Step mode: speculative decoding held between presses (`StepRun`); each press runs one real
round of the engine's own generator."""

from __future__ import annotations

from specviz.decoding.engine import DecodeConfig, context_budget, speculative_decode
from specviz.decoding.events import Event, FinishEvent, PrefillEvent, RoundEvent
from specviz.models.pairs import ModelPair
from specviz.analysis.trace import Trace


class StepRun:
    """Speculative decoding held between presses: each `advance` runs exactly one real round.

    The engine's generator does the work; holding it and calling next() once per press is one
    round, with the same seed, drafter and rule as a normal run, so the text ends up the same.
    """

    def __init__(self, pair: ModelPair, prompt_ids: list[int], config: DecodeConfig):
        self.events = speculative_decode(pair, prompt_ids, config)
        self.budget = context_budget(pair, len(prompt_ids), config)  # raises the prompt's message early
        self.eos_id = pair.eos_id if config.stop_at_eos else None
        self.trace = Trace(lane="speculative")

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
            self.trace.add(event)
            taken.append(event)
            if isinstance(event, (kind, FinishEvent)):
                break
        return taken

    def close(self) -> None:
        self.events.close()
