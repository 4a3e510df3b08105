"""The page: gradio (ui, ui_sections, ui_handlers, each section's page) over gradio-free rendering, plots and the
lab."""
