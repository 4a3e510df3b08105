"""Step mode, one section: speculative decoding one real round at a time, told in stages on the run's own
tokens. `page`: its layout, handlers and wiring (gradio); `session`: the run held between presses (`StepRun`,
no gradio); `words`: what the stages say, as HTML (no gradio).
"""
