"""python -m specviz generate | replay | bench | profile | train | setup | selfcheck | gpurun: the parser
(arguments), what each command does (commands), a run as coloured text and a JSON report (terminal)."""

from specviz.cli.commands import main

__all__ = ["main"]
