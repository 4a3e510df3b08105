"""One round, drawn from its event for the inspector and step mode: its draft forwards one after another, then
the one target forward that checked them all, split into the rows it computed, on the lane's clock of "Where the
time went" (specviz.analysis.trace). The rows the text kept are lit; the rows after the cut both caches drop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import plotly.graph_objects as go

from specviz.analysis.trace import Trace, round_blocks, round_start_s
from specviz.app.palette import COLORS
from specviz.app.plots import base_figure, decision_distributions, quoted, with_hint
from specviz.app.plots_tree import tree_figure
from specviz.app.render.lanes import RoundTexts
from specviz.app.render.rule import OWN_PICK
from specviz.app.render.tree_round import figure_words
from specviz.app.wording import count
from specviz.decoding.events import RoundEvent, TokenKind

DRAFT_ROW, TARGET_ROW = 1.0, 0.0
# each row's colour by its token's kind; a plain target step (nothing drafted) is grey, as in Where the time went
ROW_COLOURS = {**COLORS, "target": "#7f7f7f"}
DRAFT_HEIGHT, TARGET_HEIGHT = 0.45, 0.7


@dataclass(frozen=True)
class Cell:
    """One row of the round's target forward, as drawn: its text in the block, its colour and its hover."""

    text: str
    kind: TokenKind
    hover: str


def deciding_chart(event: RoundEvent, texts: RoundTexts | None, labels: Mapping[int, str], greedy: bool) -> go.Figure:
    """The chart beside a round's words in the inspector and step mode: a tree round's tree beside its mask, else
    the deciding position's q, p and residual."""
    if event.is_tree and texts and texts.nodes:
        return tree_figure(event, **figure_words(event, texts.nodes, greedy))
    return decision_distributions(event, labels, greedy=greedy)


def text_at(texts: list[str], index: int) -> str:
    return quoted(texts[index]) if index < len(texts) else "…"


def chain_cells(event: RoundEvent, texts: RoundTexts, greedy: bool) -> list[Cell]:
    """A chain's γ + 1 rows (with a rival round's guesses after the first): each judges the draft at its place,
    the last gives the bonus where every draft was kept."""
    correction = OWN_PICK if greedy else "resampled"
    if event.gamma == 0:  # nothing drafted: one plain step
        own = text_at(texts.own, 0)
        return [Cell(own, "target", f"nothing drafted: one plain target step, which wrote {own}")]
    cells = []
    for index, token in enumerate(event.drafted):
        name, verdict = text_at(texts.drafted, index), event.verdict(index)
        where = f"the row that judges draft {index + 1}, {name}"
        if verdict == "accepted":
            cells.append(Cell(f"✓ {name}", "accepted", f"{where}: kept"))
        elif verdict == "rejected":
            fix = text_at(texts.own, 0)
            cells.append(Cell(f"✗ {name} → {fix}", "rejected",
                              f"{where}: rejected; the same row gives {correction} {fix}. The cut falls here."))
        else:
            cells.append(Cell(name, "unexamined", f"{where}: after the cut, never judged; its row is dropped"))
        if index == 0:
            for rival_index in (i for i in range(len(event.guesses)) if i != event.shown_guess):
                rival_name = text_at(texts.guesses, rival_index)
                cells.append(Cell(f"rival {rival_name}", "unexamined",
                                  f"a rival guess for draft 1, {rival_name}, checked in the same pass and not taken; "
                                  "its row is dropped"))
    if event.next_kind == "bonus" and len(event.emitted_ids) > event.num_kept_drafts:
        bonus = text_at(texts.own, len(texts.own) - 1)
        cells.append(Cell(f"+ {bonus}", "bonus", f"the last row: every draft kept, so it gives a bonus token, {bonus}"))
    else:
        cells.append(Cell("unused", "unexamined", "the last row: past the cut, unused"))
    return cells


def tree_cells(event: RoundEvent, texts: RoundTexts) -> list[Cell]:
    """A tree's rows: one per drafted node, in the order the verify took them, then the target's own token."""
    cells = []
    for index, node in enumerate(event.nodes):
        name = text_at(texts.nodes, index)
        if node.verdict in ("resample", "bonus"):
            cells.append(Cell(f"+ {name}" if node.verdict == "bonus" else f"→ {name}", node.verdict,
                              f"the target's own token, {name}: the row under the last kept node gives it"))
            continue
        what = {"accepted": "on the kept path", "rejected": "tried and rejected",
                "unexamined": "never tried: its row is dropped"}[node.verdict]
        mark = {"accepted": "✓ ", "rejected": "✗ "}.get(node.verdict, "")
        cells.append(Cell(f"{mark}{name}", node.verdict, f"node {name} at depth {node.depth}: {what}"))
    if len(cells) < event.num_verify_rows:  # an accepted end-of-text: the row below it went unused
        cells.append(Cell("unused", "unexamined", "the row below the last kept node: unused, the text had ended"))
    return cells


def target_cells(event: RoundEvent, texts: RoundTexts, greedy: bool) -> list[Cell]:
    return tree_cells(event, texts) if event.is_tree else chain_cells(event, texts, greedy)


