"""The predictor interface: the only framework-specific code in a worker.

Pre/post-processing, batching, timing and tracing live outside predictors, so every
framework is measured by the same code.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from shared.manifests import ModelManifest

__all__ = ["LayerTimes", "Predictor", "TimesLayers"]


class Predictor(Protocol):
    framework: str

    def open(self, manifest: ModelManifest, model_path: Path, *, hardware: str) -> None:
        """Load the model; raises ``PredictorError`` with the framework's reason."""

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run one batch; the hot path: no work beyond the framework call."""

    def close(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """Framework version and the device the model runs on."""


class LayerTimes(Protocol):
    """One layer's timing as a predictor reports it (OpenCL's profiling events)."""

    def as_dict(self) -> dict[str, Any]: ...


@runtime_checkable
class TimesLayers(Protocol):
    """A predictor that times each layer of the last batch on its device: the worker reports
    one query's layers when ``isinstance(predictor, TimesLayers)``."""

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]: ...

    def layer_timings(self) -> Sequence[LayerTimes]:
        """The last batch's layers in the order they ran; empty before the first batch."""
        ...
