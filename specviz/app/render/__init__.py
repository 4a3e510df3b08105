"""Runs → HTML, with no gradio and no models: one module per part of the page (specviz/README.md's map)."""

from specviz.app.render.explain import explain_html
from specviz.app.render.lanes import LaneView, RoundTexts, RunView, lane_status, lanes_html, stop_text
from specviz.app.render.stats import stats_dict, stats_html
from specviz.app.render.tokens import escape_text, legend_html, status_html, token_span

__all__ = [
    "LaneView", "RoundTexts", "RunView", "escape_text", "explain_html", "lane_status", "lanes_html", "legend_html",
    "stats_dict", "stats_html", "status_html", "stop_text", "token_span",
]