def cut_index(event: RoundEvent, cells: list[Cell]) -> int | None:
    """The cell the cut follows: a chain's first rejection (a tree has no single cut: its kept path is lit)."""
    if event.is_tree:
        return None
    return next((index for index, cell in enumerate(cells) if cell.kind == "rejected"), None)


def draft_texts(event: RoundEvent, texts: RoundTexts) -> list[str]:
    """What each draft forward is drawn with: a chain's drafted token, a tree's depth."""
    if event.is_tree:
        return [f"depth {index + 1}" for index in range(event.num_draft_forwards)]
    shown = [text_at(texts.drafted, index) for index in range(len(event.drafted))]
    return shown + [""] * (event.num_draft_forwards - len(shown))  # a head's extra look-ahead: no token


def round_anatomy(trace: Trace, event: RoundEvent | None, texts: RoundTexts | None = None,
                  greedy: bool = False, reveal: bool = True) -> go.Figure:
    """The round's forwards on its lane's clock: thin draft blocks, then one wide target block split by row.
    `reveal` False (step mode, while a visitor guesses): the drafts in the draft's colour and the verify as one
    block still to be read, so nothing gives the verdicts away."""
    figure = base_figure("One round drawn", "seconds of model work, on the timeline's clock", "")
    if event is None or texts is None:
        return with_hint(figure, "pick a round")
    blocks = round_blocks(event, round_start_s(trace, event.round_index))
    drafts, verify = [block for block in blocks if block.is_draft], blocks[-1]
    for block, text in zip(drafts, draft_texts(event, texts)):
        kept = block.kind == "draft-kept"
        fate = f": its token {'kept' if kept else 'thrown away'}" if reveal else ""
        add_block(figure, block.start_s, block.duration_s, DRAFT_ROW, DRAFT_HEIGHT, text,
                  COLORS["accepted" if kept else "rejected"] if reveal else COLORS["draft"],
                  f"a draft forward, {block.duration_s * 1000:.1f} ms{fate}")
    cells = (target_cells(event, texts, greedy) if reveal else
             [Cell("? your guess first", "unexamined", "one target forward judges every draft at once")])
    width = verify.duration_s / len(cells)
    for index, cell in enumerate(cells):
        add_block(figure, verify.start_s + index * width, width, TARGET_ROW, TARGET_HEIGHT, cell.text,
                  ROW_COLOURS[cell.kind], cell.hover)
    # one outline round the target's rows: they are one forward, not several
    figure.add_shape(type="rect", x0=verify.start_s, x1=verify.start_s + verify.duration_s, y0=TARGET_ROW - TARGET_HEIGHT / 2,
                     y1=TARGET_ROW + TARGET_HEIGHT / 2, line={"color": "#222", "width": 2})
    cut = cut_index(event, cells) if reveal else None
    if cut is not None:
        x = verify.start_s + (cut + 1) * width
        figure.add_shape(type="line", x0=x, x1=x, y0=TARGET_ROW - 0.6, y1=DRAFT_ROW + 0.4,
                         line={"color": "#222", "width": 2, "dash": "dash"})
        figure.add_annotation(x=x, y=DRAFT_ROW + 0.45, text="cut", showarrow=False, yanchor="bottom")
    start = drafts[0].start_s if drafts else verify.start_s
    figure.update_layout(
        title={"text": anatomy_title(event, len(drafts)) if reveal else
               f"Round {event.round_index + 1}: {count(len(drafts), 'draft forward')}, then 1 target forward"},
        showlegend=False, bargap=0, barmode="overlay",
        uniformtext={"minsize": 9, "mode": "hide"},  # a token that does not fit its block is in its hover
        yaxis={"tickvals": [TARGET_ROW, DRAFT_ROW], "ticktext": ["target", "drafter"], "range": [-0.6, 1.8],
               "showgrid": False, "zeroline": False, "fixedrange": True},
        xaxis={"range": [start, verify.start_s + verify.duration_s * 1.02], "tickformat": ".3f"},
        margin={"l": 60},
    )
    return figure


def add_block(figure: go.Figure, start_s: float, duration_s: float, row: float, height: float, text: str,
              colour: str, hover: str) -> None:
    figure.add_bar(orientation="h", base=[start_s], x=[duration_s], y=[row], width=height, text=[text],
                   textposition="inside", insidetextanchor="middle", textangle=0, textfont={"color": "white"},
                   marker={"color": colour, "line": {"width": 1, "color": "white"}},
                   hovertext=[hover], hoverinfo="text")


def anatomy_title(event: RoundEvent, num_drafts: int) -> str:
    """Two short lines (a long one was clipped on a phone): the forwards, then what the round kept and dropped."""
    drafting = count(num_drafts, "draft forward")
    if event.gamma == 0:
        drafting = "nothing drafted"
    elif num_drafts == 0:
        drafting = "drafts copied, no draft forward"
    kept = f"{count(event.num_kept_drafts, 'draft')} kept; the caches drop {count(event.num_dropped_rows, 'row')}"
    return (f"Round {event.round_index + 1}: {drafting}, 1 target forward over {count(event.num_verify_rows, 'row')}"
            f"<br><span style='font-size:12px'>{kept}</span>")
