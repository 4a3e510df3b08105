"""The theory explorer, one section: Leviathan's expected speedup against γ (with v = 1 and with a measured
verify cost) and where in the (c, α) plane speculation pays. `page`: its layout, handlers, wiring, figure and
words (gradio); `view`: what the figure draws for one (α, c, v) and the last run's point (no gradio).
"""
