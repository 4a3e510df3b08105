"""How long the target takes to read a prompt here: measured prefills, and the estimate a page says
before a long one (a very long prompt's reading took minutes with only "Generating…" on screen).

Every live run records its target-alone lane's prefill (tokens, seconds) for its pair; a prompt is
estimated from a measured prefill near its length, per token. Reading slows per token as a prompt
grows (attention's share goes with the square of the length), so a prompt far longer than anything measured is extrapolated with a fit of a·n + b·n²
through the measurements, two short probes timed once per pair to start it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Iterable, Iterator

import torch
from transformers import DynamicCache

from specviz.decoding.engine import clock
from specviz.decoding.events import Event, PrefillEvent
from specviz.decoding.forward import forward_new_ids

PROBE_TOKENS = 256  # prompts shorter than this are read in well under a second: nothing to say
FIT_PROBES = (256, 512)  # the lengths timed once per pair before a longer prompt is extrapolated
NEAR = 1.25  # a measured prefill within this factor of a prompt's length is scaled to it per token
NOTE_ABOVE_S = 5.0  # a page says the reading time when a lane's prefill is expected to take longer
KEPT_PER_PAIR = 16  # measured prefills kept per pair (the latest)


@dataclass(frozen=True)
class PrefillEstimate:
    """What reading one prompt should cost a lane here, and the measurements it comes from."""

    num_tokens: int
    seconds: float
    measured_tokens: int  # the longest measured prefill it rests on
    measured_tokens_per_s: float  # the speed measured there
    extrapolated: bool = False  # far longer than anything measured: a fit of a·n + b·n², n tokens

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
    """Time one target prefill of these ids (a fresh cache, thrown away), as the engine's prefill runs it."""
    ids = torch.tensor([prompt_ids], device=pair.device)  # (1, n)
    with torch.inference_mode():
        started = clock(pair.device)
        forward_new_ids(pair.target, ids, DynamicCache(), pair.vocab_size, last_only=True)
        return ids.shape[1], clock(pair.device) - started


def fit_seconds(samples: list[tuple[int, float]], num_tokens: int) -> float:
    """Least squares of t = a·n + b·n² (a, b ≥ 0) through the samples, at n = num_tokens: attention's share
    grows with the square of the length (eight times the tokens took far more than eight times as long)."""
    n = [float(tokens) for tokens, _ in samples]
    t = [seconds for _, seconds in samples]
    s11, s12, s22 = (sum(x ** k for x in n) for k in (2, 3, 4))
    r1, r2 = sum(x * y for x, y in zip(n, t)), sum(x * x * y for x, y in zip(n, t))
    det = s11 * s22 - s12 * s12
    a, b = ((r1 * s22 - r2 * s12) / det, (s11 * r2 - s12 * r1) / det) if det > 0 else (r1 / s11, 0.0)
    if b < 0:
        a, b = r1 / s11, 0.0
    elif a < 0:
        a, b = 0.0, r2 / s22
    return a * num_tokens + b * num_tokens ** 2


def estimate_prefill(pair, prompt_ids: list[int]) -> PrefillEstimate:
    """How long the target should take to read these ids here: the measured prefill nearest in length, scaled
    per token; a prompt far longer than any, from a fit through them (timing FIT_PROBES once per pair); a prompt
    no longer than the last probe, timed itself."""
    key = pair_key(pair)
    num_tokens = len(prompt_ids)
    with lock:
        kept = list(measured.get(key, ()))
    near = [sample for sample in kept if num_tokens / NEAR <= sample[0] <= num_tokens * NEAR]
    if not near and num_tokens <= FIT_PROBES[-1]:
        near = [probe_prefill(pair, prompt_ids)]
        record_prefill(key, *near[0])
    if near:
        tokens, seconds = min(near, key=lambda sample: abs(sample[0] - num_tokens))
        return PrefillEstimate(num_tokens, seconds * num_tokens / tokens, tokens, tokens / seconds)
    for length in FIT_PROBES:
        if not any(tokens == length for tokens, _ in kept):
            kept.append(probe_prefill(pair, prompt_ids[:length]))
            record_prefill(key, *kept[-1])
    tokens, seconds = max(kept)
    return PrefillEstimate(num_tokens, fit_seconds(kept, num_tokens), tokens, tokens / seconds, extrapolated=True)


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
    source = (f"extrapolated from prefills measured here up to {estimate.measured_tokens:,} tokens: reading slows as "
              f"the prompt grows" if estimate.extrapolated else
              f"{estimate.measured_tokens_per_s:,.0f} tokens/s measured on a {estimate.measured_tokens:,}-token prompt here")
    return (f"Reading the prompt first: {estimate.num_tokens:,} tokens take the target about {estimate.seconds:.0f} s "
            f"in each of the {num_lanes} lanes before its first token, on this machine ({source}). "
            f"A shorter prompt starts sooner.")
