"""python -m specviz generate | replay | bench | profile | train | setup | selfcheck | gpurun

arguments: the parser, its run settings declared once in specviz.app.settings; terminal: a run as
coloured text and as a JSON report; commands: what each command does; gpurun: `pack`, what an offline
GPU machine needs for the self-check.
"""

from specviz.cli.commands import main

__all__ = ["main"]
