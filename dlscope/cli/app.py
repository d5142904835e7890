"""The ``dlscope`` command: its commands and command groups, each from its own module."""

from __future__ import annotations

import typer

from dlscope.cli.agents import agents_command
from dlscope.cli.db import db
from dlscope.cli.dlq import dlq
from dlscope.cli.evaluate import publish, run, submit
from dlscope.cli.layers import layers_command
from dlscope.cli.models import models
from dlscope.cli.outcome import EXIT_STATUS_HELP, SWEEP_EXIT_STATUS_HELP
from dlscope.cli.repeats import compare_command
from dlscope.cli.report import report_command
from dlscope.cli.serving import serve, up
from dlscope.cli.sweep import sweep
from dlscope.cli.trace import trace_command
from dlscope.cli.zoo import zoo

__all__ = ["app", "main"]

app = typer.Typer(
    help="dlscope: benchmark deep-learning inference across models, frameworks and hardware.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command("run", epilog=EXIT_STATUS_HELP)(run)
app.command("up")(up)
app.command("serve")(serve)
app.command("submit", epilog=EXIT_STATUS_HELP)(submit)
app.command("publish")(publish)
app.add_typer(db, name="db")
app.add_typer(dlq, name="dlq")
app.add_typer(models, name="models")
app.add_typer(zoo, name="zoo")
app.command("compare")(compare_command)
app.command("layers")(layers_command)
app.command("trace")(trace_command)
app.command("agents")(agents_command)
app.command("report")(report_command)
app.command("sweep", epilog=SWEEP_EXIT_STATUS_HELP)(sweep)


def main() -> None:
    app()
