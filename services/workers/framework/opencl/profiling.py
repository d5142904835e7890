"""The OpenCL engine's own profiler: the profiling events of every kernel it enqueues.

The queue always profiles (the events cost the device nothing measurable), so a profiled
pass is the engine run as usual and its last run's events read after each query: per layer
(``framework``: a node's kernels together) or per kernel launch (``hardware``). Their times
are on the device's clock; each query's are moved onto the wall clock, its first kernel
queued when the query began.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from services.workers.framework.opencl.engine import Engine
from shared.messages import LayerTiming

__all__ = ["SOURCE", "OpenCLProfiler", "on_wall_clock"]

SOURCE = "OpenCL profiling events"


def on_wall_clock(timings: list[LayerTiming], began_ns: int) -> list[LayerTiming]:
    """``timings`` of one query, moved from the device's clock onto the wall clock."""
    if not timings:
        return []
    first = timings[0]
    offset = began_ns - (first.queued_ns if first.queued_ns is not None else first.start_ns)

    def moved(value: int | None) -> int | None:
        return None if value is None else value + offset

    return [
        timing.model_copy(
            update={
                "start_ns": timing.start_ns + offset,
                "end_ns": timing.end_ns + offset,
                "queued_ns": moved(timing.queued_ns),
                "submit_ns": moved(timing.submit_ns),
            }
        )
        for timing in timings
    ]


class OpenCLProfiler:
    """Each query run by the engine, its layers (or kernels) read from its events."""

    source = SOURCE

    def __init__(self, engine: Engine, *, kernels: bool) -> None:
        self._engine = engine
        self._read: Callable[[], list[LayerTiming]] = (
            engine.kernel_timings if kernels else engine.layer_timings
        )
        self._layers: list[LayerTiming] = []

    def start(self) -> None:
        self._layers = []

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        began = time.time_ns()
        outputs = self._engine.run(inputs)
        self._layers += on_wall_clock(self._read(), began)
        return outputs

    def stop(self) -> list[LayerTiming]:
        return self._layers
