"""What the command line prints: results on stdout, errors and progress on stderr."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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

__all__ = ["EvaluationProgress", "console", "errors", "fail", "progress"]

console = Console()
errors = Console(stderr=True)


def fail(message: str, code: int) -> typer.Exit:
    """Print ``message`` as an error and return the exit to raise (2: the command line was
    wrong; 1: what it asked for failed)."""
    # soft_wrap: an error stays one line, whatever the width, so it can be grepped.
    errors.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)
    return typer.Exit(code)


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


# What each event of an evaluation means for the person waiting, and how far along it is
# (of ``_STEPS``): the worker's own steps (fetching and verifying the model, loading it,
# warming up, the timed queries, the accuracy pass) all lie between started and measured.
_STEPS = 5
_STAGES: dict[str, tuple[int, str]] = {
    "evaluation.requested": (0, "waiting for the scheduler"),
    "evaluation.scheduled": (1, "waiting for a worker"),
    "evaluation.started": (2, "fetch, load, warm-up, timed queries{extra}"),
    "evaluation.profiled": (3, "layers profiled; timed queries done"),
    "evaluation.measured": (4, "computing the statistics"),
    "evaluation.completed": (5, "[green]completed[/]"),
    "evaluation.failed": (5, "[red]failed[/]: {reason}"),
}


class EvaluationProgress:
    """Live progress of evaluations run in this process, fed their events (``observe``):
    one line per evaluation with its current step, elapsed time and the time the timed
    phase has left at least (its minimum duration), on stderr."""

    def __init__(self) -> None:
        self._progress = progress(transient=False)
        self._tasks: dict[str, Any] = {}
        self._labels: dict[str, str] = {}
        self._minimum_s: dict[str, float] = {}

    def __enter__(self) -> EvaluationProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(None, None, None)

    def observe(self, kind: str, payload: Mapping[str, Any]) -> None:
        key = str(payload.get("evaluation_id", ""))
        if not key or kind not in _STAGES:
            return
        if kind == "evaluation.requested":
            scenario = payload.get("scenario") or {}
            self._labels[key] = f"{payload.get('model')} on {payload.get('framework')}"
            self._minimum_s[key] = float(scenario.get("min_duration_s", 1.0))
        if key not in self._tasks:
            self._tasks[key] = self._progress.add_task(self._labels.get(key, key), total=_STEPS)
        step, words = _STAGES[kind]
        extra = ""
        if kind == "evaluation.started":
            extra = f" (timed for at least {self._minimum_s.get(key, 0):g} s)"
            extra += f" on {payload.get('host')}" if payload.get("host") else ""
        text = words.format(extra=extra, reason=escape(str(payload.get("reason", ""))))
        label = self._labels.get(key, key[:8])
        self._progress.update(self._tasks[key], completed=step, description=f"{label}: {text}")
