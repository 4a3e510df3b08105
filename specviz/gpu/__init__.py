"""The prepared GPU run's luggage, standard library only: what a lent GPU machine lacks (the default
target's GGUF, the wheels it has not got) packed here, carried there in parts one transfer each, checked
and unpacked there before anything imports torch or transformers (`python3 -m specviz.gpu`)."""
