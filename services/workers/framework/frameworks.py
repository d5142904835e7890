"""What a framework process is: its framework, imported lazily (a worker never pays for
another's), what it announces about itself, and how it makes its ports.

A framework either runs models in this process (``predictor``: ONNX Runtime, PyTorch,
TensorFlow, TensorRT, OpenCL) or measures a model served elsewhere (``backend``: the
endpoint, whose server runs the model). The session that measures a job is chosen from
that (``sessions.session_for``), never from the framework's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.workers.availability import FRAMEWORKS, install_hint
from services.workers.framework.ports import GenerationBackend, Predictor
from services.workers.handover import FrameworkOptions
from shared.errors import ConfigurationError

__all__ = ["Framework", "framework_for"]


def _no_device(hardware: str) -> dict[str, Any]:
    return {}


def _usable(hardware: str) -> str | None:
    return None


@dataclass(frozen=True)
class Framework:
    name: str
    version: Callable[[], str]
    # Makes the predictor of a model in this process; None where the model runs elsewhere.
    predictor: Callable[[], Predictor] | None = None
    # Makes the generation backend of a model served elsewhere (the endpoint).
    backend: Callable[[], GenerationBackend] | None = None
    # What the framework itself sees of the device it runs on (an OpenCL platform and
    # device, a server's models), announced with the worker's capabilities.
    device: Callable[[str], dict[str, Any]] = _no_device
    # Why the framework can run nothing on the hardware here although it is installed (an
    # OpenCL device whose compiler builds no kernel, an endpoint worker with no URL), or None.
    unusable: Callable[[str], str | None] = _usable
    options: FrameworkOptions = field(default_factory=FrameworkOptions)

    @property
    def needs_weights(self) -> bool:
        """Whether its jobs load the model's weights here (the worker fetches them)."""
        return self.predictor is not None

    def create(self) -> Predictor:
        """A predictor of this framework, for a model in this process."""
        if self.predictor is None:
            raise ConfigurationError(f"{self.name} runs no model here: its server does")
        return self.predictor()


def framework_for(name: str, options: FrameworkOptions | None = None) -> Framework:
    """The framework ``name``, made with the worker's ``options``; a ``ConfigurationError``
    saying what to install when it is not installed here."""
    options = options or FrameworkOptions()
    try:
        return _framework(name, options)
    except ImportError as exc:
        raise ConfigurationError(
            f"framework {name!r} is not installed here: {exc}; {install_hint(name)}"
        ) from exc


def _framework(name: str, options: FrameworkOptions) -> Framework:
    if name == "onnxruntime":
        from services.workers.framework.predictors import onnxrt

        return Framework(
            name, onnxrt.framework_version, onnxrt.OnnxRuntimePredictor, options=options
        )
    if name == "pytorch":
        from services.workers.framework.predictors import torchscript

        return Framework(
            name, torchscript.framework_version, torchscript.TorchScriptPredictor, options=options
        )
    if name == "tensorflow":
        from services.workers.framework.predictors import savedmodel

        return Framework(
            name, savedmodel.framework_version, savedmodel.SavedModelPredictor, options=options
        )
    if name == "tensorrt":
        from services.workers.framework.predictors import tensorrt
        from services.workers.framework.predictors.engines import engine_dir

        engines = engine_dir(options.home)
        return Framework(
            name,
            tensorrt.framework_version,
            lambda: tensorrt.TensorRTPredictor(engines),
            options=options,
        )
    if name == "opencl":
        from services.workers.framework.opencl.settings import OpenCLSettings
        from services.workers.framework.predictors import opencl

        settings = OpenCLSettings(binary=options.opencl_binary, platform=options.opencl_platform)
        return Framework(
            name,
            opencl.framework_version,
            lambda: opencl.OpenCLPredictor(settings),
            device=lambda hardware: opencl.device_capabilities(hardware, settings.platform),
            unusable=lambda hardware: opencl.unusable(hardware, settings.platform),
            options=options,
        )
    if name == "endpoint":
        from services.workers.framework import endpoint

        served = options.endpoint
        return Framework(
            name,
            lambda: endpoint.API_VERSION,
            backend=lambda: endpoint.EndpointBackend(served),
            device=lambda hardware: endpoint.described_endpoint(served),
            unusable=lambda hardware: endpoint.unusable(served),
            options=options,
        )
    raise ConfigurationError(
        f"no predictor for framework {name!r} in this version of dlscope; "
        f"available: {', '.join(FRAMEWORKS)}"
    )
