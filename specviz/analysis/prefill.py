"""How long the target takes to read a prompt here: measured prefills, and the estimate a page says before a
long one (whose reading can take minutes with nothing else on screen).

Every live run records its target-alone lane's prefill (tokens, seconds) for its pair; a prompt is estimated
from a measured prefill near its length, per token. A prompt far longer than anything measured is estimated
in two parts: the linear work, scaled per token from a short probe, and the attention, which grows with the
square of the length, timed at the length itself: fitted through two short probes instead, the square's
share would be too small to measure.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Iterable, Iterator

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from specviz.decoding.engine import clock
from specviz.decoding.events import Event, PrefillEvent
from specviz.decoding.forward import forward_new_ids

PROBE_TOKENS = 256  # prompts shorter than this are read in well under a second: nothing to say
PROBE_LONGEST = 512  # the length timed once per pair before a longer prompt is extrapolated
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
    extrapolated: bool = False  # far longer than anything measured: its attention timed at its length


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


def attention_seconds(pair, num_tokens: int) -> float:
    """What a prompt pass's attention over num_tokens costs the target here: one layer's causal SDPA, timed on
    random queries and keys of its shapes, times the layers."""
    config = pair.target.config.get_text_config()
    num_heads = config.num_attention_heads
    num_kv_heads = getattr(config, "num_key_value_heads", None) or num_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // num_heads
    dtype, device = pair.target.dtype, pair.device
    query = torch.randn(1, num_heads, num_tokens, head_dim, dtype=dtype, device=device)  # (1, H, n, D)
    key = torch.randn(1, num_kv_heads, num_tokens, head_dim, dtype=dtype, device=device)  # (1, kv, n, D)
    with torch.inference_mode():
        started = clock(device)
        F.scaled_dot_product_attention(query, key, key, is_causal=True, enable_gqa=True)
        return (clock(device) - started) * config.num_hidden_layers


def estimate_prefill(pair, prompt_ids: list[int]) -> PrefillEstimate:
    """How long the target should take to read these ids here: the measured prefill nearest in length, scaled
    per token; else a prompt no longer than PROBE_LONGEST timed itself; else, far longer than any, the linear work
    of the longest measured (its attention taken out) scaled per token, plus the attention timed at its length."""
    key = pair_key(pair)
    num_tokens = len(prompt_ids)
    with lock:
        kept = list(measured.get(key, ()))
    near = [sample for sample in kept if num_tokens / NEAR <= sample[0] <= num_tokens * NEAR]
    if not near and num_tokens <= PROBE_LONGEST:
        near = [probe_prefill(pair, prompt_ids)]
        record_prefill(key, *near[0])
    if near:
        tokens, seconds = min(near, key=lambda sample: abs(sample[0] - num_tokens))
        return PrefillEstimate(num_tokens, seconds * num_tokens / tokens, tokens, tokens / seconds)
    if not any(tokens >= PROBE_LONGEST for tokens, _ in kept):
        kept.append(probe_prefill(pair, prompt_ids[:PROBE_LONGEST]))
        record_prefill(key, *kept[-1])
    tokens, seconds = max(kept)
    linear = max(seconds - attention_seconds(pair, tokens), 0.0)
    estimate = linear * num_tokens / tokens + attention_seconds(pair, num_tokens)
    return PrefillEstimate(num_tokens, estimate, tokens, tokens / seconds, extrapolated=True)


def reading_note_for(pair, prompt_ids: list[int], num_lanes: int) -> str:
    """The page's words before this prompt is read ("" for a prompt shorter than PROBE_TOKENS)."""
    if len(prompt_ids) < PROBE_TOKENS:
        return ""
    return reading_note(estimate_prefill(pair, prompt_ids), num_lanes)


def reading_note(estimate: PrefillEstimate, num_lanes: int) -> str:
    """The page's words before a long prompt is read ("" when reading it is quick)."""
    if estimate.seconds < NOTE_ABOVE_S:
        return ""
    source = (f"from a {estimate.measured_tokens:,}-token prefill measured here, per token, and the attention, "
              f"which grows with the square of the length, timed at this length" if estimate.extrapolated else
              f"{estimate.measured_tokens_per_s:,.0f} tokens/s measured on a {estimate.measured_tokens:,}-token prompt here")
    return (f"Reading the prompt first: {estimate.num_tokens:,} tokens take the target about {estimate.seconds:.0f} s "
            f"in each of the {num_lanes} lanes before its first token, on this machine ({source}). "
            f"A shorter prompt starts sooner.")
