"""A tree round drawn from its event: the draft tree the one target pass checked, and beside it the mask
that pass saw (who sees whom). Each node's words come from the inspector's renderer
(specviz.app.render.tree_round), so the hover and the inspector's table say the same thing.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.app.palette import COLORS
from specviz.app.plots import HEIGHT, quoted, separate_title_and_legend
from specviz.decoding.events import RoundEvent, TreeNode

ROOT = -1  # the last committed token: every depth-1 guess hangs from it
ROOT_COLOR = "#555555"
EDGE_COLOR = "#c8c8c8"
# How each kind of entry is named in the legend; the colours are the page's (palette.COLORS).
KIND_NAMES = {
    "accepted": "accepted path",
    "rejected": "rejected (struck)",
    "unexamined": "never examined",
    "resample": "the target's own token",
    "bonus": "bonus (the target's own, free)",
}
ROW_PX = 70  # height per depth level, so labels of a deep tree do not collide
NODE_SIZE = 16
LABEL_CHARS = 12  # a node's or the mask's label, quoted


@dataclass(frozen=True)
class PlacedNode:
    """One entry of a tree round's drawing: a drafted node, the target's own token, or the root."""

    index: int  # into RoundEvent.nodes; ROOT for the last committed token
    parent: int | None  # None for the root
    x: float
    y: float  # -depth: the root at 0, its children at -1, …
    kind: str  # accepted / rejected / unexamined / resample / bonus, or "root"
    color: str
    on_path: bool  # on the path the target kept (the root, the accepted nodes, the target's own token)


def children_in_order(nodes: Sequence[TreeNode]) -> dict[int, list[int]]:
    """Each entry's children in the tree's order (the drafter's likeliest first; the target's token last)."""
    children: dict[int, list[int]] = {ROOT: []}
    for index, node in enumerate(nodes):
        children.setdefault(node.parent, []).append(index)
        children.setdefault(index, [])
    return children


def lay_out_tree(nodes: Sequence[TreeNode]) -> list[PlacedNode]:
    """Where each entry of a tree round sits: the root (the last committed token) on top, then the entries in
    their own order, each one row below its parent. Leaves take x = 0, 1, 2, … in depth-first order, a parent
    sits at the mean of its children, so no two edges cross and the walk's order reads left to right."""
    children = children_in_order(nodes)
    xs: dict[int, float] = {}
    next_leaf = [0.0]

    def place(index: int) -> float:
        below = children[index]
        if below:
            xs[index] = sum(place(child) for child in below) / len(below)
        else:
            xs[index], next_leaf[0] = next_leaf[0], next_leaf[0] + 1
        return xs[index]

    place(ROOT)
    placed = [PlacedNode(ROOT, None, xs[ROOT], 0.0, "root", ROOT_COLOR, True)]
    for index, node in enumerate(nodes):
        on_path = node.verdict in ("accepted", "resample", "bonus")
        placed.append(PlacedNode(index, node.parent, xs[index], -float(node.depth), node.verdict,
                                 COLORS[node.verdict], on_path))
    return placed


def sees_matrix(parents: Sequence[int]) -> list[list[bool]]:
    """The tree mask the target's verify used, one row per drafted node: column 0 the text before the
    round (every node sees all of it), then one column per node: itself and its ancestors, never
    another branch (the rule forward.tree_layout builds as a 4D attention mask)."""
    rows: list[list[bool]] = []
    for node, parent in enumerate(parents):
        row = list(rows[parent]) if parent >= 0 else [True] + [False] * len(parents)
        row[1 + node] = True
        rows.append(row)
    return rows


def plotly_text(text: str) -> str:
    """Plain words for a plotly label or hover: escaped (a token may be '<'), lines broken with <br>."""
    return html.escape(text, quote=False).replace("\n", "<br>")


def node_label(text: str, node: TreeNode) -> str:
    """A node's label: its token (struck through where rejected), and the drafter's probability of it."""
    token = plotly_text(quoted(text, LABEL_CHARS))
    token = f"<s>{token}</s>" if node.verdict == "rejected" else token
    if node.verdict in ("resample", "bonus"):
        return f"<b>{token}</b>"
    return f"{token}<br>q {node.draft_prob:.2f}"


def add_edges(figure: go.Figure, placed: Sequence[PlacedNode]) -> None:
    """An edge from each entry to its parent: the kept path thick and green, the others thin and grey."""
    at = {entry.index: entry for entry in placed}
    for on_path, color, width in ((False, EDGE_COLOR, 1.5), (True, COLORS["accepted"], 3.5)):
        xs, ys = [], []
        for entry in placed[1:]:
            if entry.on_path == on_path:
                parent = at[entry.parent]
                xs += [parent.x, entry.x, None]
                ys += [parent.y, entry.y, None]
        figure.add_scatter(x=xs, y=ys, mode="lines", line={"color": color, "width": width}, hoverinfo="skip",
                           showlegend=False, row=1, col=1)


