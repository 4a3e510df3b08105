"""Training the embedded models: the draft's distillation, the head, the tiny-code pair."""
