"""What the command line prints: results on stdout, errors on stderr."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

__all__ = ["console", "errors", "fail"]

console = Console()
errors = Console(stderr=True)


def fail(message: str, code: int) -> typer.Exit:
    """Print ``message`` as an error and return the exit to raise (2: the command line was
    wrong; 1: what it asked for failed)."""
    # soft_wrap: an error stays one line, whatever the width, so it can be grepped.
    errors.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)
    return typer.Exit(code)
