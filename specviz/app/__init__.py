"""The page: gradio (ui, ui_sections, ui_handlers, the teach sections) over gradio-free rendering, plots and the lab."""
