"""TensorRT predictor: an engine built from the model's ONNX graph, run on a CUDA GPU.

The engine is built in FP32, or FP16 where the manifest says ``attributes.precision: fp16``,
and cached under ``<DLSCOPE_HOME>/engines`` (see ``engines``). An input whose first dimension
is dynamic gets an optimization profile from batch 1 (what kernels are tuned for, the
single-stream case) to ``attributes.max_batch_size`` (64 unless given).

Queries run with TensorRT 10's tensor API (``execute_async_v3``) on a stream of their own;
the device buffers are torch CUDA tensors, kept from one query to the next while the batch
shape stays the same, so a query costs two copies and the engine's own work.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from services.workers.framework.ports import LayerProfiler, Unavailable
from services.workers.framework.predictors.engines import (
    EngineCache,
    Precision,
    engine_dir,
    engine_key,
    precision_of,
)
from services.workers.framework.predictors.tensorrt_profiling import TensorRTProfiler
from shared.errors import PredictorError
from shared.manifests import ModelManifest
from shared.messages import ProfiledLevel

__all__ = ["TensorRTPredictor", "framework_version"]

DEFAULT_MAX_BATCH = 64

# Checked when the worker asks for this adapter (frameworks.framework_for turns an ImportError
# into a ConfigurationError), without paying for TensorRT itself until a model is opened.
if importlib.util.find_spec("tensorrt") is None:
    raise ModuleNotFoundError(
        "TensorRT is not installed (NVIDIA's `tensorrt` 10 package; the tensorrt worker "
        "also needs a CUDA GPU)",
        name="tensorrt",
    )


def _tensorrt() -> Any:
    return importlib.import_module("tensorrt")


def framework_version() -> str:
    return str(_tensorrt().__version__)


def _torch_dtypes(torch: Any) -> dict[np.dtype[Any], Any]:
    return {
        np.dtype(np.float32): torch.float32,
        np.dtype(np.float16): torch.float16,
        np.dtype(np.int64): torch.int64,
        np.dtype(np.int32): torch.int32,
        np.dtype(np.int8): torch.int8,
        np.dtype(np.uint8): torch.uint8,
        np.dtype(np.bool_): torch.bool,
    }


class TensorRTPredictor:
    framework = "tensorrt"

    def __init__(self, engines: Path | None = None) -> None:
        self._engines = engines
        self._torch: Any = None
        self._runtime: Any = None
        self._engine: Any = None
        self._context: Any = None
        self._stream: Any = None
        self._input_names: list[str] = []
        self._output_names: list[str] = []
        self._dtypes: dict[str, Any] = {}
        self._shapes: tuple[tuple[int, ...], ...] = ()
        self._device_inputs: list[Any] = []
        self._device_outputs: list[Any] = []
        self._ref = ""
        self._max_batch = DEFAULT_MAX_BATCH
        self._description: dict[str, Any] = {}
        self._graph = b""

    def open(self, manifest: ModelManifest, model_path: Path, *, hardware: str) -> None:
        import torch

        trt = _tensorrt()
        if hardware != "gpu":
            raise PredictorError(f"TensorRT runs models on a CUDA GPU only, not on {hardware!r}")
        if not torch.cuda.is_available():
            raise PredictorError(
                f"no CUDA GPU here for {manifest.ref}: torch {torch.__version__} sees none "
                "(TensorRT needs one, and a CUDA build of torch for its buffers)"
            )
        precision = precision_of(manifest)
        self._max_batch = int(manifest.attributes.get("max_batch_size", DEFAULT_MAX_BATCH))
        try:
            graph = model_path.read_bytes()
        except OSError as exc:
            raise PredictorError(f"cannot read the ONNX graph of {manifest.ref}: {exc}") from exc
        gpu = torch.cuda.get_device_name()
        capability = ".".join(map(str, torch.cuda.get_device_capability()))
        key = engine_key(
            graph,
            precision=precision,
            tensorrt=trt.__version__,
            gpu=f"{gpu} sm_{capability}",
            batch=f"1..{self._max_batch}",
        )
        cache = EngineCache(self._engines or engine_dir())
        logger = trt.Logger(trt.Logger.WARNING)
        serialized, built = cache.get_or_build(
            key, lambda: self._build(trt, logger, manifest, graph, precision)
        )
        # The runtime outlives the engines it deserializes: kept as long as the predictor.
        runtime = trt.Runtime(logger)
        engine = runtime.deserialize_cuda_engine(serialized)
        if engine is None and not built:
            cache.discard(key)  # damaged on disk: build it again, once
            serialized, built = cache.get_or_build(
                key, lambda: self._build(trt, logger, manifest, graph, precision)
            )
            engine = runtime.deserialize_cuda_engine(serialized)
        if engine is None:
            raise PredictorError(f"TensorRT cannot deserialize the engine built for {manifest.ref}")

        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self._input_names = [
            n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT
        ]
        self._output_names = [n for n in names if n not in self._input_names]
        declared = {spec.name for spec in manifest.inputs}
        if set(self._input_names) != declared:
            raise PredictorError(
                f"{manifest.ref}: the manifest declares inputs {sorted(declared)} but the engine "
                f"takes {sorted(self._input_names)}"
            )
        dtypes = _torch_dtypes(torch)
        self._dtypes = {n: dtypes[np.dtype(trt.nptype(engine.get_tensor_dtype(n)))] for n in names}
        self._torch = torch
        self._runtime = runtime
        self._engine = engine
        self._context = engine.create_execution_context()
        # TensorRT synchronizes extra on the default stream: queries get a stream of their own.
        self._stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        self._shapes = ()
        self._ref = manifest.ref
        self._graph = graph
        self._description = {
            "device": f"cuda:{torch.cuda.current_device()}",
            "gpu": gpu,
            "precision": precision,
            "engine": str(cache.path(key)),
            "engine_built": built,
        }

    def _build(
        self, trt: Any, logger: Any, manifest: ModelManifest, graph: bytes, precision: Precision
    ) -> bytes:
        builder = trt.Builder(logger)
        network = builder.create_network(0)  # TensorRT 10: always explicit batch
        parser = trt.OnnxParser(network, logger)
        if not parser.parse(graph):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise PredictorError(
                f"TensorRT cannot parse the ONNX graph of {manifest.ref}: {errors}"
            )
        config = builder.create_builder_config()
        if precision == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        profile = builder.create_optimization_profile()
        dynamic = False
        for i in range(network.num_inputs):
            tensor = network.get_input(i)
            shape = list(tensor.shape)
            if -1 in shape[1:]:
                raise PredictorError(
                    f"{manifest.ref}: input {tensor.name!r} has shape {shape}; TensorRT engines "
                    "here take a dynamic batch (first) dimension only"
                )
            if shape and shape[0] == -1:
                dynamic = True
                rest = tuple(shape[1:])
                profile.set_shape(tensor.name, (1, *rest), (1, *rest), (self._max_batch, *rest))
        if dynamic:
            config.add_optimization_profile(profile)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise PredictorError(
                f"TensorRT could not build a {precision} engine for {manifest.ref} "
                "(its log above says why)"
            )
        return bytes(serialized)

    def _bind(self, shapes: tuple[tuple[int, ...], ...]) -> None:
        """New device buffers for a new batch shape; kept while the shape stays."""
        torch, context = self._torch, self._context
        self._device_inputs = []
        for name, shape in zip(self._input_names, shapes, strict=True):
            if not context.set_input_shape(name, shape):
                raise PredictorError(
                    f"the TensorRT engine of {self._ref} does not take {name!r} of shape "
                    f"{list(shape)} (its batch sizes are 1 to {self._max_batch}: "
                    "attributes.max_batch_size)"
                )
            buffer = torch.empty(shape, dtype=self._dtypes[name], device="cuda")
            context.set_tensor_address(name, buffer.data_ptr())
            self._device_inputs.append(buffer)
        self._device_outputs = []
        for name in self._output_names:
            shape = tuple(context.get_tensor_shape(name))
            buffer = torch.empty(shape, dtype=self._dtypes[name], device="cuda")
            context.set_tensor_address(name, buffer.data_ptr())
            self._device_outputs.append(buffer)
        self._shapes = shapes

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        torch = self._torch
        hosts = [inputs[name] for name in self._input_names]
        shapes = tuple(host.shape for host in hosts)
        if shapes != self._shapes:
            self._bind(shapes)
        with torch.cuda.stream(self._stream):
            for buffer, host in zip(self._device_inputs, hosts, strict=True):
                buffer.copy_(torch.from_numpy(host))
            if not self._context.execute_async_v3(self._stream.cuda_stream):
                raise PredictorError(f"TensorRT failed running {self._ref}")
            # Copies to (pageable) host memory wait for the stream: the answer is complete.
            return [buffer.cpu().numpy() for buffer in self._device_outputs]

    def profiler(self, level: ProfiledLevel) -> LayerProfiler | Unavailable:
        if self._context is None:
            raise PredictorError("the tensorrt predictor has no model open")
        if level != "framework":
            return Unavailable(
                f"the {level} level under TensorRT (cuDNN/cuBLAS calls, CUDA kernels) needs "
                "CUPTI, which dlscope does not read through TensorRT; its layers are at the "
                "framework level"
            )
        return TensorRTProfiler(_tensorrt(), self._context, self.predict, _op_types(self._graph))

    def close(self) -> None:
        # The context before the engine before the runtime: TensorRT's order of release.
        self._context = self._engine = self._runtime = self._stream = None
        self._device_inputs = self._device_outputs = []
        self._shapes = ()
        self._graph = b""

    def describe(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "framework_version": framework_version(),
            **self._description,
        }


def _op_types(graph: bytes) -> dict[str, str]:
    """Each ONNX node's op type, by node name: what TensorRT's layer names are made of."""
    import onnx

    try:
        model = onnx.load_from_string(graph)
    except Exception:  # the engine was built from it, so this is unlikely: names stay as given
        return {}
    return {node.name: node.op_type for node in model.graph.node if node.name}