def add_nodes(figure: go.Figure, placed: Sequence[PlacedNode], nodes: Sequence[TreeNode], texts: Sequence[str],
              lines: Sequence[str], root_line: str) -> None:
    """One trace per kind of entry (its legend entry), each node labelled and hovered with its plain line."""
    root = placed[0]
    figure.add_scatter(x=[root.x], y=[root.y], mode="markers+text", text=["text so far"], textposition="top center",
                       marker={"color": ROOT_COLOR, "size": NODE_SIZE - 4, "symbol": "square"},
                       hovertext=[plotly_text(root_line)], hoverinfo="text", showlegend=False, row=1, col=1)
    for kind, name in KIND_NAMES.items():
        entries = [entry for entry in placed[1:] if entry.kind == kind]
        if not entries:
            continue
        hollow = kind == "unexamined"  # grey and hollow: the walk never reached it
        figure.add_scatter(
            x=[entry.x for entry in entries], y=[entry.y for entry in entries], mode="markers+text", name=name,
            text=[node_label(texts[entry.index], nodes[entry.index]) for entry in entries], textposition="bottom center",
            textfont={"color": "#9a9a9a" if hollow else "#1a1a1a", "size": 12},
            marker={"color": "#ffffff" if hollow else COLORS[kind], "size": NODE_SIZE,
                    "symbol": "x" if kind == "rejected" else "circle", "line": {"color": COLORS[kind], "width": 2}},
            hovertext=[plotly_text(lines[entry.index]) for entry in entries], hoverinfo="text",
            customdata=[entry.index for entry in entries], row=1, col=1,
        )


def add_mask(figure: go.Figure, nodes: Sequence[TreeNode], texts: Sequence[str]) -> None:
    """The mask as a small heatmap: a row per drafted node, the text as one column, then the nodes."""
    drafted = [node for node in nodes if node.verdict not in ("resample", "bonus")]
    sees = sees_matrix([node.parent for node in drafted])
    names = [f"{i + 1} {quoted(texts[i], LABEL_CHARS)}" for i in range(len(drafted))]
    columns = ["text", *names]
    hover = [[plotly_text(f"{row_name} {'sees' if seen else 'does not see'} {column}"
                          f"{'' if seen else ' (another branch, or below it)'}")
              for column, seen in zip(columns, row)] for row_name, row in zip(names, sees)]
    figure.add_heatmap(z=[[int(seen) for seen in row] for row in sees], x=columns, y=names, text=hover,
                       hoverinfo="text", showscale=False, xgap=1, ygap=1, zmin=0, zmax=1,
                       colorscale=[[0, "#f2f2f2"], [1, COLORS["target"]]], row=1, col=2)
    figure.update_yaxes(autorange="reversed", type="category", tickfont={"size": 10}, row=1, col=2)
    figure.update_xaxes(type="category", tickangle=-60, tickfont={"size": 10}, row=1, col=2,
                        title={"text": "the mask the target saw:<br>who sees whom", "font": {"size": 11}, "standoff": 4})


def tree_figure(event: RoundEvent, texts: Sequence[str], lines: Sequence[str], root_line: str, title: str) -> go.Figure:
    """The round's tree (left) and the mask the target saw (right). `texts` and `lines` hold each node's
    text and plain hover line (the inspector's renderer words them)."""
    placed = lay_out_tree(event.nodes)
    figure = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.12)
    add_edges(figure, placed)
    add_nodes(figure, placed, event.nodes, texts, lines, root_line)
    add_mask(figure, event.nodes, texts)
    depth = max(node.depth for node in event.nodes)
    width = max(entry.x for entry in placed)
    figure.update_xaxes(visible=False, range=[-0.7, width + 0.7], row=1, col=1)
    figure.update_yaxes(visible=False, range=[-depth - 0.7, 0.5], row=1, col=1)
    figure.update_layout(title={"text": title, "font": {"size": 14}}, template="plotly_white",
                         margin={"l": 10, "r": 10, "b": 60}, hoverlabel={"align": "left"}, showlegend=True)
    separate_title_and_legend(figure, legend_rows=2)  # five kinds wrap to two rows beside the table
    figure.update_layout(height=figure.layout.height + max(0, ROW_PX * (depth + 1) - HEIGHT + 90))  # deep trees grow
    return figure
