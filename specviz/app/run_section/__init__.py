"""The run, one section: the header, the prompt with its examples, Run and Stop with the status line, the
controls, the legend, the lanes and the result card. `page`: its layout, the values a run puts in the lanes and
the controls' own handlers (gradio); `words`: what it says: the intro, the example prompts' buttons, the hints
that are the page's alone and the status line (no gradio). The controls' labels and hints are the settings'
own declarations (specviz.app.settings).
"""
