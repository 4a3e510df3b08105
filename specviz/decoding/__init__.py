"""The decoding floor: the engine, its drafters, sampling, events and transformers' reference lane."""
