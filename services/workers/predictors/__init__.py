"""Predictor adapters, imported lazily so a worker never pays for another's framework."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.workers.predictors.base import LayerTimes, Predictor, TimesLayers
from shared.errors import ConfigurationError

__all__ = [
    "LayerTimes",
    "Predictor",
    "PredictorFactory",
    "TimesLayers",
    "framework_module",
    "predictor_factory",
]


def _no_device(hardware: str) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class PredictorFactory:
    create: Callable[[], Predictor]
    version: Callable[[], str]
    # What the framework itself sees of the device it runs on (an OpenCL platform and
    # device), announced with the worker's capabilities.
    device: Callable[[str], dict[str, Any]] = _no_device


# The module each framework's predictor imports: present means installed. Looked up with
# importlib.util.find_spec, never imported, so a worker's own process stays free of frameworks
# (they run in its framework process, services.workers.session).
_MODULES = {
    "onnxruntime": "onnxruntime",
    "pytorch": "torch",
    "tensorflow": "tensorflow",
    "tensorrt": "tensorrt",
    "opencl": "pyopencl",
}


def framework_module(framework: str) -> str:
    """The Python module that ``framework`` needs; ConfigurationError for an unknown one."""
    try:
        return _MODULES[framework]
    except KeyError:
        raise ConfigurationError(
            f"no predictor for framework {framework!r} in this version of dlscope; "
            f"available: {', '.join(_MODULES)}"
        ) from None


def predictor_factory(framework: str) -> PredictorFactory:
    try:
        if framework == "onnxruntime":
            from services.workers.predictors import onnxrt

            return PredictorFactory(onnxrt.OnnxRuntimePredictor, onnxrt.framework_version)
        if framework == "pytorch":
            from services.workers.predictors import torchscript

            return PredictorFactory(torchscript.TorchScriptPredictor, torchscript.framework_version)
        if framework == "tensorflow":
            from services.workers.predictors import savedmodel

            return PredictorFactory(savedmodel.SavedModelPredictor, savedmodel.framework_version)
        if framework == "tensorrt":
            from services.workers.predictors import tensorrt

            return PredictorFactory(tensorrt.TensorRTPredictor, tensorrt.framework_version)
        if framework == "opencl":
            from services.workers.predictors import opencl

            return PredictorFactory(
                opencl.OpenCLPredictor, opencl.framework_version, opencl.device_capabilities
            )
    except ImportError as exc:
        raise ConfigurationError(f"framework {framework!r} is not installed here: {exc}") from exc
    raise ConfigurationError(
        f"no predictor for framework {framework!r} in this version of dlscope; "
        "available: onnxruntime, pytorch, tensorflow, tensorrt, opencl"
    )
