"""Easy and hard tokens, drawn: acceptance against the target's confidence at each drafted position, each
judged draft a point over its bucket's share accepted, and under the chart one sentence in the drafts' own
numbers (specviz.analysis.confidence). The run's page and the γ sweep both draw it.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Mapping, Sequence

import plotly.graph_objects as go

from specviz.analysis.confidence import ConfidenceBucket, JudgedDraft, bucket_drafts, confidence_sentence, judged_drafts
from specviz.analysis.trace import Trace
from specviz.app.palette import COLORS
from specviz.app.render.pieces import PART_LABEL
from specviz.app.plots import PAGE_LEGEND_ROWS, ROUNDS_AT_LANE_END, base_figure, label_of, two_line_title, with_hint

if TYPE_CHECKING:  # annotations only
    from specviz.app.render.lanes import LaneView

TITLE = two_line_title("Easy and hard tokens:", "acceptance against how sure the target was")
X_TITLE = "how sure the target was (its top probability there)"
JITTER = 0.07  # how far a point may sit from 0 or 1, so a bucket's many points stay apart
BAR_FILL = "rgba(0, 158, 115, 0.22)"  # COLORS["accepted"], faint: the points stay in front


def spread(index: int) -> float:
    """A fixed offset in [−JITTER, JITTER] for the index-th point (golden-ratio steps: even, and the
    same on every redraw, so points do not jump while a run streams)."""
    return ((index * 0.6180339887) % 1.0 - 0.5) * 2 * JITTER


def acceptance_by_confidence(drafts: Sequence[JudgedDraft], labels: Mapping[int, str], title: str = TITLE,
                             hint: str = ROUNDS_AT_LANE_END) -> go.Figure:
    """Per-bucket share accepted (bars) with every judged draft over it (points: y 1 accepted, 0 rejected,
    spread a little so points do not hide each other)."""
    figure = base_figure(title, X_TITLE, "share accepted · each point a draft", legend_rows=PAGE_LEGEND_ROWS)
    if not drafts:
        return with_hint(figure, hint)
    buckets = bucket_drafts(drafts)
    add_bucket_bars(figure, buckets)
    for accepted, name in ((True, "accepted draft"), (False, "rejected draft")):
        chosen = [(i, draft) for i, draft in enumerate(drafts) if draft.accepted == accepted]
        if not chosen:
            continue
        figure.add_scatter(
            x=[draft.target_confidence for _, draft in chosen],
            y=[(1.0 if accepted else 0.0) + spread(i) for i, _ in chosen],
            mode="markers", name=name, meta="accepted" if accepted else "rejected",
            marker={"size": 8, "color": COLORS["accepted" if accepted else "rejected"], "opacity": 0.85,
                    "symbol": "circle" if accepted else "x", "line": {"width": 0.5, "color": "#fff"}},
            hovertext=[label_of(draft.token_id, labels) for _, draft in chosen],
            customdata=[[draft.round_index + 1, draft.draft_index + 1,
                         "" if draft.gamma is None else f" of a run at γ = {draft.gamma}"] for _, draft in chosen],
            hovertemplate=("%{hovertext}: the target was %{x:.0%} sure · " + ("accepted" if accepted else "rejected")
                           + "<br>round %{customdata[0]}, draft %{customdata[1]}%{customdata[2]}<extra></extra>"),
        )
    # Each band's count under it, so a band where nothing was accepted (a bar of height 0) still says so; on two
    # level lines, since a phone's chart tilted one-line labels and lost the last band's past its edge.
    figure.update_layout(xaxis={"range": [-0.02, 1.02], "tickvals": [(b.low + b.high) / 2 for b in buckets],
                                "ticktext": [band_label(bucket) for bucket in buckets], "tickangle": 0},
                         yaxis={"range": [-0.15, 1.15], "tickvals": [0, 0.5, 1], "ticktext": ["0 rejected", "50%", "1 accepted"]})
    return figure


def band_label(bucket: ConfidenceBucket) -> str:
    """A band's tick: its range, then its drafts accepted of judged."""
    return f"{bucket.low:.0%}–{bucket.high:.0%}<br>{bucket.num_accepted}/{bucket.num_drafts}"


def run_chart(speculative: Trace, labels: Mapping[int, str], drafts: Sequence[JudgedDraft] | None = None) -> go.Figure:
    """The run's chart (`drafts`: judged_drafts(speculative), where the caller has them already), with a
    hint that says why it is empty: drafting has not started, or a recording made before specviz kept
    the target's confidence."""
    drafts = judged_drafts(speculative) if drafts is None else drafts
    if not drafts and speculative.num_examined:
        return acceptance_by_confidence(drafts, labels, hint="this recording predates the target's confidence: run it live")
    return acceptance_by_confidence(drafts, labels)


def drafted_labels(lane: LaneView) -> dict[int, str]:
    """Each drafted token's text as the lane shows it (with its leading space), then the lane's other labels."""
    labels = dict(lane.labels)
    for event in lane.trace.rounds:
        texts = lane.round_texts.get(event.round_index)
        for index, token in enumerate(event.drafted):
            if texts is not None and index < len(texts.drafted):
                labels[token.token_id] = texts.drafted[index] or labels.get(token.token_id, PART_LABEL)
    return labels


def add_bucket_bars(figure: go.Figure, buckets: Sequence[ConfidenceBucket]) -> None:
    """Each bucket's share accepted, as a bar across the bucket, with its count."""
    shown = [bucket for bucket in buckets if bucket.num_drafts]
    figure.add_bar(
        x=[(bucket.low + bucket.high) / 2 for bucket in shown],
        y=[bucket.rate for bucket in shown],
        width=[(bucket.high - bucket.low) * 0.96 for bucket in shown],
        name="share accepted in each band", meta="buckets", marker={"color": BAR_FILL, "line": {"width": 0}},
        showlegend=False,  # the y axis and each bar's text name it; a third entry wrapped over the title on a phone
        text=[f"{bucket.rate:.0%} of {bucket.num_drafts}" for bucket in shown], textposition="inside",
        insidetextanchor="middle", textfont={"color": "#225"},
        customdata=[[bucket.label, bucket.num_accepted, bucket.num_drafts] for bucket in shown],
        hovertemplate="target %{customdata[0]} sure: %{customdata[1]} of %{customdata[2]} accepted (%{y:.0%})<extra></extra>",
    )


def confidence_note_html(drafts: Sequence[JudgedDraft], where: str = "this run") -> str:
    """The sentence under the chart: what it shows, in these drafts' numbers."""
    return (f'<p class="confidence-note" data-drafts="{len(drafts)}" style="margin:0 0 8px 4px;color:#444">'
            f"{escape(confidence_sentence(drafts, where), quote=False)}</p>")
