"""What the run section says, without gradio: the intro, the example prompts and their buttons, the words of
the controls that are the page's alone (the pace, the rival-guesses switch, the precision's hint) and the status
line (how far a live run has got, the summary of a finished one). The run settings' labels and hints are their
declarations' (specviz.app.settings); the legend's are the tokens' (specviz.app.render.tokens).
"""

from __future__ import annotations

import logging
import os

import torch

from specviz.analysis.bench import Prompt, load_prompts
from specviz.app import render
from specviz.app.live import Headway
from specviz.app.wording import count, duration_text
from specviz.catalogue import lane_info
from specviz.models.precision import PRECISION_ENV, cpu_has_amx, cpu_has_native_bf16, default_precision

log = logging.getLogger("specviz.app.ui")

TITLE = "specviz — speculative decoding, live"


def header_markdown() -> str:
    """The first view: what the two lanes are, in words before any notation (the lanes stack on a narrow screen,
    so they are named, never "left" and "right"). What the colours mean is the legend's; what to do, the status
    line's ("press Run") and the empty lanes' ("click a coloured token")."""
    return (
        f"# {TITLE}\n"
        "Two lanes answer one prompt. **Target only**: the big **target** model alone, one token per pass. "
        "**Speculative decoding**: a small **drafter** guesses a few tokens and the target checks them all in one "
        "pass; the text is still exactly the target's own, in fewer passes."
    )


# --- the example prompts ----------------------------------------------------------------------------------------

FALLBACK_PROMPTS = [
    Prompt("What is the capital of Scotland?", True),
    Prompt("Alice and Bob were walking through the park when", False),
    Prompt("def fibonacci(n):\n", False),
]
EXAMPLES_LABEL = "Example prompts"
EXAMPLE_CHARS = 32  # a button's words at most, about 5: the click fills the whole prompt


def example_prompts() -> list[Prompt]:
    """The example prompts in assets/prompts.json, or a few built-ins if that file is unreadable."""
    try:
        return load_prompts()
    except (OSError, ValueError) as error:
        log.warning("could not read example prompts: %s", error)
        return FALLBACK_PROMPTS


def example_label(prompt: Prompt, max_chars: int = EXAMPLE_CHARS) -> str:
    """An example's button: the start of its prompt on one line, cut at a word within `max_chars`, marked where it
    is a plain completion (chat off)."""
    text = " ".join(prompt.text.split())
    if len(text) > max_chars:
        cut = text[:max_chars]
        text = (cut[:cut.rfind(" ")] if " " in cut else cut).rstrip(" :,.") + "…"
    return text if prompt.chat is not False else f"completion: {text}"  # first, since gradio cuts long labels


# --- the controls that are the page's alone --------------------------------------------------------------------

READY_TEXT = "Ready: press Run."
# The pace is the page's alone (not a run setting): its choices are live.PACES.
PACE_LABEL = "on-screen pace (timings unchanged)"
# Under the switch above the lanes (its label, MARKS_SWITCH, is the legend's too: its hovers name it).
MARKS_SWITCH_INFO = "off: the lane reads as plain text; click any token to open its round"


def precision_info() -> str:
    """What the default is here and why, in the words of the bench (README)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    default = default_precision(device)
    if os.environ.get(PRECISION_ENV, "").strip():
        why = f"Here the host set {PRECISION_ENV}, so the default is {default}."
    elif device.type == "cuda":
        why = f"Here: a CUDA GPU, so the default is {default}."
    elif cpu_has_native_bf16():
        kind = "AMX" if cpu_has_amx() else "AVX512-BF16"
        why = (f"Here: a CPU with native bf16 ({kind}), and the default is {default} all the same: on a CPU "
               "specviz's float32 kernels (the default model read from its own 4-bit blocks) decode faster than "
               "bfloat16.")
    else:
        why = (f"Here: a CPU without native bf16 (AMX / AVX512-BF16), so the default is {default}: bfloat16 would "
               "run in software, several times slower.")
    # how it is exact is the result card's one answer ("Exact here", per model): here only that both precisions are
    return (f"{why} Either precision, on any CPU or GPU, keeps the lanes' text identical at temperature 0 by "
            "construction for the preset pairs and most hub models; after a run, “Exact here” in the result card's Show "
            "the arithmetic says how, or why not for a hub model it cannot promise")


# --- the status line -------------------------------------------------------------------------------------------

# While a live run goes on (a long run said only "Generating…" for minutes): which lanes, how far, and how long the
# run has left once that is measured.
LANE_TOKENS_TEXT = "{label} {done} of {asked} tokens"
RUNNING_TEXT = {1: "Running: {lanes}", 2: "Lanes taking turns: {lanes}"}  # by how many run at once (2: or more)
LATER_TEXT = "then {lanes}"
TIME_LEFT_TEXT = "about {time} left in all"
TIME_UNKNOWN_TEXT = "the time left is said once their first tokens are timed"


def running_summary(headway: Headway) -> str:
    """The status line during a live run: the lanes running (taking turns), each one's tokens written of those
    asked, the lanes to come, the time left."""
    asked = headway.max_new_tokens or "?"
    lanes = ", ".join(LANE_TOKENS_TEXT.format(label=lane_info(name).label, done=done, asked=asked)
                      for name, done in headway.running)
    parts = [RUNNING_TEXT[min(len(headway.running), 2)].format(lanes=lanes)]
    if headway.later:
        parts.append(LATER_TEXT.format(lanes=", ".join(lane_info(name).label for name in headway.later)))
    parts.append(TIME_UNKNOWN_TEXT if headway.seconds_left is None else
                 TIME_LEFT_TEXT.format(time=duration_text(headway.seconds_left)))
    return "; ".join(parts) + "."


def done_summary(run: render.RunView) -> str:
    """The status line at a run's end: each lane's tokens; greedy lanes that parted, the parting named. No speedup:
    the card under the lanes says it once, with its band (or why it gives none)."""
    parts = [f"{lane_info(name).label} {count(run.lane(name).trace.num_tokens, 'token')}" for name in run.lane_names]
    summary = "Done: " + ", ".join(parts)
    parting = run.greedy_parting()
    if parting is not None:
        return (f"{summary}; the two lanes wrote different texts from token {parting + 1} (marked ▾ in both lanes), "
                "so no speedup is given: see why below the lanes.")
    return summary + "."
