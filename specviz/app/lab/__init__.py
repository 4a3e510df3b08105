"""The teaching sections' logic, with no gradio, one module per section:

- `explorer`: the theory explorer's curves and (c, α) plane.
"""
