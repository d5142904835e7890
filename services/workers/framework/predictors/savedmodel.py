"""TensorFlow predictor: SavedModel folders, run through one of their signatures (on the CPU;
a GPU where TensorFlow sees one and the job asks for it).

The signature is ``serving_default`` unless the manifest names another in its
``attributes.signature``; its inputs and outputs are matched to the manifest's by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from services.workers.framework.ports import LayerProfiler, Unavailable
from services.workers.framework.predictors.tensorflow_profiling import TensorFlowProfiler
from shared.config import quiet_framework_logs
from shared.errors import PredictorError
from shared.manifests import ModelManifest
from shared.messages import ProfiledLevel

__all__ = ["SavedModelPredictor", "framework_version"]

DEFAULT_SIGNATURE = "serving_default"


def _tensorflow() -> Any:
    # TensorFlow logs its CPU-feature banner at INFO on import: noise in a worker's log.
    quiet_framework_logs()
    import tensorflow as tf

    return tf


def framework_version() -> str:
    return str(_tensorflow().__version__)


class SavedModelPredictor:
    framework = "tensorflow"

    def __init__(self) -> None:
        self._model: Any = None
        self._serve: Any = None
        self._device = "/CPU:0"
        self._output_names: list[str] = []

    def open(self, manifest: ModelManifest, model_path: Path, *, hardware: str) -> None:
        tf = _tensorflow()
        if hardware == "gpu":
            if not tf.config.list_physical_devices("GPU"):
                raise PredictorError(f"tensorflow {tf.__version__} sees no GPU here")
            self._device = "/GPU:0"
        elif hardware != "cpu":
            raise PredictorError(f"the tensorflow worker runs on cpu or gpu, not {hardware!r}")
        if not model_path.is_dir():
            raise PredictorError(
                f"tensorflow cannot load {manifest.ref}: a SavedModel is a folder, and "
                f"{model_path.name} is a file (name the folder with the source's archive/member)"
            )
        signature = str(manifest.attributes.get("signature", DEFAULT_SIGNATURE))
        try:
            with tf.device(self._device):
                model = tf.saved_model.load(str(model_path))
        except Exception as exc:  # TensorFlow raises many unrelated types for a bad folder
            raise PredictorError(
                f"tensorflow cannot load {manifest.ref} as a SavedModel: {exc}"
            ) from exc
        signatures = dict(model.signatures)
        if signature not in signatures:
            raise PredictorError(
                f"{manifest.ref}: the SavedModel has no signature {signature!r}; it has "
                f"{sorted(signatures) or 'none'}"
            )
        serve = signatures[signature]
        _, takes = serve.structured_input_signature
        declared = {spec.name for spec in manifest.inputs}
        if set(takes) != declared:
            raise PredictorError(
                f"{manifest.ref}: the manifest declares inputs {sorted(declared)} but signature "
                f"{signature!r} takes {sorted(takes)}"
            )
        gives = set(serve.structured_outputs)
        self._output_names = [spec.name for spec in manifest.outputs]
        missing = [name for name in self._output_names if name not in gives]
        if missing:
            raise PredictorError(
                f"{manifest.ref}: signature {signature!r} has no outputs {missing}; it gives "
                f"{sorted(gives)}"
            )
        # The loaded object owns the variables the signature reads: it must outlive it.
        self._model, self._serve = model, serve

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        outputs = self._serve(**inputs)
        return [outputs[name].numpy() for name in self._output_names]

    def profiler(self, level: ProfiledLevel) -> LayerProfiler | Unavailable:
        if self._serve is None:
            raise PredictorError("the tensorflow predictor has no model open")
        on_gpu = self._device != "/CPU:0"
        if level == "framework":
            return TensorFlowProfiler(self.predict, kernels=False)
        if level == "hardware":
            if on_gpu:
                return TensorFlowProfiler(self.predict, kernels=True)
            return Unavailable("tensorflow runs this model on the CPU: no device kernels to trace")
        if on_gpu:
            return Unavailable(
                "cuDNN and cuBLAS calls are not reported by tensorflow's profiler (their "
                "kernels are, at the hardware level)"
            )
        return Unavailable(
            "tensorflow has no run-time switch for oneDNN's verbose mode (ONEDNN_VERBOSE is "
            "read once, when the process starts); its oneDNN kernels show at the framework "
            "level, as _Mkl* op types"
        )

    def close(self) -> None:
        self._model = self._serve = None

    def describe(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "framework_version": framework_version(),
            "device": self._device,
        }
