"""Predictor adapters, imported lazily so a worker never pays for another's framework."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.workers.availability import FRAMEWORKS, install_hint
from services.workers.framework.predictors.base import (
    LayerProfiler,
    Predictor,
    Profiles,
    Unavailable,
)
from shared.errors import ConfigurationError

__all__ = [
    "LayerProfiler",
    "Predictor",
    "PredictorFactory",
    "Profiles",
    "Unavailable",
    "predictor_factory",
]


def _no_device(hardware: str) -> dict[str, Any]:
    return {}


def _usable(hardware: str) -> str | None:
    return None


def _runs_no_model() -> Predictor:
    raise ConfigurationError("an endpoint runs no model here: its server does")


@dataclass(frozen=True)
class PredictorFactory:
    create: Callable[[], Predictor]
    version: Callable[[], str]
    # What the framework itself sees of the device it runs on (an OpenCL platform and
    # device), announced with the worker's capabilities.
    device: Callable[[str], dict[str, Any]] = _no_device
    # Why the framework can run nothing on the hardware here although it is installed (an
    # OpenCL device whose compiler builds no kernel), or None.
    unusable: Callable[[str], str | None] = _usable
    # A framework that measures in its own way instead of through a predictor: the endpoint
    # (a served model, over HTTP), ``served.measure_served``.
    measures: Callable[..., Any] | None = None


def predictor_factory(framework: str) -> PredictorFactory:
    try:
        if framework == "onnxruntime":
            from services.workers.framework.predictors import onnxrt

            return PredictorFactory(onnxrt.OnnxRuntimePredictor, onnxrt.framework_version)
        if framework == "pytorch":
            from services.workers.framework.predictors import torchscript

            return PredictorFactory(torchscript.TorchScriptPredictor, torchscript.framework_version)
        if framework == "tensorflow":
            from services.workers.framework.predictors import savedmodel

            return PredictorFactory(savedmodel.SavedModelPredictor, savedmodel.framework_version)
        if framework == "tensorrt":
            from services.workers.framework.predictors import tensorrt

            return PredictorFactory(tensorrt.TensorRTPredictor, tensorrt.framework_version)
        if framework == "opencl":
            from services.workers.framework.predictors import opencl

            return PredictorFactory(
                opencl.OpenCLPredictor,
                opencl.framework_version,
                opencl.device_capabilities,
                opencl.unusable,
            )
        if framework == "endpoint":
            from services.workers.framework import served

            return PredictorFactory(
                _runs_no_model,
                lambda: served.API_VERSION,
                served.described_endpoint,
                served.unusable,
                served.measure_served,
            )
    except ImportError as exc:
        raise ConfigurationError(
            f"framework {framework!r} is not installed here: {exc}; {install_hint(framework)}"
        ) from exc
    raise ConfigurationError(
        f"no predictor for framework {framework!r} in this version of dlscope; "
        f"available: {', '.join(FRAMEWORKS)}"
    )
