"""What an evaluation's outcome makes of a command's exit status, so a script (a CI gate)
can act on a run that measured but is not to be trusted, as users of other benchmarks bolt on
by hand: 0 only for a VALID result.

    0  completed and VALID (warnings may question its conditions)
    1  what was asked for failed: the evaluation, an experiment's member, a repetition
    2  the command line was wrong; nothing ran
    3  completed but INVALID: the verdict's errors say why
    4  completed but INVALID with failed requests past the run's bound (a served model's
       requests failed or were truncated): its figures describe a server not serving all
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import typer

from dlscope.cli.terminal import errors

__all__ = [
    "COMPLETED",
    "EXIT_FAILED",
    "EXIT_FAILURES",
    "EXIT_INVALID",
    "EXIT_OK",
    "EXIT_STATUS_HELP",
    "SWEEP_EXIT_STATUS_HELP",
    "exit_status",
    "untrusted",
    "worst",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 3
EXIT_FAILURES = 4

# The help's last lines of every command that measures (run, submit, sweep).
EXIT_STATUS_HELP = (
    "Exit status: 0 completed and VALID; 1 the evaluation failed; 2 the command line was "
    "wrong; 3 completed but INVALID (the verdict says why); 4 INVALID with failed or "
    "truncated requests past the run's bound."
)

# A sweep's: each load is a run, and a goodput search's probes that miss the bounds are its
# answer, not a failure.
SWEEP_EXIT_STATUS_HELP = (
    "Exit status: 0 every load VALID (with --search: no probe left disturbed); 1 a load "
    "failed; 2 the command line was wrong; 3 a load INVALID (with --search: a probe INVALID "
    "beyond its bounds twice, so the answer is uncertain); 4 the same with failed or "
    "truncated requests past the bound."
)

# The statuses of a run that completed and reported its result, whatever its verdict.
COMPLETED = (EXIT_OK, EXIT_INVALID, EXIT_FAILURES)

_FAILED_REQUESTS = "requests_failed"


def exit_status(result: Mapping[str, Any]) -> int:
    """The exit status of a completed evaluation's ``result`` (``LatencySummary`` as JSON):
    its verdict's, or LoadGen's where LoadGen judged it."""
    verdict = result.get("verdict")
    if verdict is None:
        loadgen = result.get("loadgen") or []
        return EXIT_INVALID if any(p.get("result") != "VALID" for p in loadgen) else EXIT_OK
    if verdict.get("status") != "INVALID":
        return EXIT_OK
    errors = {r["code"] for r in verdict.get("reasons", ()) if r.get("severity") == "error"}
    return EXIT_FAILURES if _FAILED_REQUESTS in errors else EXIT_INVALID


def worst(statuses: Iterable[int]) -> int:
    """The status of several outcomes: a failure first, then failed requests, then INVALID."""
    found = set(statuses)
    for status in (EXIT_FAILED, EXIT_FAILURES, EXIT_INVALID):
        if status in found:
            return status
    return EXIT_OK


def untrusted(result: Mapping[str, Any], status: int) -> typer.Exit:
    """The exit of a completed run not to be trusted, said on stderr with its errors' codes
    (the result, on stdout, has their messages)."""
    verdict = result.get("verdict") or {}
    codes = sorted({r["code"] for r in verdict.get("reasons", ()) if r.get("severity") == "error"})
    said = ", ".join(codes) if codes else "LoadGen's result"
    errors.print(f"INVALID ({said}): exit status {status}", soft_wrap=True, highlight=False)
    return typer.Exit(status)
