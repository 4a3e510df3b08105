"""What the run section says, without gradio: the intro, the example prompts and their buttons, the words of
the controls that are the page's alone (the pace, the rival-guesses switch, the precision's hint) and the status
line (how far a live run has got, the summary of a finished one). The run settings' labels and hints are their
declarations' (specviz.app.settings); the legend's are the tokens' (specviz.app.render.tokens).
"""

from __future__ import annotations

import logging

import torch

from specviz.analysis.bench import Prompt, load_prompts
from specviz.app import render
from specviz.app.live import Headway
from specviz.app.render.verdict import speedup_is_quoted
from specviz.app.wording import count, duration_text
from specviz.catalogue import lane_info
from specviz.models.precision import cpu_has_native_bf16, default_precision
from specviz.models.slots import call_rows

log = logging.getLogger("specviz.app.ui")

TITLE = "specviz — speculative decoding, live"


def header_markdown() -> str:
    """The first view: what this is and what to do, in words before any notation (the lanes stack on a
    narrow screen, so they are named, never "left" and "right")."""
    return (
        f"# {TITLE}\n"
        "A language model writes one token per pass through its network. **Speculative decoding** lets a small, "
        "cheap **drafter** guess the next few tokens and the big **target** model check all the guesses in one "
        "pass: the output is still exactly the target's, made in fewer of its slow passes.\n\n"
        "**Try it:** pick an example prompt below (or type your own) and press **Run**. Then watch the two lanes: "
        "**Target only** writes the plain way, one token per pass; **Speculative decoding** writes the same text "
        "with every guess coloured by what happened to it. Click a coloured token to see why it was kept or thrown "
        "away. *About the drafters* and *How it works*, further down, explain the rest."
    )


# --- the example prompts ----------------------------------------------------------------------------------------

FALLBACK_PROMPTS = [
    Prompt("What is the capital of Scotland?", True),
    Prompt("Alice and Bob were walking through the park when", False),
    Prompt("def fibonacci(n):\n", False),
]
EXAMPLES_LABEL = "Example prompts (click one)"


def example_prompts() -> list[Prompt]:
    """The example prompts in assets/prompts.json, or a few built-ins if that file is unreadable."""
    try:
        return load_prompts()
    except (OSError, ValueError) as error:
        log.warning("could not read example prompts: %s", error)
        return FALLBACK_PROMPTS


def example_label(prompt: Prompt, max_chars: int = 90) -> str:
    """An example's button: its prompt on one line, shortened, marked where it is a plain completion (chat off)."""
    text = " ".join(prompt.text.split())
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return text if prompt.chat is not False else f"completion: {text}"  # first, since gradio cuts long labels


# --- the controls that are the page's alone --------------------------------------------------------------------

READY_TEXT = "Ready: press Run."
# The pace is the page's alone (not a run setting): its choices are live.PACES.
PACE_LABEL = "pace of the speculative lane on screen (timings are unchanged)"
# Under the switch above the lanes (its label, MARKS_SWITCH, is the legend's too: its hovers name it).
MARKS_SWITCH_INFO = ("off, the speculative lane reads as text: the kept tokens, and the rejected drafts struck "
                     "through; a click on a token still opens its round")


def precision_info() -> str:
    """What the default is here and why, in the words of the bench (README)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        hardware = "a CUDA GPU"
    else:
        hardware = "a CPU " + ("with" if cpu_has_native_bf16() else "without") + " native bf16 (AMX / AVX512-BF16)"
    return (f"Here: {hardware}, so the default is {default_precision(device)}. In either precision, on any CPU "
            f"or GPU, specviz computes every token the target checks in one fixed shape ({call_rows(device)} rows a "
            "call, each over its own keys), so checking several tokens at once rounds exactly like checking one and at temperature 0 the "
            "lanes write the same text by construction; the stats say so for each model, and say where a model's "
            "attention keeps it out. Without native bf16, bfloat16 is slow")


# --- the status line -------------------------------------------------------------------------------------------

# While a live run goes on (a long run said only "Generating…" for minutes): which lane, how far, and how long the
# run has left once that is measured.
RUNNING_TEXT = "Lane {number} of {lanes}, {title}: {done} of {asked} tokens"
TIME_LEFT_TEXT = "about {time} left in all"
TIME_UNKNOWN_TEXT = "the time left is said once its first tokens are timed"


def running_summary(headway: Headway) -> str:
    """The status line during a live run: the lane running, its tokens written of those asked, the time left."""
    info = lane_info(headway.lane)
    said = RUNNING_TEXT.format(number=headway.lane_number, lanes=headway.num_lanes, title=info.title,
                               done=headway.num_tokens, asked=headway.max_new_tokens or "?")
    left = (TIME_UNKNOWN_TEXT if headway.seconds_left is None else
            TIME_LEFT_TEXT.format(time=duration_text(headway.seconds_left)))
    return f"{said}; {left}."


def done_summary(run: render.RunView) -> str:
    """The status line at a run's end: each lane's tokens, then the speedup; greedy lanes that parted get no
    speedup (it would compare different texts), the parting named instead."""
    parts = [f"{lane_info(name).label} {count(run.lane(name).trace.num_tokens, 'token')}" for name in run.lane_names]
    summary = "Done: " + ", ".join(parts)
    parting = run.greedy_parting()
    if parting is not None:
        return (f"{summary}; the two lanes wrote different texts from token {parting + 1} (marked ▾ in both lanes), "
                "so no speedup is given: see why below the lanes.")
    speedup = render.stats_dict(run).get("speedup")
    if speedup is not None and speedup_is_quoted(run):
        summary += f"; speculative decoding ran at {speedup:.2f}× the target alone's speed (one run: a noisy sample)"
    return summary + "."
