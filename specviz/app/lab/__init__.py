"""The teaching sections' logic, with no gradio, one module per section:

- `sweep`: the γ sweep, the bench's loop for one prompt as progress a page can draw and stop;
- `explorer`: the theory explorer's curves and (c, α) plane.
"""
