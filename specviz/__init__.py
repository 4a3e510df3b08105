"""specviz: speculative decoding, visualised and honestly measured."""

__version__ = "0.1.0"
