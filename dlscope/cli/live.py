"""Live progress of evaluations on the command line, fed their events and the workers'
progress notifications (``observe``): one row per evaluation with where it is (waiting for
a worker, fetching, loading, warming up, timed queries, the accuracy pass, tracing), how long
the current step has run and has left, and how long the evaluation has taken so far.

A wait for the device's lease (another measurement holds it) is also said as one line, and
again when the device came: a row redrawn in place is invisible where stderr is not a
terminal, and a run that sits still for half a minute must say why.

The time left is computed here, at each refresh, from when a step arrived and how long the
worker expects it to take: the worker sends one notification per step, never one per query.

A ``dlscope run`` started by another ``dlscope`` (``--repeat`` runs each repetition in a
fresh process) does not draw: with ``DLSCOPE_PROGRESS=lines`` it writes each event as one
line on stderr (``LINE_PREFIX`` + JSON), and the parent draws them in its own display.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

import orjson
from rich.markup import escape
from rich.progress import (
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress_bar import ProgressBar
from rich.text import Text

from dlscope.cli.terminal import errors
from shared.measurement.progress import WAITING_FOR_DEVICE

__all__ = ["LINES_ENV", "LINE_PREFIX", "LiveEvaluations", "parse_line"]

LINES_ENV = "DLSCOPE_PROGRESS"
LINE_PREFIX = "dlscope-progress "

# What each event of an evaluation means for the person waiting.
_STAGES: dict[str, str] = {
    "evaluation.requested": "waiting for the scheduler",
    "evaluation.scheduled": "waiting for a worker",
    "evaluation.started": "started{host}",
    "evaluation.profiled": "layers profiled",
    "evaluation.measured": "computing the statistics",
    "evaluation.completed": "[green]completed[/]",
    "evaluation.failed": "[red]failed[/]: {reason}",
}
_PROGRESS = "evaluation.progress"
_ENDED = ("evaluation.completed", "evaluation.failed")


def parse_line(line: str) -> tuple[str, dict[str, Any]] | None:
    """The (event type, payload) a child ``dlscope run`` wrote on ``line``, or None."""
    if not line.startswith(LINE_PREFIX):
        return None
    kind, payload = orjson.loads(line[len(LINE_PREFIX) :])
    return str(kind), dict(payload)


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 60 else f"{int(value // 60)} min {value % 60:02.0f} s"


class _StepBar(ProgressColumn):
    """How far the current step is: elapsed over expected when the worker said how long it
    should take; a pulse while nothing says; full once the evaluation ended."""

    def render(self, task: Task) -> ProgressBar:
        expected, since = task.fields.get("expected_s"), task.fields.get("since")
        if task.finished:
            return ProgressBar(total=1, completed=1, width=24)
        if expected and since is not None:
            return ProgressBar(
                total=expected, completed=min(time.monotonic() - since, expected), width=24
            )
        if task.total is not None and "since" not in task.fields:  # a plain counted task
            return ProgressBar(total=task.total, completed=task.completed, width=24)
        return ProgressBar(total=None, pulse=True, animation_time=task.get_time(), width=24)


class _StepTime(ProgressColumn):
    """The current step's elapsed and remaining time, in words."""

    def render(self, task: Task) -> Text:
        since = task.fields.get("since")
        if "since" not in task.fields and task.total is not None:  # a plain counted task
            return Text(_counted(task), style="progress.remaining")
        if since is None or task.finished:
            return Text("")
        elapsed = time.monotonic() - since
        expected, limit = task.fields.get("expected_s"), task.fields.get("limit_s")
        return Text(_step_time(elapsed, expected, limit), style="progress.remaining", no_wrap=True)


def _counted(task: Task) -> str:
    left = None if task.finished else task.time_remaining
    rest = f", ~{_seconds(left)} left" if left is not None else ""
    return f"{task.completed:g} of {task.total:g}{rest}"


