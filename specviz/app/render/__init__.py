"""Runs → HTML, with no gradio and no models: one module per part of the page.

- `tokens`: one token as HTML (escaping, visible whitespace, its kind's style), the legend, a status line;
- `lanes`: each lane's coloured text as it grows, and `RunView`, the run the page keeps;
- `stats`: one column per lane, measured speedup against the theory, the token-by-token check;
- `inspector`: one round up close;
- `explain`: the algorithm, pointed at this run's own tokens.
"""

from specviz.app.render.explain import explain_html
from specviz.app.render.inspector import default_round, find_round, inspector_html, round_choices
from specviz.app.render.lanes import LaneView, RoundTexts, RunView, lane_status, lanes_html, stop_text
from specviz.app.render.stats import stats_dict, stats_html
from specviz.app.render.tokens import escape_text, legend_html, status_html, token_span

__all__ = [
    "LaneView", "RoundTexts", "RunView", "default_round", "escape_text", "explain_html",
    "find_round", "inspector_html", "lane_status", "lanes_html", "legend_html", "round_choices", "stats_dict",
    "stats_html", "status_html", "stop_text", "token_span",
]
