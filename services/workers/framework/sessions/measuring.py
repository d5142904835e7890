"""The skeleton every measurement session shares: open what runs the model, timed (the
load), measure, close it whatever happened, and translate a framework's own exceptions into
ours, naming who failed doing what with which model."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Protocol

from services.workers.handover import JobInputs, Run
from shared.errors import DlscopeError, PredictorError
from shared.measurement.progress import OnStep, Step
from shared.messages import RunEvaluation

__all__ = ["MeasurementSession", "Opens", "one_line", "opened"]


class MeasurementSession(Protocol):
    """How one job is measured in the framework process (``sessions.session_for``)."""

    def measure(self, job: RunEvaluation, inputs: JobInputs) -> Run: ...


class Opens(Protocol):
    """What a session opens before its timed queries: a predictor, a generation backend."""

    @property
    def name(self) -> str:
        """Who failed, in an error: "onnxruntime", "the endpoint"."""
        ...

    @property
    def opening(self) -> Step: ...

    @property
    def closing(self) -> Step | None: ...

    def open(self, job: RunEvaluation, inputs: JobInputs) -> None: ...

    def close(self) -> None: ...


@contextlib.contextmanager
def opened(
    port: Opens, job: RunEvaluation, inputs: JobInputs, on_step: OnStep, *, doing: str
) -> Iterator[int]:
    """``port`` opened for ``job`` for the block, which gets the time opening took (the
    model's load). An open that fails is the port's own error (a ``PredictorError`` saying
    why) and leaves nothing to close; within the block, an exception of the framework's own
    becomes a ``PredictorError`` ("onnxruntime failed running digits-cnn@1.0.0: ...")."""
    on_step(port.opening)
    start = time.perf_counter_ns()
    port.open(job, inputs)
    load_ns = time.perf_counter_ns() - start
    try:
        yield load_ns
    except DlscopeError:
        raise
    except Exception as exc:  # the framework's own error types
        said = one_line(str(exc))
        raise PredictorError(f"{port.name} failed {doing} {job.manifest.ref}: {said}") from exc
    finally:
        if port.closing is not None:
            on_step(port.closing)
        port.close()


def one_line(message: str) -> str:
    """A framework's message on one line: ONNX Runtime's shape errors list one index a line,
    which a failure's reason, a table cell and a log line cannot hold."""
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())
