"""How long the target takes to read a prompt here: measured prefills, and the estimate a page says
before a long one (issue 34: a 6,000-word prompt ran 288 s with only "Generating…" on screen).

Every live run records its target-alone lane's prefill (tokens, seconds) for its pair; a prompt is
estimated from the measured prefill nearest its length, per token. Before any run of the pair, one
probe prefill of the prompt's first `PROBE_TOKENS` is timed. Attention grows with the square of the
length, so a prompt much longer than the nearest measurement reads slower per token than it: the
estimate says so ("at least").
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Iterable, Iterator

import torch
from transformers import DynamicCache

from specviz.decoding.events import Event, PrefillEvent
from specviz.decoding.forward import forward_new_ids

PROBE_TOKENS = 256  # a probe reads this much of a long prompt when nothing is measured yet
NOTE_ABOVE_S = 5.0  # a page says the reading time when a lane's prefill is expected to take longer
KEPT_PER_PAIR = 16  # measured prefills kept per pair (the latest)


@dataclass(frozen=True)
class PrefillEstimate:
    """What reading one prompt should cost a lane here, and the measurement it comes from."""

    num_tokens: int
    seconds: float
    measured_tokens: int  # the length of the measured prefill it scales
    measured_tokens_per_s: float

    @property
    def at_least(self) -> bool:
        """Much longer than what was measured: attention's share grows, so this is a floor."""
        return self.num_tokens > 2 * self.measured_tokens

    @property
    def worth_saying(self) -> bool:
        return self.seconds >= NOTE_ABOVE_S


measured: dict[str, list[tuple[int, float]]] = {}  # pair key → (prompt tokens, seconds), latest last
lock = threading.Lock()


def pair_key(pair) -> str:
    """One record per loaded pair as it runs: its name, device and precision."""
    return f"{getattr(pair, 'name', 'pair')}|{getattr(pair, 'device', '')}|{getattr(pair, 'precision', '')}"


def record_prefill(key: str, num_tokens: int, seconds: float) -> None:
    if num_tokens <= 0 or seconds <= 0:
        return
    with lock:
        kept = measured.setdefault(key, [])
        kept.append((num_tokens, seconds))
        del kept[:-KEPT_PER_PAIR]


def recording_prefills(pair, events: Iterable[Event]) -> Iterator[Event]:
    """Pass a live run's events on, recording the target-alone lane's prefill (the target's alone)."""
    key = pair_key(pair)
    for event in events:
        if isinstance(event, PrefillEvent) and event.lane == "baseline":
            record_prefill(key, event.num_prompt_tokens, event.prefill_s)
        yield event


def probe_prefill(pair, prompt_ids: list[int]) -> tuple[int, float]:
    """Time one target prefill of the prompt's first PROBE_TOKENS (a fresh cache, thrown away)."""
    ids = torch.tensor([prompt_ids[:PROBE_TOKENS]], device=pair.device)  # (1, n)
    with torch.inference_mode():
        started = time.perf_counter()
        forward_new_ids(pair.target, ids, DynamicCache(), pair.vocab_size, last_only=True)
        if ids.is_cuda:
            torch.cuda.synchronize()
        return ids.shape[1], time.perf_counter() - started


def estimate_prefill(pair, prompt_ids: list[int]) -> PrefillEstimate:
    """How long the target should take to read these ids here, from the measured prefill nearest in length
    (probing once where this pair has none long enough to scale from)."""
    key = pair_key(pair)
    num_tokens = len(prompt_ids)
    with lock:
        kept = list(measured.get(key, ()))
    if not any(tokens >= min(num_tokens, PROBE_TOKENS) for tokens, _ in kept):
        kept.append(probe_prefill(pair, prompt_ids))
        record_prefill(key, *kept[-1])
    tokens, seconds = min(kept, key=lambda sample: (abs(sample[0] - num_tokens), -sample[0]))
    per_token_s = seconds / tokens
    return PrefillEstimate(num_tokens, per_token_s * num_tokens, tokens, 1 / per_token_s)


def reading_note_for(pair, prompt_ids: list[int], num_lanes: int) -> str:
    """The page's words before this prompt is read: "" for a prompt shorter than a probe (read in well under a
    second on any machine that runs these models), else `reading_note` of its estimate."""
    if len(prompt_ids) < PROBE_TOKENS:
        return ""
    return reading_note(estimate_prefill(pair, prompt_ids), num_lanes)


def reading_note(estimate: PrefillEstimate, num_lanes: int) -> str:
    """The page's words before a long prompt is read ("" when reading it is quick)."""
    if not estimate.worth_saying:
        return ""
    about = "at least" if estimate.at_least else "about"
    return (f"Reading the prompt first: {estimate.num_tokens:,} tokens take the target {about} "
            f"{estimate.seconds:.0f} s in each of the {num_lanes} lanes before its first token, on this machine "
            f"({estimate.measured_tokens_per_s:,.0f} tokens/s measured on a {estimate.measured_tokens:,}-token "
            f"prompt here). A shorter prompt starts sooner.")
