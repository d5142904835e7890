"""PyTorch's own profilers: ``torch.profiler`` for operators (and CUDA kernels on a GPU,
through Kineto and CUPTI), oneDNN's verbose mode for the library primitives under them.

A layer at the framework level is a top-level operator of the model's forward: an ``aten::``
(or other namespace) call with no operator around it; what it calls in turn (aten::conv2d
-> aten::convolution -> aten::mkldnn_convolution) is inside its time. TorchScript keeps no
layer names, so a layer is named by its operator and how many of that operator ran before it
in its query (``aten::conv2d#1`` is the second convolution): the same in every query, so
each layer's calls line up across the pass.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import IO, Any

import numpy as np

from shared.messages import LayerTiming

__all__ = [
    "KINETO",
    "ONEDNN",
    "OneDnnVerboseProfiler",
    "TorchProfiler",
    "kernel_layers",
    "numbered",
    "onednn_layers",
    "operator_layers",
]

KINETO = "torch.profiler (Kineto)"
ONEDNN = "oneDNN verbose mode (torch.backends.mkldnn.verbose)"

Predict = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


def _is_operator(name: str) -> bool:
    return "::" in name


def operator_layers(events: Sequence[Any], trace_start_ns: int) -> list[LayerTiming]:
    """The top-level operators among torch.profiler's CPU events, on the wall clock:
    ``time_range`` counts microseconds from the trace's start, ``trace_start_ns``."""
    layers = []
    for event in events:
        if not _is_operator(event.name) or _on_cuda(event):
            continue
        parent = event.cpu_parent
        while parent is not None and not _is_operator(parent.name):
            parent = parent.cpu_parent
        if parent is not None:  # inside another operator: part of that layer's time
            continue
        start = trace_start_ns + int(event.time_range.start * 1000)
        layers.append(
            LayerTiming(
                node=event.name,
                op_type=event.name,
                # Arguments that are not tensors (a stride, a flag) have no shape: left out.
                input_shapes=tuple(tuple(shape) for shape in event.input_shapes or () if shape),
                start_ns=start,
                end_ns=trace_start_ns + int(event.time_range.end * 1000),
                thread=event.thread,
            )
        )
    return sorted(layers, key=lambda layer: layer.start_ns)


def kernel_layers(events: Sequence[Any], trace_start_ns: int) -> list[LayerTiming]:
    """The CUDA kernels among torch.profiler's events (a GPU run), on the wall clock."""
    kernels = [
        LayerTiming(
            node=event.name,
            op_type="cuda kernel",
            start_ns=trace_start_ns + int(event.time_range.start * 1000),
            end_ns=trace_start_ns + int(event.time_range.end * 1000),
            implementation=f"cuda:{event.device_index}",
        )
        for event in events
        if _on_cuda(event)
    ]
    return sorted(kernels, key=lambda layer: layer.start_ns)


def numbered(layers: list[LayerTiming], calls: Sequence[int]) -> list[LayerTiming]:
    """Each layer named ``<op>#<n>``: the n-th call of that op in its query, ``calls`` being
    the wall-clock starts of the queries, in order."""
    numbered_layers, seen = [], Counter[str]()
    query = -1
    for layer in layers:
        at = bisect.bisect_right(calls, layer.start_ns) - 1
        if at != query:
            query, seen = at, Counter()
        numbered_layers.append(
            layer.model_copy(update={"node": f"{layer.node}#{seen[layer.node]}"})
        )
        seen[layer.node] += 1
    return numbered_layers


def _on_cuda(event: Any) -> bool:
    return getattr(getattr(event, "device_type", None), "name", "") == "CUDA"


class TorchProfiler:
    """torch.profiler around the profiled queries: operators, or CUDA kernels."""

    source = KINETO

    def __init__(self, predict: Predict, *, kernels: bool) -> None:
        self._predict = predict
        self._kernels = kernels
        self._profile: Any = None
        self._calls: list[int] = []

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CUDA] if self._kernels else [ProfilerActivity.CPU]
        self._profile = profile(activities=activities, record_shapes=not self._kernels)
        self._profile.start()
        self._calls = []

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        self._calls.append(time.time_ns())
        return self._predict(inputs)

    def stop(self) -> list[LayerTiming]:
        profile, self._profile = self._profile, None
        if profile is None:
            return []
        profile.stop()
        start_ns = int(profile.profiler.kineto_results.trace_start_ns())
        events = profile.events()
        layers = (kernel_layers if self._kernels else operator_layers)(events, start_ns)
        return numbered(layers, self._calls)


def onednn_layers(lines: Sequence[str], call_start_ns: int) -> list[LayerTiming]:
    """One call's oneDNN primitive executions, from its verbose lines.

    oneDNN prints each execution's time but no timestamp: the primitives of one call are laid
    out one after the other from the call's start (they ran in that order, on the calling
    thread), so each span's length is right and its place is approximate."""
    layers, seen = [], Counter[str]()
    at = call_start_ns
    for line in lines:
        fields = line.rstrip().split(",")
        # onednn_verbose,v1,primitive,exec,<engine>,<kind>,<implementation>,<prop>,
        # <memory descriptors>,<attributes>,<auxiliary>,<problem>,<time ms>
        if len(fields) < 13 or fields[0] != "onednn_verbose" or fields[3] != "exec":
            continue
        kind, implementation, problem = fields[5], fields[6], fields[11]
        try:
            took = int(float(fields[12]) * 1e6)
        except ValueError:
            continue
        layers.append(
            LayerTiming(
                node=f"{kind}#{seen[kind]}",
                op_type=kind,
                start_ns=at,
                end_ns=at + took,
                implementation=f"{implementation} {problem}".strip(),
            )
        )
        seen[kind] += 1
        at += took
    return layers


class OneDnnVerboseProfiler:
    """oneDNN's verbose mode around each profiled query; its lines (printed by the library
    on the process's standard output) caught in a file, read after each call."""

    source = ONEDNN

    def __init__(self, predict: Predict) -> None:
        self._predict = predict
        self._capture: IO[bytes] | None = None
        self._saved_stdout = -1
        self._verbose: contextlib.ExitStack | None = None
        self._layers: list[LayerTiming] = []

    def start(self) -> None:
        import torch

        sys.stdout.flush()
        self._capture = tempfile.TemporaryFile()  # noqa: SIM115  (closed by stop())
        self._saved_stdout = os.dup(1)
        os.dup2(self._capture.fileno(), 1)
        self._verbose = contextlib.ExitStack()
        verbose = torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON)  # type: ignore[no-untyped-call]
        self._verbose.enter_context(verbose)
        self._layers = []

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        assert self._capture is not None
        before = self._capture.seek(0, os.SEEK_END)
        began = time.time_ns()
        outputs = self._predict(inputs)
        _flush_c_stdout()
        self._capture.seek(before)
        lines = self._capture.read().decode(errors="replace").splitlines()
        self._layers += onednn_layers(lines, began)
        return outputs

    def stop(self) -> list[LayerTiming]:
        if self._verbose is not None:
            self._verbose.close()
            self._verbose = None
        _flush_c_stdout()
        if self._saved_stdout >= 0:
            os.dup2(self._saved_stdout, 1)
            os.close(self._saved_stdout)
            self._saved_stdout = -1
        if self._capture is not None:
            self._capture.close()
            self._capture = None
        return self._layers


def _flush_c_stdout() -> None:
    """The C library's buffer of standard output, written out: oneDNN prints with printf,
    which a file (unlike a terminal) buffers."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)