def _step_time(elapsed: float, expected: float | None, limit: float | None) -> str:
    if expected and elapsed <= expected:
        return f"{_seconds(elapsed)} of ~{_seconds(expected)}, {_seconds(expected - elapsed)} left"
    if expected:
        stops = f", stops by {_seconds(limit)}" if limit else ""
        return f"{_seconds(elapsed)}, over ~{_seconds(expected)}{stops}"
    if limit:
        return f"{_seconds(elapsed)}, at most {_seconds(limit)}"
    return _seconds(elapsed)


def columns() -> tuple[ProgressColumn, ...]:
    return (
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        _StepBar(),
        _StepTime(),
        TimeElapsedColumn(),
    )


class LiveEvaluations:
    """One row per evaluation, on stderr (rich draws nothing animated where stderr is not a
    terminal). With ``lines`` (``DLSCOPE_PROGRESS=lines``, ``Settings.progress``) it writes
    lines for a parent ``dlscope`` instead. ``display`` shares another display (the
    parent's)."""

    def __init__(self, display: Progress | None = None, *, lines: bool = False) -> None:
        self._forward = lines and display is None
        self._own = display is None
        self.display = display or Progress(*columns(), console=errors, transient=False)
        self._tasks: dict[str, TaskID] = {}
        self._labels: dict[str, str] = {}
        # Evaluations waiting for their device: what was said, and since when.
        self._waits: dict[str, tuple[str, float]] = {}

    def __enter__(self) -> LiveEvaluations:
        if self._own and not self._forward:
            self.display.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._own and not self._forward:
            self.display.__exit__(None, None, None)

    def forget(self) -> None:
        """Remove every row (a repetition that ended, in a parent's display)."""
        for task in self._tasks.values():
            self.display.remove_task(task)
        self._tasks.clear()

    def observe(self, kind: str, payload: Mapping[str, Any]) -> None:
        if self._forward:
            line = orjson.dumps([kind, payload], default=str).decode()
            print(LINE_PREFIX + line, file=sys.stderr, flush=True)
            return
        key = str(payload.get("evaluation_id", ""))
        if not key or (kind not in _STAGES and kind != _PROGRESS):
            return
        if kind == "evaluation.requested":
            self._labels[key] = f"{payload.get('model')} on {payload.get('framework')}"
        label = self._labels.get(key, key[:8])
        if key not in self._tasks:
            self._tasks[key] = self.display.add_task(label, total=None, since=None)
        task = self._tasks[key]
        self._tell_the_wait(key, label, kind, payload)
        if kind == _PROGRESS:
            # The part alone when there is one: "timed queries" says "running the scenario".
            doing = payload.get("part") or payload.get("phase", "")
            self.display.update(
                task,
                description=f"{label}: {escape(str(doing))}",
                since=time.monotonic(),
                expected_s=payload.get("expected_s"),
                limit_s=payload.get("limit_s"),
            )
            return
        host = f" on {payload['host']}" if payload.get("host") else ""
        text = _STAGES[kind].format(host=host, reason=escape(str(payload.get("reason", ""))))
        ended = kind in _ENDED
        self.display.update(
            task,
            description=f"{label}: {text}",
            since=None if ended else time.monotonic(),
            expected_s=None,
            limit_s=None,
        )
        if ended:
            self.display.update(task, total=1, completed=1)
            self.display.stop_task(task)

    def _tell_the_wait(self, key: str, label: str, kind: str, payload: Mapping[str, Any]) -> None:
        """One line when the evaluation starts waiting for its device (or the holder it
        waits for changes), and one when it got the device."""
        waiting = kind == _PROGRESS and payload.get("phase") == WAITING_FOR_DEVICE
        told = self._waits.get(key)
        if waiting:
            part = str(payload.get("part") or WAITING_FOR_DEVICE)
            if told is None or told[0] != part:
                limit = payload.get("limit_s")
                most = f" (at most {_seconds(limit)})" if limit else ""
                self._say(f"{label}: {part}{most}")
                self._waits[key] = (part, told[1] if told else time.monotonic())
            return
        if told is None:
            return
        del self._waits[key]
        if kind != "evaluation.failed":  # a failure says why itself
            self._say(f"{label}: got the device after {_seconds(time.monotonic() - told[1])}")

    def _say(self, line: str) -> None:
        self.display.console.print(escape(line), soft_wrap=True, highlight=False)
