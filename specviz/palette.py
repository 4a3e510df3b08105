"""The one palette: the page, the charts and the terminal all colour tokens and lanes from here."""

from __future__ import annotations

# Okabe-Ito, a palette that stays distinct under the common colour-vision deficiencies.
COLORS = {
    "accepted": "#009E73",  # bluish green
    "rejected": "#D55E00",  # vermillion
    "unexamined": "#999999",  # grey
    "resample": "#E69F00",  # orange
    "bonus": "#0072B2",  # blue
    "baseline": "#555555",  # the target-only lane
    "speculative": "#0072B2",
    "draft": "#CC79A7",  # reddish purple: q
    "target": "#0072B2",  # p
    "residual": "#E69F00",  # norm(max(0, p - q))
}

# The terminal's approximation of the same kinds, as ANSI escape sequences.
ANSI = {
    "accepted": "\033[32m",  # green
    "rejected": "\033[31;9m",  # red, struck through
    "unexamined": "\033[90;9m",  # grey, struck through: drafted after the rejection
    "resample": "\033[33;1m",  # bold yellow
    "bonus": "\033[36;1m",  # bold cyan
    "target": "",
}
ANSI_RESET = "\033[0m"
