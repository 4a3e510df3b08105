"""About the drafters: what each one reads, how big it is, why the head guesses better, what EAGLE is.

A newcomer's page, not a model card: every size is computed from the shipped configs (and the
target's, where it has been converted), and every measured figure is read from the model cards in
assets/, so the page cannot drift from what ships.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from specviz.app.render.tokens import escape_text
from specviz.catalogue import DRAFTER_CATALOGUE
from specviz.models import convert
from specviz.models.presets import EMBEDDED_DRAFT_DIR, EMBEDDED_HEAD_DIR

EAGLE_PAPER = "https://arxiv.org/abs/2401.15077"
TARGET_NAME = convert.FOLDER_NAME


def read_json(path: Path) -> dict:
    """A shipped JSON file, or {} where it is missing or unreadable (the section then says less)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def llama_num_params(config: dict) -> int:
    """Parameters of a Llama-style model from its config.json: the token table (and an untied output
    head), per layer attention (q, k, v, o), the gated MLP (3 matrices) and two norms, and a final norm."""
    width, vocab, layers = config["hidden_size"], config["vocab_size"], config["num_hidden_layers"]
    head_dim = config.get("head_dim") or width // config["num_attention_heads"]
    queries = config["num_attention_heads"] * head_dim
    keys = config.get("num_key_value_heads", config["num_attention_heads"]) * head_dim
    attention = width * queries + 2 * width * keys + queries * width
    mlp = 3 * width * config["intermediate_size"]
    table = vocab * width * (1 if config.get("tie_word_embeddings", True) else 2)
    return table + layers * (attention + mlp + 2 * width) + width


def head_num_params(config: dict) -> int:
    """The head: fc joining [the target's state ; the token's embedding] (2d → d), then its one-layer body
    (its vocabulary is 1: its inputs come as vectors, and it borrows the target's output head)."""
    width = config["hidden_size"]
    body = {**config, "tie_word_embeddings": True}  # a body without an output head of its own
    return (2 + len(config.get("target_layers") or ())) * width * width + llama_num_params(body)


@dataclass(frozen=True)
class DrafterFigures:
    """What the section says in numbers; None where the shipped file that holds it is missing."""

    draft_params: int | None  # the draft model's parameters, from its config.json
    draft_table_params: int | None  # of which its token table (tied: also its output head)
    draft_layers: int | None
    draft_width: int | None
    head_params: int | None  # the head's, from its config.json (fc + one layer)
    head_width: int | None
    target_params: int | None  # the target's, from its converted config.json (None: not converted here)
    target_layers: int | None
    # Top-1 agreement with the target, one step ahead, from the draft model's card: (text, draft, head).
    agreement: tuple[tuple[str, float, float], ...] = ()


