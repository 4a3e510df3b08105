"""A run as the user asked for it: the page's and the API's raw values, checked into a Request.

No gradio here, so every page section (and the API) parses inputs the same way; a bad value
raises ValueError with a message a user can act on, and `describe_error` turns anything that
stops a run into the one line the user sees.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import torch

from specviz.models import convert, hosting
from specviz.catalogue import run_lanes
from specviz.decoding.config import MAX_GAMMA, MAX_NGRAM, MAX_RIVALS, DecodeConfig
from specviz.models.loading import load_pair
from specviz.models.pairs import ModelPair
from specviz.models.precision import check_precision
from specviz.models.presets import DEFAULT_PRESET, PRESETS, default_drafter_for, preset_name

log = logging.getLogger("specviz.app.request")

CUSTOM = "custom"
POLICY = hosting.HostingPolicy.from_env()  # the host's limits, read once at start
MAX_NEW_TOKENS = POLICY.max_new_tokens


def whole_number(value, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """A slider or number box's value as an int, with a message a user can act on."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a whole number, got {value!r}") from None
    if not number.is_integer():
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise ValueError(f"{name} must be from {minimum} to {maximum}, got {int(number)}")
    return int(number)


def clamped_note(name: str, typed, minimum: float, maximum: float) -> str | None:
    """What the page says when a slider's box pulled a typed value into its range (the browser does it
    silently); None when the value was in range. Said once, in the status line, before any run."""
    try:
        value = float(typed)
    except (TypeError, ValueError):
        return None
    if math.isnan(value) or minimum <= value <= maximum:
        return None
    kept, side = (maximum, "above") if value > maximum else (minimum, "below")
    return f"{name} = {value:g} is {side} this page's range ({minimum:g} to {maximum:g}), so it was set to {kept:g}."


def real_number(value, name: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None


@dataclass(frozen=True)
class Request:
    """A run as the user asked for it."""

    prompt_text: str
    pair_name: str
    target_id: str
    draft_id: str
    config: DecodeConfig
    chat: bool = True  # the chat template, where the pair has one
    reference: bool = False  # add a lane running transformers' own generate()
    precision: str | None = None  # the weights' precision (models.PRECISIONS); None: the device's default

    @classmethod
    def parse(cls, prompt, pair_name, target_id, draft_id, gamma, temperature, top_k, top_p, max_new_tokens, seed,
              chat=True, drafter=None, ngram=3, reference=False, precision=None,
              draft_confidence=DecodeConfig.draft_confidence, gamma_schedule=DecodeConfig.gamma_schedule,
              rivals=DecodeConfig.rivals):
        if prompt is None or not str(prompt).strip():
            raise ValueError("the prompt is empty: type some text (or click an example) and press Run")
        pair_name = preset_name(pair_name or DEFAULT_PRESET)  # an old name (a saved run, a script) is today's
        if pair_name != CUSTOM and pair_name not in PRESETS:
            raise ValueError(f"unknown model pair {pair_name!r}; choose one of: {', '.join([*PRESETS, CUSTOM])}")
        if pair_name == CUSTOM and not ((target_id or "").strip() and (draft_id or "").strip()):
            raise ValueError("a custom pair needs both a target and a draft model id (a Hugging Face id or a local folder)")
        config = DecodeConfig(
            gamma=whole_number(gamma, "γ (tokens drafted per round)", 1, MAX_GAMMA),
            temperature=real_number(temperature, "temperature"),
            top_k=whole_number(top_k, "top-k"),
            top_p=real_number(top_p, "top-p"),
            max_new_tokens=whole_number(max_new_tokens, "max new tokens", 1, MAX_NEW_TOKENS),
            seed=whole_number(seed, "seed", 0, 2**63 - 1),
            inspect=True,
            drafter=drafter or default_drafter_for(pair_name),  # none named: the pair's own
            ngram=whole_number(ngram, "n-gram size", 1, MAX_NGRAM),
            draft_confidence=real_number(draft_confidence, "draft confidence threshold"),
            gamma_schedule=gamma_schedule or DecodeConfig.gamma_schedule,
            rivals=whole_number(rivals, "rival guesses", 0, MAX_RIVALS),
        )
        config.validate()
        if chat not in (True, False, None):
            raise ValueError(f"chat must be true or false, got {chat!r}")
        if reference not in (True, False, None):
            raise ValueError(f"reference must be true or false, got {reference!r}")
        if precision:  # none: the device's default
            check_precision(precision)
        return cls(str(prompt), pair_name, (target_id or "").strip(), (draft_id or "").strip(), config, chat is not False,
                   bool(reference), precision or None)

    @property
    def lanes(self) -> tuple[str, ...]:
        return run_lanes(("reference",) if self.reference else ())

    def load(self) -> ModelPair:
        if self.pair_name == CUSTOM:
            return load_pair(target=self.target_id, draft=self.draft_id, precision=self.precision)
        return load_pair(self.pair_name, precision=self.precision)

    @property
    def settings(self) -> dict:
        c = self.config
        pair = f"{self.draft_id} → {self.target_id}" if self.pair_name == CUSTOM else self.pair_name
        return {
            "pair": pair, "gamma": c.gamma, "temperature": c.temperature, "top_k": c.top_k, "top_p": c.top_p,
            "max_new_tokens": c.max_new_tokens, "seed": c.seed, "chat": self.chat, "drafter": c.drafter,
            "ngram": c.ngram, "reference": self.reference, "precision": self.precision,
            "draft_confidence": c.draft_confidence, "gamma_schedule": c.gamma_schedule, "rivals": c.rivals,
        }


def loading_message(request: Request) -> str:
    message = f"Loading the {request.settings['pair']} pair…"
    if request.pair_name == DEFAULT_PRESET and not convert.is_converted(convert.converted_dir()):
        message += " (first start: converting SmolLM2-135M-Instruct from the installed wheel, about 30 s, once)"
    return message


def describe_error(error: BaseException) -> str:
    """The one line a user sees for anything that stops a run."""
    if isinstance(error, torch.OutOfMemoryError):
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return "out of memory: pick a smaller model pair or fewer new tokens"
    if isinstance(error, ValueError):  # bad input, ModelLoadError, IncompatiblePairError
        return str(error)
    if isinstance(error, MemoryError):
        return "out of memory: pick a smaller model pair or fewer new tokens"
    log.exception("run failed")  # full traceback to the server log only
    return f"something went wrong ({type(error).__name__}: {error}); the app is still running, try again"


def check_run_time(started: float, limit_s: int) -> None:
    """A host's cap on one run's wall time, so one visitor cannot hold the model for long."""
    if limit_s and time.perf_counter() - started > limit_s:
        raise ValueError(
            f"this server stops runs after {limit_s} s so other visitors get a turn: "
            f"ask for fewer new tokens, or run specviz on your own machine"
        )
