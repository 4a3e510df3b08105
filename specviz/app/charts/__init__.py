"""The run's charts, one section: the race, accepted drafts per round, α̂ over the run, acceptance by draft
position, easy and hard tokens with its sentence, and where the time went with its sentence. `page`: its layout
and what each chart shows for a run (gradio); `timeline`: where the time went, drawn (every forward of every lane
on one clock) and said under it (no gradio). The shared figure pieces stay below it: specviz.app.plots (the base
figure and the round charts), plots_confidence (which the γ sweep draws too).
"""
