"""Training the shipped models: the default pair's draft and head, and the tiny-code pair."""
