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

from specviz.models import convert
from specviz.catalogue import run_lanes
from specviz.decoding.config import DecodeConfig
from specviz.models.loading import load_pair
from specviz.models.pairs import ModelPair, refuse_empty_prompt
from specviz.models.precision import check_precision
from specviz.models.presets import DEFAULT_PRESET, PRESETS, default_drafter_for, preset_name
from specviz.app.settings import (  # noqa: F401 — CUSTOM, POLICY and the number checks are read from here too
    CONFIG_FIELDS, CUSTOM, POLICY, SETTING, SETTINGS, bind, parse_value, real_number, signature_of, whole_number,
)

log = logging.getLogger("specviz.app.request")

PARSE_SIGNATURE = signature_of(SETTINGS, required=())  # Request.parse's: positional in SETTINGS' order, or by name
MAX_NEW_TOKENS = POLICY.max_new_tokens


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
    def parse(cls, *values, **named) -> Request:
        """A run from raw values, positional in SETTINGS' order or by name (the page's, the API's, a saved
        run's); every one not given takes its declared default. ValueError with the user's message."""
        raw = bind(PARSE_SIGNATURE, values, named)
        prompt = raw["prompt"]
        refuse_empty_prompt(prompt, hint="type some text (or click an example) and press Run")
        pair_name = preset_name(raw["pair"] or DEFAULT_PRESET)  # an old name (a saved run, a script) is today's
        if pair_name != CUSTOM and pair_name not in PRESETS:
            raise ValueError(f"unknown model pair {pair_name!r}; choose one of: {', '.join([*PRESETS, CUSTOM])}")
        target_id, draft_id = (parse_value(SETTING[name], raw[name]).strip() for name in ("target_id", "draft_id"))
        if pair_name == CUSTOM and not (target_id and draft_id):
            raise ValueError("a custom pair needs both a target and a draft model id (a Hugging Face id or a local folder)")
        # The host's token cap is read here, at the call, so a host (or a test) can lower it.
        checked = {setting.name: parse_value(setting, raw[setting.name],
                                             MAX_NEW_TOKENS if setting.name == "max_new_tokens" else None)
                   for setting in SETTINGS if setting.name not in ("prompt", "pair", "target_id", "draft_id")}
        checked["drafter"] = checked["drafter"] or default_drafter_for(pair_name)  # none named: the pair's own
        config = DecodeConfig(inspect=True, **{name: value for name, value in checked.items() if name in CONFIG_FIELDS})
        config.validate()
        if checked["precision"]:  # none: the device's default
            check_precision(checked["precision"])
        return cls(str(prompt), pair_name, target_id, draft_id, config, checked["chat"], checked["reference"],
                   checked["precision"] or None)

    @property
    def lanes(self) -> tuple[str, ...]:
        return run_lanes(("reference",) if self.reference else ())

    def encode(self, pair: ModelPair) -> list[int]:
        """The prompt's ids for this pair, within the host's prompt cap (read at the call, like the token cap)."""
        return pair.encode(self.prompt_text, self.chat, POLICY.max_prompt_tokens)

    def load(self) -> ModelPair:
        if self.pair_name == CUSTOM:
            return load_pair(target=self.target_id, draft=self.draft_id, precision=self.precision)
        return load_pair(self.pair_name, precision=self.precision)

    @property
    def settings(self) -> dict:
        """What a saved run records, in SETTINGS' order: the pair by name ("draft → target" when custom)."""
        pair = f"{self.draft_id} → {self.target_id}" if self.pair_name == CUSTOM else self.pair_name
        values = {"pair": pair}
        for setting in SETTINGS:
            if setting.recorded and setting.name != "pair":
                values[setting.name] = getattr(self.config if setting.in_config else self, setting.name)
        return values


def loading_message(request: Request) -> str:
    message = f"Loading the {request.settings['pair']} pair…"
    if request.pair_name == DEFAULT_PRESET and not convert.is_converted(convert.converted_dir()):
        message += " (first start: converting SmolLM2-135M-Instruct from the installed wheel, once)"
    return message


OUT_OF_MEMORY = "out of memory: pick a smaller model pair or fewer new tokens"


def describe_error(error: BaseException) -> str:
    """The one line a user sees for anything that stops a run."""
    if isinstance(error, torch.OutOfMemoryError):
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return OUT_OF_MEMORY
    if isinstance(error, ValueError):  # bad input, ModelLoadError, IncompatiblePairError
        return str(error)
    if isinstance(error, MemoryError):
        return OUT_OF_MEMORY
    log.exception("run failed")  # full traceback to the server log only
    return f"something went wrong ({type(error).__name__}: {error}); the app is still running, try again"


def check_run_time(started: float, limit_s: int) -> None:
    """A host's cap on one run's wall time, so one visitor cannot hold the model for long."""
    if limit_s and time.perf_counter() - started > limit_s:
        raise ValueError(
            f"this server stops runs after {limit_s} s so other visitors get a turn: "
            f"ask for fewer new tokens, or run specviz on your own machine"
        )
