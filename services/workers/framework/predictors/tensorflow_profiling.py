"""TensorFlow's own profiler (``tf.profiler.experimental``): the ops its executor ran, read
from the XSpace it writes (``*.xplane.pb``), and on a GPU the kernels CUPTI saw.

Each op event is named ``<node>:<kernel>``: the graph node (``Relu``, the last node of a
chain grappler fused) and the kernel that ran it (``_MklNativeFusedConv2D``, a oneDNN one).
Times in the XSpace count from the profile's start, which its "Task Environment" plane gives
on the wall clock. TensorFlow's trace records no tensor shapes: its layers come without.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from shared.errors import PredictorError
from shared.messages import LayerTiming

__all__ = ["SOURCE", "TensorFlowProfiler", "layers_of_xspace"]

SOURCE = "tensorflow profiler (XSpace)"
# Scopes the call of a signature's function adds in front of every node name.
_CALL_SCOPES = ("StatefulPartitionedCall/", "PartitionedCall/")
# Bookkeeping nodes of a function call, not layers.
_NOT_LAYERS = frozenset({"_Arg", "_Retval", "NoOp", "_EagerConst"})

Predict = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


def _node(name: str) -> str:
    for scope in _CALL_SCOPES:
        while name.startswith(scope):
            name = name.removeprefix(scope)
    return name


def _profile_start_ns(space: Any) -> int:
    for plane in space.planes:
        if plane.name == "Task Environment":
            for stat in plane.stats:
                if plane.stat_metadata[stat.metadata_id].name == "profile_start_time":
                    return int(stat.uint64_value or stat.int64_value)
    raise PredictorError("tensorflow's profile names no start time (no Task Environment plane)")


def layers_of_xspace(space: Any, *, kernels: bool) -> list[LayerTiming]:
    """The op events of the host plane (or, with ``kernels``, the events of the GPU planes),
    on the wall clock, in the order they started."""
    started = _profile_start_ns(space)
    layers = []
    for plane in space.planes:
        on_device = plane.name.startswith("/device:GPU")
        if plane.name != "/host:CPU" and not on_device:
            continue
        if on_device != kernels:
            continue
        for line in plane.lines:
            # Line timestamps count from the profile's start, or (older builds) from the epoch.
            base = line.timestamp_ns if line.timestamp_ns > started else started + line.timestamp_ns
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if kernels:
                    node, kernel = name, "cuda kernel"
                elif ":" not in name or "::" in name or " " in name:
                    continue  # the executor's own bookkeeping ("EagerLocalExecute: f"), not an op
                else:
                    node, _, kernel = name.rpartition(":")
                if kernel in _NOT_LAYERS:
                    continue
                begin = base + event.offset_ps // 1000
                layers.append(
                    LayerTiming(
                        node=_node(node),
                        op_type=kernel,
                        start_ns=begin,
                        end_ns=begin + event.duration_ps // 1000,
                        implementation=plane.name if on_device else None,
                    )
                )
    layers.sort(key=lambda layer: layer.start_ns)
    return layers


class TensorFlowProfiler:
    """tf.profiler around the profiled queries, writing to a folder of its own."""

    source = SOURCE

    def __init__(self, predict: Predict, *, kernels: bool) -> None:
        self._predict = predict
        self._kernels = kernels
        self._folder: Path | None = None

    def start(self) -> None:
        import tensorflow as tf

        self._folder = Path(tempfile.mkdtemp(prefix="dlscope-tf-profile-"))
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=2, python_tracer_level=0, device_tracer_level=int(self._kernels)
        )
        tf.profiler.experimental.start(str(self._folder), options=options)

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._predict(inputs)

    def stop(self) -> list[LayerTiming]:
        import tensorflow as tf
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

        folder, self._folder = self._folder, None
        if folder is None:
            return []
        try:
            tf.profiler.experimental.stop()
            written = sorted(folder.rglob("*.xplane.pb"))
            if not written:
                raise PredictorError("tensorflow's profiler wrote no trace")
            space = xplane_pb2.XSpace()
            space.ParseFromString(written[-1].read_bytes())
            return layers_of_xspace(space, kernels=self._kernels)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
