"""PyTorch predictor: TorchScript artifacts, the format torch loads and runs without the
model's Python code (on the CPU; CUDA where torch has it and the job asks for a GPU)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from shared.errors import PredictorError
from shared.manifests import ModelManifest

__all__ = ["TorchScriptPredictor", "framework_version"]


def framework_version() -> str:
    import torch

    # "2.13.0+cpu": the local build label says which build measured, and constraints
    # such as ">=2.13" still match it.
    return str(torch.__version__)


class TorchScriptPredictor:
    framework = "pytorch"

    def __init__(self) -> None:
        self._module: Any = None
        self._device = "cpu"
        self._input_names: list[str] = []

    def open(self, manifest: ModelManifest, model_path: Path, *, hardware: str) -> None:
        import torch

        if hardware == "gpu":
            if not torch.cuda.is_available():
                raise PredictorError(f"torch {torch.__version__} sees no CUDA device here")
            self._device = "cuda"
        elif hardware != "cpu":
            raise PredictorError(f"the pytorch worker runs on cpu or gpu, not {hardware!r}")
        with warnings.catch_warnings():
            # torch 2.13 deprecates TorchScript in favour of torch.export, but it is still
            # the one format torch runs without the model's Python code.
            warnings.filterwarnings(
                "ignore", message=r"`torch\.jit\.\w+` is deprecated", category=DeprecationWarning
            )
            try:
                module = torch.jit.load(str(model_path), map_location=self._device)  # type: ignore[no-untyped-call]
            except (RuntimeError, ValueError) as exc:
                raise PredictorError(
                    f"pytorch cannot load {manifest.ref} as TorchScript: {exc}"
                ) from exc
        self._module = module.eval()
        # TorchScript modules take positional tensors: in the manifest's input order.
        self._input_names = [spec.name for spec in manifest.inputs]

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        with torch.inference_mode():
            tensors = [
                torch.from_numpy(inputs[name]).to(self._device) for name in self._input_names
            ]
            outputs = self._module(*tensors)
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        return [o.detach().cpu().numpy() for o in outputs]

    def close(self) -> None:
        self._module = None

    def describe(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "framework_version": framework_version(),
            "device": self._device,
        }
