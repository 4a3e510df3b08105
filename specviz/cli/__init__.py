"""python -m specviz generate | replay | bench | profile | train | setup | selfcheck

arguments: the parser, its run settings declared once in specviz.app.settings; terminal: a run as
coloured text and as a JSON report; commands: what each command does.
"""

from specviz.cli.commands import main

__all__ = ["main"]
