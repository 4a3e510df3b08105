"""The teaching sections' logic, with no gradio, one module per section:

- `step_mode`: step mode, speculative decoding held between presses (`StepRun`);
- `exactness`: the exactness lab, many short draws of both lanes tested against the target's exact
  distribution with a chi-square test, and the wrong rules it must catch;
- `sweep`: the γ sweep, the bench's loop for one prompt as progress a page can draw and stop;
- `explorer`: the theory explorer's curves and (c, α) plane.
"""
