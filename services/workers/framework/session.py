"""The framework process: where a worker's framework is imported and its models run.

``main()`` with ``--framework NAME --hardware KIND --fd N``, started by
``services.workers.isolation.FrameworkProcess``, never by hand. Everything native (the
framework, its threads, an OpenCL compiler) lives here, so that a crash, an abort or the OOM
killer ends this process and not the worker: the worker sees the signal and fails the job.

The conversation on the connection ``N`` (pickled tuples):

    parent -> ("options", FrameworkOptions)        the worker's settings for its framework
    child  -> ("hello", Described)                 framework imported, device looked at
           or ("unavailable", reason)              the framework cannot be imported here
    parent -> ("call", "module:function", args)    run function(session, *args): a
                                                   handover.FrameworkCall
    child  -> ("progress", Step)*                  between steps, never inside a timed loop
           -> ("ok", value) | ("error", kind, message)

Called functions take a ``Session`` first: the framework, a way to report progress, and a
dict that persists between calls (a benchmark keeps a model open).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from services.workers.framework.build import framework_build
from services.workers.framework.frameworks import Framework, framework_for
from services.workers.framework.sessions import session_for
from services.workers.handover import Described, FrameworkOptions, JobInputs, Run
from shared.errors import ArtifactError, DlscopeError
from shared.measurement.progress import OnStep
from shared.messages import RunEvaluation

__all__ = ["Session", "main", "measure_job"]

# linux/prctl.h: deliver this signal to the process when its parent dies.
_PR_SET_PDEATHSIG = 1


@dataclass
class Session:
    """What a called function gets: the framework, where to report its steps, state between
    calls."""

    framework: Framework
    hardware: str
    on_step: OnStep
    state: dict[str, Any] = field(default_factory=dict)


def measure_job(session: Session, job: RunEvaluation, inputs: JobInputs) -> Run:
    """One evaluation job's measurement, by the session ``sessions.session_for`` chooses;
    the worker calls it as ``handover.MEASURE_JOB``."""
    return session_for(session.framework, job, session.on_step).measure(job, inputs)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="dlscope framework process")
    parser.add_argument("--framework", required=True)
    parser.add_argument("--hardware", required=True)
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args(argv)
    _die_with_parent()
    connection = Connection(args.fd)
    kind, options = connection.recv()
    assert kind == "options", kind
    assert isinstance(options, FrameworkOptions)
    try:
        framework = framework_for(args.framework, options)
        version = framework.version()
        unusable = framework.unusable(args.hardware)
    except (DlscopeError, ImportError) as exc:
        connection.send(("unavailable", str(exc)))
        return
    if unusable is not None:
        connection.send(("unavailable", unusable))
        return
    try:
        device = framework.device(args.hardware)
    except DlscopeError as exc:
        # A device that is absent is announced as such: the worker stays up, and each job
        # then fails with the reason.
        device = {"device_error": str(exc)}
    described = Described(
        version,
        device,
        framework_build(args.framework),
        os.getpid(),
        needs_weights=framework.needs_weights,
    )
    connection.send(("hello", described))
    session = Session(
        framework, args.hardware, on_step=lambda step: connection.send(("progress", step))
    )
    _serve(connection, session)


def _serve(connection: Connection, session: Session) -> None:
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return  # the worker closed the connection: it is stopping
        _kind, target, args = message
        try:
            value = _resolve(target)(session, *args)
        except ArtifactError as exc:
            connection.send(("error", "artifact", str(exc)))
        except DlscopeError as exc:
            connection.send(("error", "predictor", str(exc)))
        except Exception as exc:  # a framework's own error: the job fails, the process lives
            connection.send(("error", "predictor", f"{type(exc).__name__}: {exc}"))
        else:
            connection.send(("ok", value))


def _resolve(target: str) -> Callable[..., Any]:
    module, _, name = target.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return function


def _die_with_parent() -> None:
    """Killed with the worker: a worker that dies by kill -9 must not leave its framework
    process running a model nobody will hear about."""
    # Its own session, so that a Ctrl-C at the terminal reaches the worker, which then ends
    # this process in order, rather than both at once.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
