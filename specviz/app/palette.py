"""The one palette: the page, the charts and the terminal all colour tokens and lanes from here (each
lane's colour is declared with the lane, in specviz.catalogue, and gathered here)."""

from __future__ import annotations

from specviz.catalogue import LANE_CATALOGUE

# Okabe-Ito, a palette that stays distinct under the common colour-vision deficiencies.
COLORS = {
    "accepted": "#009E73",  # bluish green
    "rejected": "#D55E00",  # vermillion
    "unexamined": "#999999",  # grey
    "resample": "#E69F00",  # orange
    "bonus": "#0072B2",  # blue
    **{lane.name: lane.colour for lane in LANE_CATALOGUE},  # each lane's line: declared with the lane
    "draft": "#CC79A7",  # reddish purple: q
    "target": "#0072B2",  # p
    "residual": "#E69F00",  # norm(max(0, p - q))
}
INK = "#222222"  # the exact distribution and the measured points on the sections' charts: ink, so the lanes keep theirs

# How each kind of token looks on the page: Okabe-Ito colours as a tinted background and a solid underline,
# plus strike-through for drafts the target did not keep, so colour is never the only cue.
TOKEN_STYLES = {
    "target": "background:#ececec;border-bottom:2px solid #9a9a9a;",
    "accepted": f"background:#d4efe6;border-bottom:2px solid {COLORS['accepted']};",
    "rejected": f"background:#f8dccb;border-bottom:2px solid {COLORS['rejected']};color:#8a3300;"
    "text-decoration:line-through;text-decoration-thickness:2px;text-decoration-color:rgba(138,51,0,0.55);",
    "unexamined": "background:#f2f2f2;color:#9a9a9a;border-bottom:2px dotted #b0b0b0;text-decoration:line-through;"
    "text-decoration-color:rgba(120,120,120,0.6);",
    "resample": f"background:#f6d9a0;border-bottom:2px solid {COLORS['resample']};font-weight:600;",
    "bonus": f"background:#cfe2f3;border-bottom:2px solid {COLORS['bonus']};font-weight:600;",
}

# The terminal's approximation of the same kinds, as ANSI escape sequences.
ANSI = {
    "accepted": "\033[32m",  # green
    "rejected": "\033[31;9m",  # red, struck through
    "unexamined": "\033[90;9m",  # grey, struck through: drafted after the rejection
    "resample": "\033[38;5;208;1m",  # bold orange (256 colours), as on the page
    "bonus": "\033[36;1m",  # bold cyan
    "target": "",
}
ANSI_RESET = "\033[0m"
