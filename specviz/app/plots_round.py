"""One round, drawn from its event for the inspector and step mode: its draft forwards one after another, then
the one target forward that checked them all, its rows stacked from the forward's start to its end (it computes
them together: that is the whole trick), on the lane's clock of "Where the time went" (specviz.analysis.trace).
The rows the text kept are lit; the rows under the cut both caches drop. The words the drawing uses (a row, a
dropped row, an unused row) are said under it, in this module's words.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Mapping

import plotly.graph_objects as go

from specviz.analysis.trace import Trace, round_blocks, round_start_s
from specviz.app.palette import COLORS
from specviz.app.plots import base_figure, decision_distributions, quoted, with_hint
from specviz.app.plots_tree import tree_figure
from specviz.app.render.lanes import RoundTexts
from specviz.app.render.rule import (
    TREE_UNUSED_ROW, draft_forward_reason, draft_row_reason, last_row_reason, plain_row_reason, rival_row_reason,
    tree_own_row_reason, tree_row_reason,
)
from specviz.app.render.tree_round import figure_words
from specviz.app.wording import count
from specviz.decoding.events import RoundEvent, TokenKind

# The drafter's forwards on one line at the top; the verify's rows under it, one line each (row_y), with room
# between them for the verify's name.
DRAFT_ROW, TARGET_ROW = 1.6, 0.0
# each row's colour by its token's kind; a plain target step (nothing drafted) is grey, as in Where the time went
ROW_COLOURS = {**COLORS, "target": "#7f7f7f"}
DRAFT_HEIGHT, TARGET_HEIGHT = 0.8, 0.8  # tall enough for a draft's token in its block
ROW_PX = 22  # one line of the chart: the drafter's, or one row of the verify
TITLE_PX = 62  # the title's two lines
BOTTOM_PX = 48  # the time axis and its title, above the words
WORDS_LINE_PX = 16
WORDS_LINE_CHARS = 70  # what one line of the words holds at the width a phone's chart is laid out at (ui.PHONE_CHART_PX)
ROW_LABEL_CHARS = 26  # a row's name beside it; longer ones are cut, whole in the row's hover
LABEL_CHAR_PX = 7  # about one character of a row's name, to give the names their margin

X_TITLE = "seconds, on the timeline's clock"  # short: the rows' names take the chart's left
# The drawing's words, each explained where it is used: under the chart, and in the hovers.
UNUSED = "unused"
ONE_PASS_TEXT = "1 target forward: all rows at once"
CUT_TEXT = "cut"
ROW_WORDS = "A row: one position the target scores in this forward."
DROPPED_WORDS = "Past the cut: drafts not kept, their keys and values dropped from both caches."
GUESS_WORDS = "? your guess first: how many drafts will these rows keep?"  # step mode, before the verdicts
UNUSED_WORDS = "Unused: scored, for a position the text never reached."


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
    if event.gamma == 0:  # nothing drafted: one plain step
        own = text_at(texts.own, 0)
        return [Cell(own, "target", plain_row_reason(own))]
    cells = []
    for index in range(len(event.drafted)):
        name, verdict, fix = text_at(texts.drafted, index), event.verdict(index), text_at(texts.own, 0)
        shown = {"accepted": f"✓ {name}", "rejected": f"✗ {name} → {fix}"}.get(verdict, name)
        cells.append(Cell(shown, verdict, draft_row_reason(index + 1, name, verdict, greedy, fix)))
        if index == 0:
            for rival_index in (i for i in range(len(event.guesses)) if i != event.shown_guess):
                rival_name = text_at(texts.guesses, rival_index)
                cells.append(Cell(f"rival {rival_name}", "unexamined", rival_row_reason(rival_name)))
    if event.next_kind == "bonus" and len(event.emitted_ids) > event.num_kept_drafts:
        bonus = text_at(texts.own, len(texts.own) - 1)
        cells.append(Cell(f"+ {bonus}", "bonus", last_row_reason(bonus)))
    else:
        cells.append(Cell(UNUSED, "unexamined", last_row_reason(None)))
    return cells


def tree_cells(event: RoundEvent, texts: RoundTexts) -> list[Cell]:
    """A tree's rows: one per drafted node, in the order the verify took them, then the target's own token."""
    cells = []
    for index, node in enumerate(event.nodes):
        name = text_at(texts.nodes, index)
        if node.verdict in ("resample", "bonus"):
            cells.append(Cell(f"+ {name}" if node.verdict == "bonus" else f"→ {name}", node.verdict,
                              tree_own_row_reason(name)))
            continue
        mark = {"accepted": "✓ ", "rejected": "✗ "}.get(node.verdict, "")
        cells.append(Cell(f"{mark}{name}", node.verdict, tree_row_reason(name, node.depth, node.verdict)))
    if len(cells) < event.num_verify_rows:  # an accepted end-of-text: the row below it went unused
        cells.append(Cell(UNUSED, "unexamined", TREE_UNUSED_ROW))
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
    """The round's forwards on its lane's clock: thin draft blocks one after another, then one target block whose
    rows are stacked, each from the block's start to its end, since one forward computes them together; the words
    it uses said under it. `reveal` False (step mode, while a visitor guesses): the drafts in the draft's colour
    and the verify's rows unread, so nothing gives the verdicts away."""
    figure = base_figure("One round drawn", X_TITLE, "")
    if event is None or texts is None:
        return with_hint(figure, "pick a round")
    blocks = round_blocks(event, round_start_s(trace, event.round_index))
    drafts, verify = [block for block in blocks if block.is_draft], blocks[-1]
    for block, text in zip(drafts, draft_texts(event, texts)):
        kept = block.kind == "draft-kept"
        add_block(figure, block.start_s, block.duration_s, DRAFT_ROW, DRAFT_HEIGHT, text,
                  COLORS["accepted" if kept else "rejected"] if reveal else COLORS["draft"],
                  draft_forward_reason(f"{block.duration_s * 1000:.1f}", kept if reveal else None))
    cells = target_cells(event, texts, greedy) if reveal else unread_cells(event)
    for index, cell in enumerate(cells):
        add_block(figure, verify.start_s, verify.duration_s, row_y(index), TARGET_HEIGHT, "",
                  ROW_COLOURS[cell.kind], cell.hover)
    end_s = verify.start_s + verify.duration_s
    outline_verify(figure, verify.start_s, end_s, len(cells))
    start_s = drafts[0].start_s if drafts else verify.start_s
    cut = cut_index(event, cells) if reveal else None
    if cut is not None:
        mark_cut(figure, start_s, end_s, cut)
    words = explained_words(event, cells) if reveal else [GUESS_WORDS, ROW_WORDS]
    title = (anatomy_title(event, len(drafts)) if reveal else
             f"Round {event.round_index + 1}: {count(len(drafts), 'draft forward')}, then 1 target forward")
    lay_out(figure, title, [cell.text for cell in cells], (start_s, end_s), words)
    return figure


