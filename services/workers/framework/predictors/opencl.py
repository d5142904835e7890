"""The OpenCL predictor: ONNX graphs run by dlscope's own kernels on any OpenCL device."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from services.workers.framework.opencl.devices import (
    compiler_problem,
    device_capabilities,
    open_device,
)
from services.workers.framework.opencl.engine import Engine
from services.workers.framework.opencl.profiling import OpenCLProfiler
from services.workers.framework.opencl.settings import OpenCLSettings
from services.workers.framework.ports import LayerProfiler, Unavailable
from shared.errors import PredictorError
from shared.manifests import ModelManifest
from shared.messages import LayerTiming, ProfiledLevel

__all__ = [
    "ENGINE_VERSION",
    "OpenCLPredictor",
    "device_capabilities",
    "framework_version",
    "unusable",
]

# The engine's version: its kernels and plans are what gets measured, so it changes with them.
ENGINE_VERSION = "1.1.0"


def framework_version() -> str:
    return ENGINE_VERSION


def unusable(hardware: str, platform: str | None = None) -> str | None:
    """Why no model can run on ``hardware``'s OpenCL device here (it compiles no kernel), or
    None: checked once as the framework process starts, so the worker is announced as
    unavailable with the reason instead of taking jobs that would all fail."""
    return compiler_problem(hardware, platform)


class OpenCLPredictor:
    framework = "opencl"

    def __init__(self, settings: OpenCLSettings | None = None) -> None:
        self._settings = settings or OpenCLSettings()
        self._engine: Engine | None = None

    def open(self, manifest: ModelManifest, model_path: Path, *, hardware: str) -> None:
        try:
            self._engine = self._load(manifest, model_path, hardware)
        except PredictorError as exc:
            raise PredictorError(f"opencl cannot run {manifest.ref}: {exc}") from exc

    def _load(self, manifest: ModelManifest, model_path: Path, hardware: str) -> Engine:
        device = open_device(
            hardware, binary=self._settings.binary, platform=self._settings.platform
        )
        engine = Engine.load(model_path, device)
        declared = {spec.name for spec in manifest.inputs}
        if set(engine.input_names) != declared:
            raise PredictorError(
                f"the manifest declares inputs {sorted(declared)} but the graph takes "
                f"{sorted(engine.input_names)}"
            )
        # A manifest with fixed shapes gets its plan now: a device without room for it fails
        # here, before any measurement, rather than at the first batch.
        shapes = {spec.name: tuple(spec.shape) for spec in manifest.inputs}
        if all(d > 0 for shape in shapes.values() for d in shape):
            engine.plan(tuple(shapes[name] for name in engine.input_names))
        return engine

    def _opened(self) -> Engine:
        if self._engine is None:
            raise PredictorError("the OpenCL predictor has no model open")
        return self._engine

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._opened().run(inputs)

    def layer_timings(self) -> list[LayerTiming]:
        """The last batch's kernels per layer, in the order they ran, from OpenCL profiling
        events; empty before the first batch."""
        return self._engine.layer_timings() if self._engine else []

    def profiler(self, level: ProfiledLevel) -> LayerProfiler | Unavailable:
        if level == "library":
            return Unavailable(
                "the OpenCL engine calls no library: its own kernels are its layers "
                "(framework level) and its kernel launches (hardware level)"
            )
        return OpenCLProfiler(self._opened(), kernels=level == "hardware")

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def describe(self) -> dict[str, Any]:
        description: dict[str, Any] = {
            "framework": self.framework,
            "framework_version": framework_version(),
            "pyopencl_version": version("pyopencl"),
        }
        if self._engine is not None:
            device = self._engine.device
            description["device"] = device.info.as_dict()
            description["program"] = device.program_from
        return description
