"""Predictor adapters, imported lazily so a worker never pays for another's framework."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from services.workers.predictors.base import Predictor
from shared.errors import ConfigurationError

__all__ = ["Predictor", "PredictorFactory", "predictor_factory"]


@dataclass(frozen=True)
class PredictorFactory:
    create: Callable[[], Predictor]
    version: Callable[[], str]


def predictor_factory(framework: str) -> PredictorFactory:
    try:
        if framework == "onnxruntime":
            from services.workers.predictors import onnxrt

            return PredictorFactory(onnxrt.OnnxRuntimePredictor, onnxrt.framework_version)
        if framework == "pytorch":
            from services.workers.predictors import torchscript

            return PredictorFactory(torchscript.TorchScriptPredictor, torchscript.framework_version)
    except ImportError as exc:
        raise ConfigurationError(f"framework {framework!r} is not installed here: {exc}") from exc
    raise ConfigurationError(
        f"no predictor for framework {framework!r} in this version of dlscope; "
        "available: onnxruntime, pytorch"
    )
