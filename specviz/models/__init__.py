"""Model pairs: presets, loading, conversion of the default target, hosting limits, the head's network."""
