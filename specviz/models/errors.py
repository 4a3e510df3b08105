"""The errors a model load raises, beneath every module that raises them (presets, precision,
hosting, loading), so none of those needs another to say why a load failed."""

from __future__ import annotations


class ModelLoadError(ValueError):
    """A model could not be loaded (unknown id, no network, out of memory, bad folder) or cannot serve
    speculative decoding (a recurrent model)."""


class IncompatiblePairError(ValueError):
    """Draft and target do not share one tokenizer, so their token ids mean different things."""
