"""A run as data: built from the event stream, summarised into the figures people look at.

`Trace.from_events(decode(...))` for a finished run, or `trace.add(event)` as events arrive
(the app redraws from the trace after every event). Everything here is derived from the
events' own timings, so the UI's clock never enters a speed figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from typing import Iterable

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
        prefill = self.prefill.num_target_forwards if self.prefill else 0
        return prefill + sum(event.num_target_forwards for event in self.rounds)

    @property
    def num_draft_forwards(self) -> int:
        prefill = self.prefill.num_draft_forwards if self.prefill else 0
        return prefill + sum(event.num_draft_forwards for event in self.rounds)

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
        """Drafts the target judged: up to and including the first rejection of each round. A
        first position with rivals counts once, as Leviathan's α counts a position: accepted when
        the target took any of its guesses."""
        return sum(event.num_examined for event in self.rounds)

    @property
    def acceptance_rate(self) -> float:
        """α̂: accepted drafts over drafts the target examined (those after a rejection are not).

        Each examined draft is accepted with probability α (Leviathan's model), so this is the
        maximum-likelihood estimate of α, the one the theory's formulas take.
        """
        return self.num_accepted / self.num_examined if self.num_examined else 0.0

    @property
    def tokens_per_target_forward(self) -> float:
        """τ: new tokens per target forward after the prefill (tokens_per_target_forward, pooled over one trace).
        A tree round checks many branches in its one pass and keeps one path, so τ (not α̂, which counts
        judged drafts) is what a tree raises."""
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
    """τ, pooled over runs: the tokens the target's forwards gave after the prefill, accepted drafts plus the
    target's own token (a resample or a bonus), over those forwards.

    The one count of it (the page's stats, the explainer, the bench, the sweep). The prefill is left out:
    its forward reads the prompt and gives the first token in every lane alike, and counting it would part τ
    from the formula's (1 − α^(γ+1)) / (1 − α), which counts rounds. Without it the target alone has τ = 1 exactly.
    """
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
    """Measured speedup: speculative tokens/s over baseline tokens/s (0 until the baseline has run)."""
    return speculative.tokens_per_s / baseline.tokens_per_s if baseline.tokens_per_s > 0 else 0.0


def verify_cost(baseline: Trace, speculative: Trace) -> float:
    """Seconds of one verify (a (γ+1)-token target forward with the accept/resample) over one
    baseline step: 1 in Leviathan's model, above 1 on a CPU, where more tokens cost more."""
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
    """Index of the first generated token where two lanes differ (a shorter lane that is a
    prefix of the other does not differ); None when they agree everywhere both have tokens."""
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
