"""ONNX Runtime predictor: the CPU execution provider, or on a GPU the CUDA or the TensorRT one.

On ``hardware="gpu"`` the manifest's ``attributes.execution_provider`` picks the provider:
``cuda`` (the default) or ``tensorrt`` (TensorRT with CUDA for the nodes TensorRT does not
take; ``attributes.precision: fp16`` lets it build FP16 kernels). A provider this
onnxruntime build lacks is an error naming the providers it has: a benchmark never falls
back to another device without saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from services.workers.framework.ports import LayerProfiler, Unavailable
from services.workers.framework.predictors.engines import engine_dir, precision_of
from services.workers.framework.predictors.onnxrt_profiling import OnnxRuntimeProfiler
from shared.errors import PredictorError
from shared.manifests import ModelManifest
from shared.messages import ProfiledLevel

__all__ = ["OnnxRuntimePredictor", "framework_version"]

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
# What ``attributes.execution_provider`` may name on a GPU, and the providers that gives, in
# ONNX Runtime's order of preference.
GPU_PROVIDERS: dict[str, list[str]] = {"cuda": [CUDA], "tensorrt": [TENSORRT, CUDA]}


def framework_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


def _providers(manifest: ModelManifest, hardware: str) -> list[str | tuple[str, dict[str, Any]]]:
    if hardware == "cpu":
        return [CPU]
    if hardware != "gpu":
        raise PredictorError(f"the onnxruntime worker runs on cpu or gpu, not {hardware!r}")
    choice = str(manifest.attributes.get("execution_provider", "cuda"))
    if choice not in GPU_PROVIDERS:
        raise PredictorError(
            f"{manifest.ref}: attributes.execution_provider is {choice!r}; on a GPU "
            f"onnxruntime runs {' or '.join(sorted(GPU_PROVIDERS))}"
        )
    providers: list[str | tuple[str, dict[str, Any]]] = list(GPU_PROVIDERS[choice])
    if choice == "tensorrt":
        # Building an engine takes minutes for a large graph: ONNX Runtime keeps them on disk
        # beside dlscope's own, keyed by its own hash of the graph and the options.
        options = {
            "trt_fp16_enable": precision_of(manifest) == "fp16",
            "trt_engine_cache_enable": True,
            "trt_engine_cache_path": str(engine_dir() / "onnxruntime"),
        }
        providers[0] = (TENSORRT, options)
    return providers


class OnnxRuntimePredictor:
    framework = "onnxruntime"

    def __init__(self) -> None:
        self._session: Any = None
        self._run: Any = None
        self._output_names: list[str] = []
        self._provider = ""
        self._device = ""
        self._open_session: Callable[[Any], Any] | None = None
        self._model_path = Path()

    def open(self, manifest: ModelManifest, model_path: Path, *, hardware: str) -> None:
        import onnxruntime as ort

        providers = _providers(manifest, hardware)
        wanted = [p if isinstance(p, str) else p[0] for p in providers]
        available = ort.get_available_providers()
        missing = [p for p in wanted if p not in available]
        if missing:
            raise PredictorError(
                f"onnxruntime {ort.__version__} here has no {', '.join(missing)} to run "
                f"{manifest.ref} on {hardware!r} (onnxruntime-gpu with CUDA, cuDNN, and TensorRT "
                f"where asked for, is needed); available execution providers: "
                f"{', '.join(available)}"
            )

        def open_session(options: Any) -> Any:
            try:
                session = ort.InferenceSession(str(model_path), options, providers=providers)
            except Exception as exc:  # ORT raises its own untyped exception classes
                raise PredictorError(f"onnxruntime cannot load {manifest.ref}: {exc}") from exc
            # A provider that fails to start (no driver, a missing cuDNN) only logs, and ONNX
            # Runtime runs the graph on the CPU instead: that would be measured as the GPU.
            if session.get_providers()[0] != wanted[0]:
                raise PredictorError(
                    f"onnxruntime could not start {wanted[0]} for {manifest.ref} (it fell back "
                    f"to {', '.join(session.get_providers())}): check the CUDA driver and "
                    "libraries"
                )
            return session

        options = ort.SessionOptions()
        options.log_severity_level = 3  # warnings about unused initializers are noise here
        session = open_session(options)
        graph_inputs = {i.name for i in session.get_inputs()}
        declared = {i.name for i in manifest.inputs}
        if graph_inputs != declared:
            raise PredictorError(
                f"{manifest.ref}: the manifest declares inputs {sorted(declared)} but the graph "
                f"takes {sorted(graph_inputs)}"
            )
        self._session = session
        # Bound once: the hot path is one call, with no attribute or name look-ups per query.
        self._run = session.run
        self._output_names = [o.name for o in session.get_outputs()]
        self._provider = wanted[0]
        self._device = "cpu" if hardware == "cpu" else "cuda:0"
        self._open_session = open_session
        self._model_path = model_path

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._run(self._output_names, inputs)  # type: ignore[no-any-return]

    def profiler(self, level: ProfiledLevel) -> LayerProfiler | Unavailable:
        if self._open_session is None:
            raise PredictorError("the onnxruntime predictor has no model open")
        if level == "framework":
            return OnnxRuntimeProfiler(self._open_session, self._model_path)
        if level == "library":
            return Unavailable(
                f"onnxruntime's {self._provider} reports its nodes and nothing of the "
                "libraries under them (MLAS on a CPU; cuDNN/cuBLAS calls need CUPTI, which "
                "dlscope does not read through onnxruntime)"
            )
        if self._device == "cpu":
            return Unavailable("onnxruntime runs this model on the CPU: no device kernels to trace")
        return Unavailable(
            "CUDA kernels under onnxruntime need CUPTI, which dlscope does not read through "
            "onnxruntime; its node times are at the framework level"
        )

    def close(self) -> None:
        self._session = self._run = self._open_session = None

    def describe(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "framework_version": framework_version(),
            "device": self._device,
            "execution_provider": self._provider,
        }
