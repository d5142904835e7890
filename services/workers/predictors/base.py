"""The predictor interface: the only framework-specific code in a worker.

Pre/post-processing, batching, timing and tracing live outside predictors, so every
framework is measured by the same code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from shared.manifests import ModelManifest

__all__ = ["Predictor"]


class Predictor(Protocol):
    framework: str

    def open(self, manifest: ModelManifest, model_path: Path, *, hardware: str) -> None:
        """Load the model; raises ``PredictorError`` with the framework's reason."""

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run one batch; the hot path: no work beyond the framework call."""

    def close(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """Framework version and the device the model runs on."""
