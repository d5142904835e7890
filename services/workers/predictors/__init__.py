"""Predictor adapters, imported lazily so a worker never pays for another's framework."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.workers.predictors.base import (
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
    "framework_module",
    "install_hint",
    "not_installed",
    "predictor_factory",
]


def _no_device(hardware: str) -> dict[str, Any]:
    return {}


def _usable(hardware: str) -> str | None:
    return None


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


# What every worker's framework process imports besides its framework: the built-in datasets
# of scikit-learn and scikit-image. The `worker` extra, part of every framework's.
_WORKER_MODULES = ("sklearn", "skimage")
# What a framework needs beyond its Python package, said with the install hint.
_ALSO_NEEDS = {"tensorrt": " and an NVIDIA GPU with CUDA"}


def framework_module(framework: str) -> str:
    """The Python module that ``framework`` needs; ConfigurationError for an unknown one."""
    try:
        return _MODULES[framework]
    except KeyError:
        raise ConfigurationError(
            f"no predictor for framework {framework!r} in this version of dlscope; "
            f"available: {', '.join(_MODULES)}"
        ) from None


def install_hint(framework: str) -> str:
    """How to install ``framework`` for dlscope: its extra, named as the framework."""
    return f"pip install 'dlscope[{framework}]'{_ALSO_NEEDS.get(framework, '')}"


def not_installed(framework: str) -> str | None:
    """None when ``framework``'s worker can run here, else why, with the extra to install.
    Looked up, never imported: the frameworks run in the workers' framework processes."""
    for module in (framework_module(framework), *_WORKER_MODULES):
        if importlib.util.find_spec(module) is None:
            return (
                f"framework {framework!r} is not installed here (no module {module!r}): "
                f"{install_hint(framework)}"
            )
    return None


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
                opencl.OpenCLPredictor,
                opencl.framework_version,
                opencl.device_capabilities,
                opencl.unusable,
            )
    except ImportError as exc:
        raise ConfigurationError(
            f"framework {framework!r} is not installed here: {exc}; {install_hint(framework)}"
        ) from exc
    raise ConfigurationError(
        f"no predictor for framework {framework!r} in this version of dlscope; "
        "available: onnxruntime, pytorch, tensorflow, tensorrt, opencl"
    )