def row_y(index: int) -> float:
    """Where the verify's index-th row is drawn: under the drafter, the first row on top."""
    return TARGET_ROW - index


def unread_cells(event: RoundEvent) -> list[Cell]:
    """The verify's rows while a visitor guesses: how many, not what they say."""
    return [Cell(f"row {index + 1}: ?", "unexamined", f"{GUESS_WORDS} One target forward judges every draft at once.")
            for index in range(event.num_verify_rows)]


def outline_verify(figure: go.Figure, start_s: float, end_s: float, num_rows: int) -> None:
    """One outline round the verify's rows, and its name above them: they are one forward, not several."""
    top, bottom = TARGET_ROW + TARGET_HEIGHT / 2, row_y(num_rows - 1) - TARGET_HEIGHT / 2
    figure.add_shape(type="rect", x0=start_s, x1=end_s, y0=bottom, y1=top, line={"color": "#222", "width": 2})
    figure.add_annotation(x=end_s, y=top, text=ONE_PASS_TEXT, showarrow=False, xanchor="right", yanchor="bottom",
                          font={"size": 12, "color": "#222"})


def mark_cut(figure: go.Figure, start_s: float, end_s: float, cut: int) -> None:
    """The cut under the rejected row, across the chart: the rows below it are the ones the caches drop."""
    y = row_y(cut) - 0.5
    figure.add_shape(type="line", x0=start_s, x1=end_s, y0=y, y1=y, line={"color": "#222", "width": 2, "dash": "dash"})
    figure.add_annotation(x=start_s, y=y, text=CUT_TEXT, showarrow=False, xanchor="left", yanchor="bottom",
                          font={"size": 12, "color": "#222"})


def explained_words(event: RoundEvent, cells: list[Cell]) -> list[str]:
    """The words the drawing and its title use, each said once under it: a row always, the rows the caches drop
    and an unused row where the round has them."""
    words = [ROW_WORDS]
    if event.num_dropped_rows:
        words.append(DROPPED_WORDS)
    if any(cell.text == UNUSED for cell in cells):
        words.append(UNUSED_WORDS)
    return words


def lay_out(figure: go.Figure, title: str, row_texts: list[str], span_s: tuple[float, float], words: list[str]) -> None:
    """Each row named on the axis beside it (a block too narrow for its words hid them), the words under the
    axis, and a height that gives every row its line."""
    lines = [line for said in words for line in textwrap.wrap(said, WORDS_LINE_CHARS)]
    bottom = BOTTOM_PX + WORDS_LINE_PX * len(lines)
    top = TITLE_PX if "<br>" in title else TITLE_PX - 18
    lowest = row_y(len(row_texts) - 1) - 0.6
    names = ["drafter", *(short_label(text) for text in row_texts)]
    left = LABEL_CHAR_PX * max(len(name) for name in names) + 16
    # from the figure's left edge, under the names too (paper x 0 is the plot's edge, `left` to its right)
    figure.add_annotation(text="<br>".join(lines), xref="paper", yref="paper", x=0, xanchor="left", xshift=8 - left,
                          y=0, yanchor="top", yshift=-(BOTTOM_PX - 4), align="left", showarrow=False,
                          font={"size": 12, "color": "#444"})
    start_s, end_s = span_s
    figure.update_layout(
        title={"text": title}, showlegend=False, bargap=0, barmode="overlay",
        uniformtext={"minsize": 9, "mode": "hide"},  # a draft's token that does not fit its block is in its hover
        height=top + bottom + ROW_PX * (DRAFT_ROW + DRAFT_HEIGHT / 2 + 0.5 - lowest),
        yaxis={"tickvals": [DRAFT_ROW, *(row_y(index) for index in range(len(row_texts)))],
               "ticktext": names,
               "range": [lowest, DRAFT_ROW + DRAFT_HEIGHT / 2 + 0.5], "showgrid": False, "zeroline": False,
               "fixedrange": True, "automargin": True, "tickfont": {"size": 12}},
        xaxis={"range": [start_s, start_s + (end_s - start_s) * 1.02], "tickformat": ".3f"},
        margin={"l": left, "t": top, "b": bottom},
    )


def short_label(text: str) -> str:
    """A row's name as its axis shows it: a long one cut (the row's hover has it whole), so the chart keeps room."""
    return text if len(text) <= ROW_LABEL_CHARS else text[: ROW_LABEL_CHARS - 1] + "…"


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
