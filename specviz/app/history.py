"""The runs a visitor has made on the page so far, so the spread of one run's speedup is in plain sight.

No gradio here. Each finished live run leaves one small `RunRecord` (its speedup, γ, drafter, token
counts, whether the lanes wrote the same text, and a key naming its setup); runs of one setup are
repeats, and their speedups are the verdict's band once there are enough (payoff.MIN_REPEATS).
Kept in the visitor's session on the page (a gr.State the run and the sweep read and write back), bounded, so a
long visit stays small. Not in the server's memory: on a ZeroGPU Space the run goes on in a forked worker, and a
store there is the worker's, forgotten whenever ZeroGPU forks a new one. Replays are not kept: they repeat a
recorded clock, not a new one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from specviz.analysis.payoff import Payoff
from specviz.app.render.lanes import RunView
from specviz.app.render.verdict import same_text
from specviz.analysis.trace import speedup

RUNS_KEPT = 40  # per session: the table and the chart stay readable, and memory stays bounded
# Settings that do not change what a run measures: the seed only picks the sample (and greedy runs need none
# to repeat); the others are the machine's own, the same for every run on it.
NOT_SETUP = ("seed", "device", "exactness", "bitwise_verify", "int8_drafters")


@dataclass(frozen=True)
class RunRecord:
    """One finished run as the table and the dot chart show it."""

    number: int  # 1, 2, … in this session
    speedup: float  # speculative tokens/s over the target alone's
    gamma: int
    drafter: str
    temperature: float
    num_baseline_tokens: int
    num_speculative_tokens: int
    same_text: bool  # both lanes wrote the same tokens: the speed compares like for like
    prompt_text: str
    setup: str  # what makes two runs repeats of each other: prompt, pair and settings but the seed
    tree: int = 0  # the draft tree's budget; 0: a chain (a tree of 8 and a chain of one γ time very differently)

    @property
    def tokens_text(self) -> str:
        if self.same_text:
            return str(self.num_baseline_tokens)
        return f"{self.num_baseline_tokens} / {self.num_speculative_tokens}"


# What a γ sweep varies (its runs are of one setup but these), and the reference lane, which it never times.
SWEPT = ("gamma", "tree", "reference")


def setup_key(run: RunView) -> str:
    greedy = not run.settings.get("temperature")
    settings = {name: value for name, value in run.settings.items()
                if name not in NOT_SETUP or (name == "seed" and not greedy)}
    return json.dumps([run.prompt_text, run.chat, settings], sort_keys=True, default=str)


def sweep_key(prompt_text: str, settings: dict) -> str:
    """The setup a γ sweep measured, and that a run has: the prompt and the settings but γ, the tree budget, the
    reference lane and the seed (a sweep repeats its runs with their own draws)."""
    kept = {name: value for name, value in settings.items() if name not in (*NOT_SETUP, *SWEPT)}
    return json.dumps([prompt_text, kept], sort_keys=True, default=str)


@dataclass(frozen=True)
class SweepRecord:
    """A finished γ sweep: the setup it measured and its one verdict, so a run of that setup quotes its γ."""

    setup: str  # sweep_key
    payoff: Payoff


def record_of(run: RunView, number: int) -> RunRecord | None:
    """The run's record, or None for a run without both lanes finished."""
    baseline, speculative = run.baseline.trace, run.speculative.trace
    if not (run.has_lane("speculative") and baseline.done and speculative.done and baseline.rounds):
        return None
    return RunRecord(number, speedup(baseline, speculative), run.gamma, str(run.settings.get("drafter", "")),
                     float(run.settings.get("temperature", 0) or 0), baseline.num_tokens, speculative.num_tokens,
                     same_text(run), run.prompt_text, setup_key(run), int(run.settings.get("tree", 0) or 0))


@dataclass
class SessionRuns:
    """One visitor's runs so far, oldest first, and their last finished sweep."""

    records: list[RunRecord] = field(default_factory=list)
    numbered: int = 0  # runs numbered so far: the oldest drop out of `records`, the numbers go on
    sweep: SweepRecord | None = None

    def add(self, run: RunView) -> RunRecord | None:
        """Keep a finished run; returns its record (None when it had no speed to keep)."""
        record = record_of(run, self.numbered + 1)
        if record is None:
            return None
        self.numbered += 1
        self.records.append(record)
        del self.records[:-RUNS_KEPT]
        return record

    def runs(self) -> list[RunRecord]:
        return list(self.records)

    def sweep_of(self, run: RunView) -> Payoff | None:
        """The verdict of the last sweep where it measured this run's setup (its prompt and settings but γ)."""
        sweep = self.sweep
        return sweep.payoff if sweep is not None and sweep.setup == sweep_key(run.prompt_text, run.settings) else None


def repeats_of(runs: list[RunRecord], record: RunRecord) -> tuple[float, ...]:
    """Speedups of the runs of the record's setup that wrote the same text in both lanes, the record's own too."""
    if not record.same_text:
        return ()
    return tuple(run.speedup for run in runs if run.setup == record.setup and run.same_text)

