"""Faults to inject into a framework process (``FrameworkProcess.call``): what a framework's
native code can do to the process it runs in. Imported there, not by the tests."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from shared.measurement.progress import Step


def pid(session: Any) -> int:
    return os.getpid()


def abort(session: Any) -> None:
    session.on_step(Step("building the program"))
    print("about to abort, as a native library would", file=sys.stderr, flush=True)
    os.abort()


def exit_with(session: Any, status: int) -> None:
    print(f"exiting with {status}", flush=True)
    os._exit(status)


def hang(session: Any) -> None:
    session.on_step(Step("waiting forever"))
    time.sleep(3600)


def fail(session: Any) -> None:
    raise ValueError("the framework refused the input")
