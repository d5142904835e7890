"""What the command line prints: results on stdout, errors and progress on stderr."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from shared.errors import DlscopeError

__all__ = ["LOG_FORMAT", "console", "errors", "fail", "progress", "run_or_fail"]

T = TypeVar("T")

# How the services' own logs read when a command shows them (run --verbose, up).
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

console = Console()
errors = Console(stderr=True)


def fail(message: str, code: int) -> typer.Exit:
    """Print ``message`` as an error and return the exit to raise (2: the command line was
    wrong; 1: what it asked for failed)."""
    # soft_wrap: an error stays one line, whatever the width, so it can be grepped.
    errors.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)
    return typer.Exit(code)


def run_or_fail(main: Coroutine[Any, Any, T]) -> T:
    """What ``main`` returns, run to its end; a dlscope error (what it asked for failed, the
    store or broker unreachable) ends the command with it said as an error (exit 1)."""
    try:
        return asyncio.run(main)
    except DlscopeError as exc:
        raise fail(str(exc), 1) from exc


def progress(*, transient: bool = False) -> Progress:
    """A progress display for long work: what is happening, how far, how long so far and
    how long still. On stderr, so a result piped from stdout stays clean; rich shows nothing
    animated where stderr is not a terminal."""
    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=errors,
        transient=transient,
    )
