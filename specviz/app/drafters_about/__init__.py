"""About the drafters, one section: what each drafter reads, how big it is, why the head guesses better, what
EAGLE is. `page`: its layout, folded under the page (gradio); `words`: its HTML, sizes computed from the shipped
configs and figures read from the model cards (no gradio).
"""
