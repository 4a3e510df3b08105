"""The named pairs a user can pick (a target and a draft: hub ids or folders), their old names, and the
drafter each gets by default. A renamed preset keeps its old name in PRESET_ALIASES, the one place an old
name (a saved run, a script, `--pair embedded`) becomes the current one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specviz.catalogue import DEFAULT_DRAFTER, drafter_info
from specviz.models import convert
from specviz.models.draft_head import WEIGHTS_FILE as HEAD_WEIGHTS_FILE
from specviz.models.errors import ModelLoadError

ASSETS_DIR = Path(__file__).resolve().parents[2] / "assets"
EMBEDDED_DRAFT_DIR = ASSETS_DIR / "smollm2-draft"
TINY_CODE_DIR = ASSETS_DIR / "tiny-code-pair"
EMBEDDED_HEAD_DIR = ASSETS_DIR / "smollm2-head"  # the head drafter trained on the default target


@dataclass(frozen=True)
class PairPreset:
    """A named draft → target pair users can pick."""

    name: str
    target_id: str  # hub id or local folder
    draft_id: str
    note: str  # one line for menus
    # Finds (or first builds) the target's folder at load time: the default target is converted
    # from an installed wheel into a cache, which must not happen at import.
    locate_target: Callable[[], str] | None = None
    prompts_file: Path = ASSETS_DIR / "prompts.json"  # the bench's and the app's example prompts
    head_dir: Path | None = None  # a head drafter trained on this target (specviz.decoding.drafters), if any
    # The drafter a run on this pair gets when none is named: the winner of the pair's bench (README).
    default_drafter: str = DEFAULT_DRAFTER
    # Whether the draft and the head run in int8 on a CPU (specviz.models.int8), where memory binds them:
    # off for the tiny pair (its GPT-2 draft's Conv1D layers stay as they are) and hub pairs (as loaded).
    int8_drafters: bool = False

    def unnamed_drafter(self) -> str:
        """The drafter a run gets when none is named: default_drafter when what it reads is here (a
        head's weights), else the catalogue's default (so custom pairs, built with no head, get it too)."""
        if drafter_info(self.default_drafter).needs_head and not (
                self.head_dir is not None and (self.head_dir / HEAD_WEIGHTS_FILE).is_file()):
            return DEFAULT_DRAFTER
        return self.default_drafter

    def resolved_target_id(self) -> str:
        if self.locate_target is None:
            return self.target_id
        try:
            return self.locate_target()
        except convert.TargetUnavailableError as error:
            raise ModelLoadError(str(error)) from error


PRESETS: dict[str, PairPreset] = {preset.name: preset for preset in (
    PairPreset("smollm2-135m", convert.HUB_ID, str(EMBEDDED_DRAFT_DIR),
               "SmolLM2-135M-Instruct with specviz's head and distilled draft, offline",
               locate_target=convert.default_target_id, head_dir=EMBEDDED_HEAD_DIR,
               default_drafter="head",  # wins or ties every bfloat16 bench row (the README's table)
               int8_drafters=True),
    PairPreset("tiny-code", str(TINY_CODE_DIR / "target"), str(TINY_CODE_DIR / "draft"),
               "specviz's tiny Python-code pair (fast, offline)", prompts_file=TINY_CODE_DIR / "prompts.json"),
    PairPreset("pythia", "EleutherAI/pythia-1.4b-deduped", "EleutherAI/pythia-160m-deduped",
               "Pythia 160M → 1.4B (the seed article's pair), needs network"),
    PairPreset("smollm2", "HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct",
               "SmolLM2 135M → 1.7B Instruct, needs network"),
    PairPreset("qwen2.5", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct",
               "Qwen2.5 0.5B → 1.5B Instruct, needs network"),
)}
DEFAULT_PRESET = "smollm2-135m"
# Old preset names → current ones: saved runs, API calls and scripts that use them keep working.
PRESET_ALIASES: dict[str, str] = {"embedded": "smollm2-135m"}


def preset_name(name: str) -> str:
    """The current name of a preset named by an old one (PRESET_ALIASES); any other name as given."""
    return PRESET_ALIASES.get(name, name)


def default_drafter_for(pair_name: str | None) -> str:
    """The page's and the API's drafter when none is named, by pair name ("custom" and unknown names
    get the catalogue's default; the unknown ones are refused later, where the pair loads)."""
    preset = PRESETS.get(preset_name(pair_name or DEFAULT_PRESET))
    return preset.unnamed_drafter() if preset is not None else DEFAULT_DRAFTER


def resolve_pair(preset: str | None = None, target: str | None = None, draft: str | None = None) -> PairPreset:
    """A preset by name (current or old), or two ids; both ids are needed for a custom pair."""
    if target or draft:
        if not (target and draft):
            raise ModelLoadError("a custom pair needs both a target and a draft model id")
        return PairPreset("custom", target.strip(), draft.strip(), "custom pair")
    name = preset_name(preset or DEFAULT_PRESET)
    if name not in PRESETS:
        raise ModelLoadError(f"unknown model pair {name!r}; choose one of: {', '.join(PRESETS)}")
    return PRESETS[name]
