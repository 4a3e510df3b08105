"""The γ sweep, one section: the page's setup timed at every γ of a range (and as the page's tree beside the
chain), with the one recommended γ. `page`: its layout, handlers, wiring, chart and words (gradio);
`measure`: the bench's loop for one prompt as progress a page can draw and stop, and what the chart draws
(no gradio).
"""
