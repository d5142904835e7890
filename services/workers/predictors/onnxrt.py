"""ONNX Runtime predictor (CPU execution provider; CUDA where installed and asked for)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from shared.errors import PredictorError
from shared.manifests import ModelManifest

__all__ = ["OnnxRuntimePredictor", "framework_version"]

_PROVIDERS = {"cpu": "CPUExecutionProvider", "gpu": "CUDAExecutionProvider"}


def framework_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


class OnnxRuntimePredictor:
    framework = "onnxruntime"

    def __init__(self) -> None:
        self._session: Any = None
        self._provider = ""

    def open(self, manifest: ModelManifest, model_path: Path, *, hardware: str) -> None:
        import onnxruntime as ort

        provider = _PROVIDERS.get(hardware)
        if provider is None or provider not in ort.get_available_providers():
            available = ", ".join(ort.get_available_providers())
            raise PredictorError(
                f"onnxruntime {ort.__version__} cannot run on {hardware!r} here; "
                f"available execution providers: {available}"
            )
        options = ort.SessionOptions()
        options.log_severity_level = 3  # warnings about unused initializers are noise here
        try:
            self._session = ort.InferenceSession(str(model_path), options, providers=[provider])
        except Exception as exc:  # ORT raises its own untyped exception classes
            raise PredictorError(f"onnxruntime cannot load {manifest.ref}: {exc}") from exc
        self._provider = provider
        graph_inputs = {i.name for i in self._session.get_inputs()}
        declared = {i.name for i in manifest.inputs}
        if graph_inputs != declared:
            raise PredictorError(
                f"{manifest.ref}: the manifest declares inputs {sorted(declared)} but the graph "
                f"takes {sorted(graph_inputs)}"
            )

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._session.run(None, inputs)  # type: ignore[no-any-return]

    def close(self) -> None:
        self._session = None

    def describe(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "framework_version": framework_version(),
            "execution_provider": self._provider,
        }
