"""The step inspector, one section: one round up close. `page`: its layout, handlers and wiring (gradio), with
the round's figures asked of specviz.app.plots_round, which step mode shares; `words`: the round picker's
labels and the inspector's HTML, why each draft was kept or thrown away, a row per draft (no gradio).
"""
