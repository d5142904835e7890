"""The ``dlscope`` command line: one module per command or command group (``app`` puts them
together), one set of evaluation options (``options``, the scenario's in ``scenario_options``),
and one ``Client`` interface through which every command reaches dlscope, embedded here or
deployed (``client``; ``target`` chooses which, from ``--gateway``)."""

from dlscope.cli.app import app, main

__all__ = ["app", "main"]
