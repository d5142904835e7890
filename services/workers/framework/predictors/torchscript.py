"""PyTorch predictor: the two formats torch loads and runs without the model's Python code.

- ``.pt2``: a ``torch.export`` program (``torch.export.save``), loaded with
  ``torch.export.load``: the format torch recommends since 2.x;
- anything else: TorchScript (``torch.jit.save``), deprecated in torch 2.13 but still the
  format most published models come in.

The model file's name decides, so one manifest field (``source``, with its ``member`` for an
archive) says everything. Runs on the CPU; on CUDA where torch has it and the job asks for a
GPU.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from services.workers.framework.ports import LayerProfiler, Unavailable
from services.workers.framework.predictors.torch_profiling import (
    OneDnnVerboseProfiler,
    TorchProfiler,
)
from shared.errors import PredictorError
from shared.manifests import ModelManifest
from shared.messages import ProfiledLevel

__all__ = ["EXPORTED_PROGRAM_SUFFIX", "TorchScriptPredictor", "framework_version"]

EXPORTED_PROGRAM_SUFFIX = ".pt2"


def framework_version() -> str:
    import torch

    # "2.13.0+cpu": the local build label says which build measured, and constraints
    # such as ">=2.13" still match it.
    return str(torch.__version__)


def _load_torchscript(torch: Any, manifest: ModelManifest, path: Path, device: str) -> Any:
    with warnings.catch_warnings():
        # torch 2.13 deprecates TorchScript in favour of torch.export; models still come in it.
        warnings.filterwarnings(
            "ignore", message=r"`torch\.jit\.\w+` is deprecated", category=DeprecationWarning
        )
        try:
            module = torch.jit.load(str(path), map_location=device)
        except (RuntimeError, ValueError) as exc:
            raise PredictorError(
                f"pytorch cannot load {manifest.ref} as TorchScript: {exc}"
            ) from exc
    return module.eval()


def _load_exported(torch: Any, manifest: ModelManifest, path: Path, device: str) -> Any:
    try:
        program = torch.export.load(str(path))
    except Exception as exc:  # zipfile, pickle and torch's own errors, untyped
        raise PredictorError(
            f"pytorch cannot load {manifest.ref} as a torch.export program: {exc}"
        ) from exc
    # An exported program is already in inference form (no train/eval switch to flip).
    return program.module().to(device)


class TorchScriptPredictor:
    framework = "pytorch"

    def __init__(self) -> None:
        self._module: Any = None
        self._device = "cpu"
        self._format = ""
        self._input_names: list[str] = []
        self._output_names: list[str] = []
        self._no_autograd: Any = None
        self._tensor: Callable[[np.ndarray], Any] = _unopened
        self._array: Callable[[Any], np.ndarray] = _unopened

    def open(self, manifest: ModelManifest, model_path: Path, *, hardware: str) -> None:
        import torch

        if hardware == "gpu":
            if not torch.cuda.is_available():
                raise PredictorError(
                    f"torch {torch.__version__} sees no CUDA GPU here for {manifest.ref} "
                    "(a CUDA build of torch and an NVIDIA driver are needed)"
                )
            device = "cuda"
        elif hardware == "cpu":
            device = "cpu"
        else:
            raise PredictorError(f"the pytorch worker runs on cpu or gpu, not {hardware!r}")
        if model_path.suffix == EXPORTED_PROGRAM_SUFFIX:
            self._module = _load_exported(torch, manifest, model_path, device)
            self._format = "torch.export"
        else:
            self._module = _load_torchscript(torch, manifest, model_path, device)
            self._format = "torchscript"
        self._device = device
        # Both formats take positional tensors: in the manifest's input order.
        self._input_names = [spec.name for spec in manifest.inputs]
        self._output_names = [spec.name for spec in manifest.outputs]
        # The hot path's conversions, chosen once: on the CPU a tensor shares the array's
        # memory both ways, with no copy and no device transfer call.
        self._no_autograd = torch.inference_mode
        if device == "cpu":
            self._tensor = torch.from_numpy
            self._array = _cpu_array
        else:
            self._tensor = lambda array: torch.from_numpy(array).to(device)
            self._array = _device_array

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        tensor, array = self._tensor, self._array
        with self._no_autograd():
            outputs = self._module(*[tensor(inputs[name]) for name in self._input_names])
        if isinstance(outputs, (list, tuple)):  # a tuple of types: cheaper than a union
            return [array(output) for output in outputs]
        if isinstance(outputs, dict):  # named outputs: in the manifest's order
            return [array(outputs[name]) for name in self._output_names]
        return [array(outputs)]

    def profiler(self, level: ProfiledLevel) -> LayerProfiler | Unavailable:
        import torch

        if self._module is None:
            raise PredictorError("the pytorch predictor has no model open")
        on_gpu = self._device != "cpu"
        if level == "framework":
            return TorchProfiler(self.predict, kernels=False)
        if level == "hardware":
            if on_gpu:
                return TorchProfiler(self.predict, kernels=True)
            return Unavailable("pytorch runs this model on the CPU: no device kernels to trace")
        if on_gpu:
            return Unavailable(
                "cuDNN and cuBLAS calls are not reported by torch's profilers (their kernels "
                "are, at the hardware level)"
            )
        if not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
            return Unavailable(f"torch {torch.__version__} here is built without oneDNN")
        return OneDnnVerboseProfiler(self.predict)

    def close(self) -> None:
        self._module = None

    def describe(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "framework_version": framework_version(),
            "device": self._device,
            "format": self._format,
        }


def _cpu_array(tensor: Any) -> np.ndarray:
    return tensor.numpy()  # type: ignore[no-any-return]


def _device_array(tensor: Any) -> np.ndarray:
    return tensor.cpu().numpy()  # type: ignore[no-any-return]


def _unopened(_: Any) -> Any:
    raise PredictorError("the pytorch predictor is not open: call open() first")
