"""TensorRT's own profiler: an ``IProfiler`` on the execution context, told each layer's time
after every execution.

TensorRT names a layer after the ONNX nodes it computes (``/conv1/Conv + /relu/Relu`` for a
fusion), so its layers line up with the graph: the first node names the layer, the others are
``fused``, and the op type is the first node's in the graph. It reports times, not timestamps:
one query's layers are laid out one after the other from the query's start (each layer's
length is right, its place approximate). TensorRT itself is imported by the caller, lazily.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from shared.messages import LayerTiming

__all__ = ["SOURCE", "TensorRTProfiler", "trt_layers"]

SOURCE = "TensorRT IProfiler"

Predict = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


def trt_layers(
    reports: list[tuple[str, float]], call_start_ns: int, op_types: Mapping[str, str]
) -> list[LayerTiming]:
    """One execution's ``(layer name, milliseconds)`` reports as layers from ``call_start_ns``."""
    layers, at = [], call_start_ns
    for name, milliseconds in reports:
        nodes = [part.strip() for part in name.split(" + ")]
        took = int(milliseconds * 1e6)
        layers.append(
            LayerTiming(
                node=nodes[0],
                op_type=op_types.get(nodes[0], "Reformat" if "Reformat" in name else "TensorRT"),
                fused=tuple(nodes[1:]),
                start_ns=at,
                end_ns=at + took,
            )
        )
        at += took
    return layers


class TensorRTProfiler:
    """The execution context's profiler set for the profiled queries, and taken off after."""

    source = SOURCE

    def __init__(
        self, trt: Any, context: Any, predict: Predict, op_types: Mapping[str, str]
    ) -> None:
        self._context = context
        self._predict = predict
        self._op_types = op_types
        self._recorder = _recorder_class(trt)()
        self._layers: list[LayerTiming] = []

    def start(self) -> None:
        self._layers = []
        self._recorder.reports = []
        # Reported as each execution ends (which makes it synchronous while profiled).
        self._context.enqueue_emits_profile = True
        self._context.profiler = self._recorder

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        began = time.time_ns()
        outputs = self._predict(inputs)
        reports, self._recorder.reports = self._recorder.reports, []
        self._layers += trt_layers(reports, began, self._op_types)
        return outputs

    def stop(self) -> list[LayerTiming]:
        self._context.profiler = None
        return self._layers


def _recorder_class(trt: Any) -> Any:
    class Recorder(trt.IProfiler):  # type: ignore[misc]
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)
            self.reports: list[tuple[str, float]] = []

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            self.reports.append((layer_name, ms))

    return Recorder