def agreement_rows(card_text: str) -> tuple[tuple[str, float, float], ...]:
    """The draft model card's table of top-1 agreement, "| text | this draft | the first draft | the head |":
    the rows on the target's own answers to prompts neither drafter trained on, as (text without its
    parenthesis, this draft, the head)."""
    rows = []
    for line in card_text.splitlines():
        cells = [cell.strip().strip("*") for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("the target's"):
            continue
        try:
            draft, head = float(cells[1]), float(cells[3])
        except ValueError:
            continue
        rows.append((re.sub(r"\s*\([^)]*\)", "", cells[0]), draft, head))
    return tuple(rows)


def read_drafter_figures(draft_dir: Path = EMBEDDED_DRAFT_DIR, head_dir: Path = EMBEDDED_HEAD_DIR,
                         target_dir: Path | None = None) -> DrafterFigures:
    """The figures the section shows, read from the shipped folders (and the converted target's)."""
    draft, head = read_json(draft_dir / "config.json"), read_json(head_dir / "config.json")
    target = read_json((target_dir or convert.converted_dir()) / "config.json")
    card = (draft_dir / "README.md").read_text() if (draft_dir / "README.md").is_file() else ""
    return DrafterFigures(
        draft_params=llama_num_params(draft) if draft else None,
        draft_table_params=draft["vocab_size"] * draft["hidden_size"] if draft else None,
        draft_layers=draft.get("num_hidden_layers"),
        draft_width=draft.get("hidden_size"),
        head_params=head_num_params(head) if head else None,
        head_width=head.get("hidden_size"),
        target_params=llama_num_params(target) if target else None,
        target_layers=target.get("num_hidden_layers"),
        agreement=agreement_rows(card),
    )


def millions(count: int | None) -> str:
    return "?" if count is None else f"{count / 1e6:.1f} M"


# The diagram's boxes, by whose part each is: the target's (blue), the drafter's own (pink), neither.
BOX_STYLES = {whose: ("display:inline-block;padding:3px 8px;margin:2px 0;border-radius:6px;"
                      f"border:1px solid {border};background:{fill};font-size:12.5px;white-space:nowrap")
              for whose, border, fill in (("target", "#0072B2", "#e3eef8"), ("own", "#CC79A7", "#f7e6ef"),
                                          ("plain", "#bbb", "#f6f6f6"))}
ARROW = '<span style="color:#888;margin:0 4px">→</span>'


def box(text: str, whose: str) -> str:
    return f'<span style="{BOX_STYLES[whose]}">{escape_text(text)}</span>'


def figure_words(figures: DrafterFigures) -> dict[str, object]:
    """The figures as the catalogue's words name them: parameter counts in millions, "?" where unknown."""
    return {name: millions(value) if name.endswith("_params") else "?" if value is None else value
            for name, value in vars(figures).items()}


def diagram_html(figures: DrafterFigures) -> str:
    """Each drafter's path from what it reads to its guess, left to right, wrapping on a narrow screen."""
    words = figure_words(figures)
    rows = [f'<div class="drafter-path" style="margin:6px 0;line-height:2"><b style="display:inline-block;'
            f'min-width:11em">{escape_text(info.label)}</b> '
            + ARROW.join(" + ".join(box(text.format(**words), whose) for text, whose in step) for step in info.diagram)
            + "</div>" for info in DRAFTER_CATALOGUE if info.diagram]
    legend = (f'<div style="font-size:12px;color:#555">{box("blue", "target")} the target\'s own parts, '
              f'computed anyway · {box("pink", "own")} the drafter\'s own weights</div>')
    return f'<figure class="drafters-diagram" style="margin:8px 0">{"".join(rows)}{legend}</figure>'


def sizes_html(figures: DrafterFigures) -> str:
    target = (f"{millions(figures.target_params)} parameters in {figures.target_layers} layers"
              if figures.target_params else "about 135 M parameters, by its name")
    words = figure_words(figures)
    items = [
        f"<b>The target</b>, {TARGET_NAME}, for scale: {target}. Every drafter's guesses are checked by it, "
        "in one pass per round.",
        *(info.about.format(**words) for info in DRAFTER_CATALOGUE if info.about),
    ]
    return "<ul>" + "".join(f"<li style='margin-bottom:4px'>{item}</li>" for item in items) + "</ul>"


def agreement_sentence(figures: DrafterFigures) -> str:
    """The measured agreement of the two learnt drafters with the target, as the model card gives it."""
    if not figures.agreement:
        return ""
    listed = "; ".join(f"on {escape_text(text)}, the head {head:.2f} and the draft model {draft:.2f}"
                       for text, draft, head in figures.agreement)
    return (f" Measured, how often each one's first guess is the target's own next token (from the draft model's "
            f"card): {listed}. Both were trained "
            "on the same signal from the target, so the difference is what reading the target's state buys.")


def drafters_about_html(figures: DrafterFigures | None = None) -> str:
    """The "About the drafters" section: a diagram, each drafter's inputs and size, why the head guesses
    better (with the model cards' figures), what EAGLE is, and what rival guesses are."""
    figures = figures or read_drafter_figures()
    why = (
        "<p><b>Why the head guesses better.</b> The target's last hidden state is what the target was "
        "\"thinking\" just before it picked its token: its reading of the whole text so far. A separate draft model "
        "has to rebuild that reading from the text with a few small layers; the head starts from it, so one layer is "
        f"enough to guess where the target is heading.{agreement_sentence(figures)}</p>"
    )
    eagle = (
        f'<p><b>What EAGLE is.</b> <a href="{EAGLE_PAPER}" target="_blank" rel="noopener">EAGLE</a> (Li et al. '
        "2024) drafts at the feature level: instead of predicting the next token from the text, a small network "
        "predicts the target's next hidden state from its current one and the token just chosen, and the target's "
        "own output head turns that state into token probabilities. EAGLE-2 adds trees of guesses shaped by the "
        "drafter's confidence, EAGLE-3 reads several of the target's layers. specviz's head has EAGLE's shape, "
        "trained on this target's own answers, nearly all in English: on a request in another language it "
        "guesses right less often, and speculation may not pay there.</p>"
    )
    rivals = (
        "<p><b>Rival guesses.</b> Where the drafter is unsure of a round's first token (greedy runs only), it also "
        "offers its next likeliest tokens for that same place, and the target checks them all in the same single "
        "pass. If one of them is the target's own pick, the round keeps it instead of ending at its first token: the "
        "lane shows the drafter's first pick struck through and the rival the target took right after it.</p>"
    )
    exact = ("<p>Whichever drafter guesses, the target checks the guesses by the same rule, so the text is the "
             "target's either way: a better drafter only makes it faster.</p>")
    intro = ("<p>A <b>drafter</b> guesses the next few tokens cheaply; the target then checks all the guesses in one "
             "pass. The drafters here differ in what they read to make their guesses:</p>")
    return (f'<div class="drafters-about">{intro}{diagram_html(figures)}{sizes_html(figures)}{why}{eagle}'
            f"{rivals}{exact}</div>")
