"""About the drafters' layout: the section folded under the page, its HTML (`words`) drawn once when the page is
built."""

from __future__ import annotations

import gradio as gr

from specviz.app.drafters_about.words import drafters_about_html


def build_drafters_about() -> None:
    """The folded section, inside the Blocks being built: nothing in it changes with a run."""
    with gr.Accordion("About the drafters: what each one reads, how big it is, why the head guesses better",
                      open=False, elem_id="drafters-about-section"):
        gr.HTML(drafters_about_html(), elem_id="drafters-about")
