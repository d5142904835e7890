"""The predictor interface: the only framework-specific code in a worker.

Pre/post-processing, batching, timing and tracing live outside predictors, so every
framework is measured by the same code. A predictor whose framework has a profiler also
offers it (``Profiles``): the worker runs it in passes of its own, after the timed one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from shared.manifests import ModelManifest
from shared.messages import LayerTiming, ProfiledLevel

__all__ = ["LayerProfiler", "Predictor", "Profiles", "Unavailable"]


class Predictor(Protocol):
    framework: str

    def open(self, manifest: ModelManifest, model_path: Path, *, hardware: str) -> None:
        """Load the model; raises ``PredictorError`` with the framework's reason."""

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run one batch; the hot path: no work beyond the framework call."""

    def close(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """Framework version and the device the model runs on."""


@dataclass(frozen=True)
class Unavailable:
    """A trace level a predictor cannot serve here, and why (CUPTI without a GPU, say): the
    evaluation reports it and goes on; it is never an error."""

    reason: str


class LayerProfiler(Protocol):
    """One profiled pass's profiler: started, fed queries, stopped; then the layers it saw."""

    source: str  # the profiler, as a user knows it: "onnxruntime session profiling"

    def start(self) -> None:
        """Switch the profiler on (it may open a profiling session of its own)."""

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One query, profiled."""

    def stop(self) -> list[LayerTiming]:
        """Switch it off; every layer it recorded since ``start``, on the wall clock (ns
        since the epoch), in the order they ran. Called once, after ``start``, even when a
        query failed."""


@runtime_checkable
class Profiles(Protocol):
    """A predictor whose framework reports its layers through its own profiler."""

    def profiler(self, level: ProfiledLevel) -> LayerProfiler | Unavailable:
        """A profiler for ``level`` on the open model, or why there is none here."""
        ...
