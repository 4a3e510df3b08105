"""The exactness lab, one section: many short draws of the target alone and of speculative decoding, tested
against the target's exact distribution, beside a wrong rule the test must catch. `page`: its layout, handlers,
wiring, histogram and words (gradio); `draws`: the draws, the exact distribution, the chi-square test and the
wrong rules (no gradio).
"""
