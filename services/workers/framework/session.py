"""The framework process: where a worker's framework is imported and its models run.

``main()`` with ``--framework NAME --hardware KIND --fd N``, started by
``services.workers.isolation.FrameworkProcess``, never by hand. Everything native (the
framework, its threads, an OpenCL compiler) lives here, so that a crash, an abort or the OOM
killer ends this process and not the worker: the worker sees the signal and fails the job.

The conversation on the connection ``N`` (pickled tuples):

    child  -> ("hello", Described)                 framework imported, device looked at
           or ("unavailable", reason)              the framework cannot be imported here
    parent -> ("call", "module:function", args)    run function(session, *args): a
                                                   handover.FrameworkCall
    child  -> ("progress", Step)*                  between steps, never inside a timed loop
           -> ("ok", value) | ("error", kind, message)

Called functions take a ``Session`` first: the framework's predictor factory, a way to
report progress, and a dict that persists between calls (a benchmark keeps a model open).
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
from pathlib import Path
from typing import Any

from services.workers.framework.build import framework_build
from services.workers.framework.measurement import measure
from services.workers.framework.predictors import PredictorFactory, predictor_factory
from services.workers.handover import Described, Run
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

    factory: PredictorFactory
    hardware: str
    on_step: OnStep
    state: dict[str, Any] = field(default_factory=dict)


def measure_job(
    session: Session,
    job: RunEvaluation,
    path: str,
    results_dir: str,
    tokenizer: str | None = None,
    traceparent: str | None = None,
) -> Run:
    """One evaluation job's measurement (``services.workers.framework.measurement.measure``);
    the worker calls it as ``handover.MEASURE_JOB``, with the fetched tokenizer of a text
    model and the W3C trace context of its span for the job (which a served model's requests
    carry to the server)."""
    if session.factory.measures is not None:  # a served model: its server runs it
        run: Run = session.factory.measures(
            job,
            on_step=session.on_step,
            tokenizer_path=None if tokenizer is None else Path(tokenizer),
            traceparent=traceparent,
        )
        return run
    return measure(
        session.factory,
        job,
        Path(path),
        results_dir=Path(results_dir),
        on_step=session.on_step,
        tokenizer_path=None if tokenizer is None else Path(tokenizer),
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="dlscope framework process")
    parser.add_argument("--framework", required=True)
    parser.add_argument("--hardware", required=True)
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args(argv)
    _die_with_parent()
    connection = Connection(args.fd)
    try:
        factory = predictor_factory(args.framework)
        version = factory.version()
        unusable = factory.unusable(args.hardware)
    except (DlscopeError, ImportError) as exc:
        connection.send(("unavailable", str(exc)))
        return
    if unusable is not None:
        connection.send(("unavailable", unusable))
        return
    try:
        device = factory.device(args.hardware)
    except DlscopeError as exc:
        # A device that is absent is announced as such: the worker stays up, and each job
        # then fails with the reason.
        device = {"device_error": str(exc)}
    described = Described(version, device, framework_build(args.framework), os.getpid())
    connection.send(("hello", described))
    session = Session(
        factory, args.hardware, on_step=lambda step: connection.send(("progress", step))
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
