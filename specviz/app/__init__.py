"""The page: gradio (ui, ui_sections, ui_handlers, teach) over gradio-free rendering, lessons, plots and the lab."""
