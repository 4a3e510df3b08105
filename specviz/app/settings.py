"""Every setting of a run, declared once: its name, its control on the page, its default, its range, its
words, its CLI flag, whether a replay restores it and how a raw value is checked.

Everything else is derived from SETTINGS: the page's controls (run_section.page.control), the inputs the Run
button reads (ui.RUN_INPUTS), the `/generate` API's signature (API_SIGNATURE), Request.parse and
Request.settings, the replay (replayed_values), the teaching sections' inputs and the CLI's arguments
(specviz.cli.arguments). Defaults are read from DecodeConfig, never written twice, so the page, the API,
the CLI and the engine cannot disagree (tests/test_settings.py reads them all). Like transformers'
GenerationConfig or an argparse-from-dataclass tool, but small: one frozen Setting per field.

No gradio here: the page builds its components from these declarations.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, fields
from typing import Any, Mapping

from specviz.catalogue import DRAFTER_CATALOGUE
from specviz.decoding.config import GAMMA_SCHEDULES, MAX_GAMMA, MAX_NGRAM, MAX_RIVALS, MAX_TREE, DecodeConfig
from specviz.models import hosting
from specviz.models.precision import PRECISIONS
from specviz.models.presets import DEFAULT_PRESET, PRESETS

CUSTOM = "custom"  # the pair that is two model ids the user typed
POLICY = hosting.HostingPolicy.from_env()  # the host's limits, read once at start
MAX_SEED = 2**63 - 1
NOT_RECORDED = object()  # Setting.unrecorded: a saved run without the setting says nothing of it
ENGINE = DecodeConfig()
CONFIG_FIELDS = frozenset(field.name for field in fields(DecodeConfig))
KINDS = ("slider", "number", "checkbox", "radio", "dropdown", "text")
PARSE_RULES = ("whole", "real", "choice", "bool", "text")
API_TYPES = {"whole": int, "real": float, "choice": str, "bool": bool, "text": str}


@dataclass(frozen=True)
class Setting:
    """One setting of a run, as the page, the API, Request, the replay and the CLI all know it."""

    name: str  # Request.parse's keyword, the API's argument, the page's control, the saved run's key, --name
    kind: str  # the page's control (KINDS)
    parse: str  # how a raw value is checked (PARSE_RULES)
    default: Any  # what a run gets when it is not given: DecodeConfig's own where it is an engine field
    label: str = ""  # the page's label
    info: str = ""  # the page's help under the label
    short: str = ""  # its name in a slider's clamp note ("γ = 100 is above…"); the label when empty
    words: str = ""  # its name in a parse error; `short` when empty
    minimum: float | None = None  # the page's range (a slider), and what parse refuses where `checked`
    maximum: float | None = None
    step: float | None = None
    # parse refuses values outside minimum..maximum: only for ranges the engine does not own (the host's token
    # cap, the seed); an engine setting's range is DecodeConfig.validate's, checked there once
    checked: bool = False
    choices: tuple = ()  # (label, value) pairs of a radio or dropdown
    placeholder: str = ""  # a text box's example
    cli: bool = True  # a flag --name in `generate` (the pair's ids and precision are the CLI's pair arguments)
    bench: str = "same"  # in `bench`: "same" flag as generate's, "list" a comma list of its own, "no" none
    help: str = ""  # the CLI's help
    replayed: bool = False  # a replay puts a saved run's value back into the control
    unrecorded: Any = NOT_RECORDED  # what a saved run without the key ran with (the setting did not exist then)
    recorded: bool = True  # Request.settings (and so a saved run) records it
    drafters: tuple[str, ...] = ()  # the drafters that read it; () = every one
    greedy_only: bool = False  # the engine applies it at temperature 0 only: the label and the CLI help say so

    @property
    def page_label(self) -> str:
        return f"{self.label} (temperature 0 only)" if self.greedy_only else self.label

    @property
    def cli_help(self) -> str:
        return f"temperature 0 only: {self.help}" if self.greedy_only and self.help else self.help

    @property
    def elem_id(self) -> str:
        return self.name.replace("_", "-")

    @property
    def flag(self) -> str | None:
        return f"--{self.elem_id}" if self.cli else None

    @property
    def api_type(self) -> type:
        return API_TYPES[self.parse]

    @property
    def in_config(self) -> bool:
        """A DecodeConfig field (else a field of Request itself, or the pair's)."""
        return self.name in CONFIG_FIELDS


def drafters_reading(name: str) -> tuple[str, ...]:
    return tuple(info.name for info in DRAFTER_CATALOGUE if name in info.settings)


PAIR_CHOICES = (*((f"{preset.name} — {preset.note}", preset.name) for preset in PRESETS.values()),
                ("custom — type a target and a draft model id", CUSTOM))
# The short label: a longer text wraps once the n-gram slider opens beside the radio, and the controls
# below jump (a browser test's click on the reference switch missed for it).
DRAFTER_CHOICES = tuple((info.label, info.name) for info in DRAFTER_CATALOGUE)
PRECISION_CHOICES = (("default for this device", ""), *(
    (name if name == "float32" else f"{name}: half the memory", name) for name in PRECISIONS))

# In the `/generate` API's order (its positional order, kept stable for clients); Request.parse takes
# the same order.
SETTINGS: tuple[Setting, ...] = (
    Setting("prompt", "text", "text", None, label="Prompt", cli=True, bench="no", recorded=False,
            help="the text to continue (or, with --chat, the question)"),
    Setting("pair", "dropdown", "choice", DEFAULT_PRESET, label="Model pair (draft → target)", choices=PAIR_CHOICES,
            cli=False),
    Setting("gamma", "slider", "whole", ENGINE.gamma, label="γ — tokens drafted per round", short="γ",
            words="γ (tokens drafted per round)", minimum=1, maximum=MAX_GAMMA, step=1, bench="list",
            replayed=True, help=f"tokens drafted per round (γ; default: the engine's, {ENGINE.gamma})"),
    Setting("temperature", "slider", "real", ENGINE.temperature, label="temperature (0 = greedy)",
            info="0: both lanes write the same text; above 0 each samples its own", short="temperature", minimum=0,
            maximum=2, step=0.05, bench="list",
            replayed=True, help="0 = greedy"),
    Setting("top_k", "slider", "whole", ENGINE.top_k, label="top-k (0 = off)", short="top-k", minimum=0,
            maximum=200, step=1, replayed=True, help="0 = off"),
    Setting("top_p", "slider", "real", ENGINE.top_p, label="top-p (1 = off)", short="top-p", minimum=0.05,
            maximum=1, step=0.05, replayed=True, help="1 = off"),
    Setting("max_new_tokens", "slider", "whole", ENGINE.max_new_tokens, label="max new tokens", minimum=1,
            maximum=POLICY.max_new_tokens, step=1, checked=True, replayed=True,
            help=f"new tokens at most (default: the engine's, {ENGINE.max_new_tokens})"),
    # No minimum on the page: gradio would refuse −5 with its own toast before Request.parse says why.
    Setting("seed", "number", "whole", ENGINE.seed, label="seed", minimum=0, maximum=MAX_SEED, checked=True,
            replayed=True, help="seeds the one random generator of a run"),
    Setting("target_id", "text", "text", "", label="Target model id", placeholder="e.g. EleutherAI/pythia-1.4b-deduped",
            cli=False, recorded=False),
    Setting("draft_id", "text", "text", "", label="Draft model id", placeholder="e.g. EleutherAI/pythia-160m-deduped",
            cli=False, recorded=False),
    Setting("chat", "checkbox", "bool", True,
            label="chat: the model answers the prompt (off: it continues the text)",
            help="wrap prompts in the pair's chat template (default: yes when the pair has one)"),
    # "" (or None): the pair's own drafter (presets.default_drafter_for), so no drafter default is written here.
    Setting("drafter", "radio", "choice", "", label="drafter: who proposes the γ tokens", choices=DRAFTER_CHOICES,
            replayed=True, help="; ".join(f"{info.name}: {info.description}" for info in DRAFTER_CATALOGUE)
            + " (default: the pair's own: head on the default pair, else the draft model)"),
    Setting("ngram", "slider", "whole", ENGINE.ngram, label="prompt lookup: longest n-gram", short="n-gram size",
            minimum=1, maximum=MAX_NGRAM, step=1, replayed=True, drafters=drafters_reading("ngram"),
            help=f"prompt lookup: longest n-gram to match (1–{MAX_NGRAM})"),
    Setting("reference", "checkbox", "bool", False,
            label="reference lane: transformers' own generate()", bench="no", replayed=True,
            help="add a lane running transformers' own generate() on the same pair and settings"),
    # "": the device's default (precision.default_precision); the CLI's --dtype sets it with the pair.
    Setting("precision", "radio", "choice", "", label="precision", choices=PRECISION_CHOICES, cli=False, replayed=True),
    Setting("draft_confidence", "slider", "real", ENGINE.draft_confidence,
            label="draft only while sure: stop a round after a draft the drafter gave less than this",
            info="0 = always draft γ. A verify of more tokens costs more, so unlikely drafts cost twice; the lane "
                 "marks where a round stopped (‖)", short="draft confidence", words="draft confidence threshold",
            minimum=0, maximum=0.95, step=0.05, replayed=True, unrecorded=0.0,
            help=f"stop a round's drafting after a token the drafter was less sure of (0 = off; default: the "
                 f"engine's, {ENGINE.draft_confidence})"),
    Setting("gamma_schedule", "radio", "choice", ENGINE.gamma_schedule, label="γ schedule",
            info="heuristic (transformers'): γ + 2 after a round whose drafts were all accepted, γ − 1 otherwise",
            choices=tuple((name, name) for name in GAMMA_SCHEDULES), replayed=True, unrecorded="constant",
            help="heuristic: transformers' schedule (γ + 2 after a fully accepted round, else γ − 1)"),
    Setting("rivals", "slider", "whole", ENGINE.rivals,
            label="rival guesses: where the drafter is unsure of a round's first token, verify its next guesses too",
            info="0 = off. They ride along in the same verify, each at that position; the target takes the one "
                 "that is its own choice. The lane shows them small and struck through after the first draft",
            short="rival guesses", minimum=0, maximum=MAX_RIVALS, step=1, replayed=True, unrecorded=0,
            greedy_only=True,
            help="beside a first draft the drafter is unsure of, offer its next N likeliest "
                 "tokens too, judged in the same verify (0 = off; default: the engine's)"),
    Setting("tree", "slider", "whole", ENGINE.tree,
            label="draft tree: guesses checked per round (0 = one chain of γ)",
            info="Above 0 the drafter guesses several tokens at each step, γ steps deep, and the target checks every "
                 "branch in its one pass, keeping the longest path it agrees with. More guesses, a longer check. "
                 "Rival guesses and the confidence stop belong to chains: a tree replaces them",
            short="tree budget", words="tree budget (guesses per round)", minimum=0, maximum=MAX_TREE, step=1,
            bench="list", replayed=True, unrecorded=0, drafters=drafters_reading("tree"),
            help=f"draft a tree of at most N tokens, γ deep, all checked in one target pass (EAGLE-2); 0 = a chain "
                 f"(default: the engine's, {ENGINE.tree})"),
)
SETTING: dict[str, Setting] = {setting.name: setting for setting in SETTINGS}
NAMES: tuple[str, ...] = tuple(SETTING)
REPLAYED: tuple[Setting, ...] = tuple(setting for setting in SETTINGS if setting.replayed)
SLIDERS: tuple[Setting, ...] = tuple(setting for setting in SETTINGS if setting.kind == "slider")


def short_name(setting: Setting) -> str:
    return setting.short or setting.label


# --- checking raw values (the page's, the API's, a saved run's) -------------------------------------------


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


def real_number(value, name: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def parse_value(setting: Setting, value, maximum: float | None = None):
    """A raw value checked by the setting's rule; `maximum` overrides the declared one (the host's token cap).
    An empty choice or text and an unset switch take the default."""
    words = setting.words or short_name(setting)
    if setting.parse == "whole":
        bounds = (setting.minimum, setting.maximum if maximum is None else maximum) if setting.checked else (None, None)
        return whole_number(value, words, *bounds)
    if setting.parse == "real":
        return real_number(value, words)
    if setting.parse == "bool":
        if value not in (True, False, None):
            raise ValueError(f"{setting.name} must be true or false, got {value!r}")
        return setting.default if value is None else bool(value)
    if setting.parse == "text":
        return "" if value is None else str(value)
    return value or setting.default  # a choice: checked where it is used (DecodeConfig.validate, the pair, precision)


def bind(signature: inspect.Signature, values: tuple, named: Mapping[str, Any]) -> dict[str, Any]:
    """Positional and keyword values, by name, with every default filled in (TypeError for an unknown name)."""
    bound = signature.bind(*values, **named)
    bound.apply_defaults()
    return dict(bound.arguments)


def signature_of(settings: tuple[Setting, ...], returns: Any = inspect.Signature.empty,
                 required: tuple[str, ...] = ("prompt",)) -> inspect.Signature:
    """A Python signature with each setting as an annotated argument at its default: what gradio reads for
    the API's documentation, and what Request.parse binds its values with."""
    parameters = [
        inspect.Parameter(setting.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=setting.api_type,
                          **({} if setting.name in required else {"default": setting.default}))
        for setting in settings
    ]
    return inspect.Signature(parameters, return_annotation=returns)


API_SIGNATURE = signature_of(SETTINGS, returns=tuple[str, str, dict])


# --- replays ---------------------------------------------------------------------------------------------------


def replayed_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Setting name → the value a saved run ran with, for every replayed setting it recorded or that did
    not exist when it was recorded (then it ran as `unrecorded` says: the feature was off). A choice the
    control does not offer (a run in float16 on an older GPU) is left out: the control keeps its value."""
    values = {}
    for setting in REPLAYED:
        value = settings.get(setting.name)
        if setting.name not in settings and setting.unrecorded is not NOT_RECORDED:
            value = setting.unrecorded
        offered = value in {choice for _, choice in setting.choices} if setting.choices else True
        if value is not None and offered:
            values[setting.name] = value
    return values

