"""The catalogue: every lane and every drafter declared once, with the words the page uses.

Nothing here imports torch, gradio or plotly, so the CLI's --help, the page, the renderers and
the engine can all ask it. Adding a drafter is its class plus one `DrafterInfo` entry; adding a
lane is its decoder plus one `LaneInfo` entry. Code that needs behaviour asks a flag here
(`needs_draft_model`, `needs_head`, `settings`) or the drafter's class (specviz.decoding.drafters.Drafter)
instead of comparing names.

Drafter classes and decoders are named as "module:attribute" and resolved where they run (the engine),
so this module sits beneath everything and no import cycle is needed to find them.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Sequence


def resolve(dotted: str) -> Any:
    """"package.module:Class.attr" → the object, imported on first use."""
    module_name, _, path = dotted.partition(":")
    found: Any = import_module(module_name)
    for part in path.split("."):
        found = getattr(found, part)
    return found


@dataclass(frozen=True)
class DrafterInfo:
    """One drafting strategy: how to build it and how to talk about it."""

    name: str  # the registry name: CLI --drafter, the API, saved runs
    drafter: str  # "module:Class" of its specviz.decoding.drafters.Drafter subclass
    label: str  # short, for choices and titles: "draft model"
    description: str  # one line on where its guesses come from (the CLI's --help)
    prefill_words: str  # what it did while the target read the prompt
    source_words: str  # where its guesses come from, for the draft stage and the inspector
    needs_draft_model: bool = False  # it cannot run on a pair without a draft model
    needs_head: bool = False  # it cannot run on a pair without a trained head (it drafts with it)
    caches: str = ""  # the KV caches it keeps beside the target's, "" when none
    hf_equivalent: str = ""  # how transformers' generate() does the same, "" when it cannot
    settings: tuple[str, ...] = ()  # DecodeConfig fields that only this drafter reads
    # What transformers' generate() runs for it in the reference lane ("" = the drafter itself).
    in_transformers: str = ""
    # Step mode's words for a round's draft stage ({label}, {forwards}, {tokens}: counted; {proposals}: each
    # token with its q; {texts}: the tokens alone). The defaults fit a drafter that samples one token per forward.
    draft_words: str = ("The {label} ran {forwards}, sampling one token each, with q its probability for the token "
                        "it picked: {proposals}.")
    # Why a round drafted fewer than γ when the drafter itself found no more (the confidence stop, the
    # token limit and the γ schedule are worded by step mode from the round and the run).
    fewer_words: str = "the drafter proposed no more."
    none_words: str = "the token limit left no room"  # why a round drafted nothing
    # "About the drafters": its path from what it reads to its guess, steps left to right, each one or more
    # (words, whose) boxes joined by "+" ("target": the target's own parts, "own": the drafter's weights,
    # "plain": neither), and its paragraph there; both may name the shipped figures ({draft_params},
    # {head_width}, …: specviz.app.drafters_about.words.DrafterFigures).
    diagram: tuple[tuple[tuple[str, str], ...], ...] = ()
    about: str = ""


DRAFTER_CATALOGUE: tuple[DrafterInfo, ...] = (
    DrafterInfo(
        name="model", drafter="specviz.decoding.drafters:ModelDrafter", label="draft model",
        description="draft model (a small separate LM)", needs_draft_model=True, caches="the draft's",
        hf_equivalent="assistant_model",
        prefill_words="The draft model read the prompt too, to fill its own KV cache.",
        source_words="the draft model, a small language model that reads only the text",
        diagram=((("the text so far", "plain"),), (("its own small transformer ({draft_layers} layers × {draft_width})", "own"),),
                 (("its own output head", "own"),), (("guess", "plain"),)),
        about=("<b>The draft model</b> reads only the text, with its own small transformer: {draft_params} parameters "
               "({draft_layers} layers, {draft_width} wide), {draft_table_params} of them its table of token vectors. It "
               "keeps its own memory of the text (a KV cache) and runs once per guess. transformers' "
               "<code>generate(assistant_model=…)</code> can use it too."),
    ),
    DrafterInfo(
        name="prompt-lookup", drafter="specviz.decoding.drafters:PromptLookupDrafter", label="prompt lookup",
        description="prompt lookup (copy n-grams, no model)", hf_equivalent="prompt_lookup_num_tokens",
        settings=("ngram",),
        prefill_words="Prompt lookup needs no model: it will copy from the prompt and the text so far.",
        source_words="copying: the tokens that followed the text's last n-gram earlier on",
        draft_words=("Prompt lookup found the text's last tokens earlier on and copied the {tokens} that followed: "
                     "{texts}. Copying is certain, so q = 1 for each (a one-hot q)."),
        fewer_words="that is all the copied stretch held.",
        none_words="prompt lookup found no earlier occurrence of the text's last tokens",
        diagram=((("the text's last few tokens", "plain"),), (("found earlier in the prompt or the answer", "plain"),),
                 (("copy what followed them there", "plain"),), (("guess", "plain"),)),
        about=("<b>Prompt lookup</b> has no parameters: it looks for the text's last few tokens earlier in the prompt "
               "or the answer and copies what followed them. Free, and good where the answer repeats the prompt "
               "(corrections, rewrites, code edits); elsewhere it often finds nothing to copy."),
    ),
    DrafterInfo(
        name="head", drafter="specviz.decoding.drafters:HeadDrafter", label="EAGLE-style head",
        description="EAGLE-style head (reads the target's hidden state)", needs_head=True, caches="the head's",
        prefill_words=("The head read nothing itself: it starts from the target's own hidden state at the prompt's "
                       "last position, which the target's prefill just computed."),
        source_words=("the head: one small layer that reads the target's own hidden state of the last verified "
                      "token (and, after its first guess, its own predicted states)"),
        in_transformers="draft model: transformers has no head drafter",
        draft_words=("The {label} ran {forwards}: the first reads the target's own hidden state at the last verified "
                     "token, each later one its own predicted state. q is its probability for the token it "
                     "picked: {proposals}."),
        diagram=((("the target's last hidden state", "target"), ("the last token's embedding", "target")),
                 (("one small transformer layer ({head_width} wide)", "own"),), (("the target's own output head", "target"),),
                 (("guess", "plain"),)),
        about=("<b>The EAGLE-style head</b> reads what the target computed: the target's last hidden state (the vector "
               "from which the target picks its own next token) plus the last token's embedding, through one small "
               "transformer layer, then the target's own output head turns the result into a guess. {head_params} "
               "parameters, one layer {head_width} wide: it borrows the target's embedding and output head instead of "
               "storing its own. The target's forward pass computes those states anyway (to read the prompt, and at "
               "every check), so reading them costs nothing extra."),
    ),
)

DRAFTER_INFO: dict[str, DrafterInfo] = {info.name: info for info in DRAFTER_CATALOGUE}
DRAFTER_NAMES: tuple[str, ...] = tuple(DRAFTER_INFO)
DEFAULT_DRAFTER = "model"


def drafter_info(name: str) -> DrafterInfo:
    """The entry for a drafter name, or a ValueError that lists the names there are."""
    if name not in DRAFTER_INFO:
        raise ValueError(f"unknown drafter {name!r}; choose one of: {', '.join(DRAFTER_NAMES)}")
    return DRAFTER_INFO[name]


# --- lanes ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaneInfo:
    """One lane of a run: what decodes it and how the page, the stats and the charts name and draw it."""

    name: str  # the events' lane tag, the saved run's key, the page's #lane-<name>
    decoder: str  # "module:attr" of (pair, prompt_ids, config, lane=name) → events
    title: str  # the lane box's heading
    label: str  # short, for table columns, chart legends and the status line
    colour: str  # its line in the charts (the palette takes it from here)
    drafts: bool = False  # its rounds carry drafted tokens the page draws; False: tokens only, no rounds drawn
    names_drafter: bool = False  # the run's drafter works in it, so its title says which
    by_default: bool = False  # in a run unless the run asks otherwise (the reference lane is asked for)
    redraws: bool = True  # False: its decoder runs in a thread of its own, and redrawing would take its CPU
    in_transformers: bool = False  # transformers' generate() drafts here: its title names what it ran instead
    # True: it runs in turns with the run's other such lanes (events.take_turns), so a slow spell of the machine
    # falls on all of them; False: alone, after them (generate() is one call, timed end to end)
    in_turns: bool = True


LANE_CATALOGUE: tuple[LaneInfo, ...] = (  # colours: grey, then Okabe-Ito blue and reddish purple
    LaneInfo(name="baseline", decoder="specviz.decoding.engine:autoregressive_decode", title="Target only (baseline)",
             label="target alone", colour="#555555", by_default=True),
    LaneInfo(name="speculative", decoder="specviz.decoding.engine:speculative_decode", title="Speculative decoding",
             label="speculative", colour="#0072B2", drafts=True, names_drafter=True, by_default=True),
    # its rounds are not drawn: generate() reports tokens, not its rounds' drafts
    LaneInfo(name="reference", decoder="specviz.decoding.reference:reference_decode",
             title="transformers generate() (reference)", label="transformers", colour="#CC79A7", names_drafter=True,
             redraws=False, in_transformers=True, in_turns=False),
)

LANE_INFO: dict[str, LaneInfo] = {info.name: info for info in LANE_CATALOGUE}
LANE_NAMES: tuple[str, ...] = tuple(LANE_INFO)
DEFAULT_LANES: tuple[str, ...] = tuple(info.name for info in LANE_CATALOGUE if info.by_default)
PAGE_LANES: tuple[str, ...] = LANE_NAMES  # the page's lane boxes, in order
PLAIN_LANES: tuple[str, ...] = tuple(info.name for info in LANE_CATALOGUE if not info.drafts)
OTHER_LANE_COLOUR = "#999999"  # a lane the catalogue lacks (a saved run from a newer specviz)


def lane_info(name: str) -> LaneInfo:
    """The entry for a lane name; a lane the catalogue lacks gets its name for words and grey, so a
    page or a chart can still show it (only the engine, which must decode it, refuses it)."""
    if name in LANE_INFO:
        return LANE_INFO[name]
    return LaneInfo(name, "", name, name, OTHER_LANE_COLOUR)


def run_lanes(asked: Sequence[str] = ()) -> tuple[str, ...]:
    """A run's lanes, in catalogue order: the default ones and those asked for (e.g. "reference")."""
    unknown = [name for name in asked if name not in LANE_INFO]
    if unknown:
        raise ValueError(f"unknown lane {unknown[0]!r}; choose from: {', '.join(LANE_NAMES)}")
    return tuple(name for name in LANE_NAMES if name in DEFAULT_LANES or name in asked)
