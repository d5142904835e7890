"""ONNX Runtime's own profiler: a session of its own with ``enable_profiling``, whose JSON
trace (Chrome trace format) names every node it ran, with its op type, shapes, thread and
execution provider.

Profiling is a session option, so the profiled pass runs a second session of the same graph
with the same options and providers; the timed session is never touched. Node names are the
graph's where ONNX Runtime kept them; a node its optimizer rewrote carries a suffix
(``conv1_nchwc``), which is taken off when what remains names a node of the graph, so the
layer lines up with the same node on another framework.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from shared.errors import PredictorError
from shared.messages import LayerTiming

__all__ = ["SOURCE", "OnnxRuntimeProfiler", "graph_node_names", "layers_of_trace"]

SOURCE = "onnxruntime session profiling"
_KERNEL_SUFFIX = "_kernel_time"


def graph_node_names(model_path: Path) -> frozenset[str]:
    """The names of the graph's nodes (its weights are not read)."""
    import onnx

    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception:  # a graph onnx cannot read but ONNX Runtime could: names stay as given
        return frozenset()
    return frozenset(node.name for node in model.graph.node if node.name)


def graph_name(reported: str, graph_nodes: frozenset[str]) -> str:
    """The graph node a name ONNX Runtime reported stands for: itself, or the longest prefix
    (cut at an underscore) naming a node of the graph; else the name as reported."""
    if reported in graph_nodes or not graph_nodes:
        return reported
    cut = reported
    while "_" in cut:
        cut = cut.rsplit("_", 1)[0]
        if cut in graph_nodes:
            return cut
    return reported


def _shapes(described: Iterable[dict[str, list[int]]]) -> tuple[tuple[int, ...], ...]:
    # Each tensor is {"<element type>": [dims]}.
    return tuple(tuple(int(d) for d in dims) for tensor in described for dims in tensor.values())


def layers_of_trace(
    events: list[dict[str, Any]], start_ns: int, graph_nodes: frozenset[str]
) -> list[LayerTiming]:
    """The node events of a profiling trace, on the wall clock: ``ts`` counts microseconds
    from the session's profiling start, ``start_ns`` (ns since the epoch)."""
    layers = []
    for event in events:
        if event.get("cat") != "Node" or not event["name"].endswith(_KERNEL_SUFFIX):
            continue
        args = event.get("args", {})
        begin = start_ns + int(event["ts"]) * 1000
        layers.append(
            LayerTiming(
                node=graph_name(event["name"].removesuffix(_KERNEL_SUFFIX), graph_nodes),
                op_type=str(args.get("op_name", "?")),
                input_shapes=_shapes(args.get("input_type_shape", [])),
                output_shapes=_shapes(args.get("output_type_shape", [])),
                start_ns=begin,
                end_ns=begin + int(event["dur"]) * 1000,
                thread=event.get("tid"),
                implementation=args.get("provider"),
            )
        )
    layers.sort(key=lambda layer: layer.start_ns)
    return layers


class OnnxRuntimeProfiler:
    """A profiling session of the model, opened by ``start`` and closed by ``stop``."""

    source = SOURCE

    def __init__(self, open_session: Callable[[Any], Any], model_path: Path) -> None:
        # ``open_session(options)``: the predictor's own way to open the graph (providers,
        # checks), given session options with profiling switched on.
        self._open_session = open_session
        self._model_path = model_path
        self._session: Any = None
        self._output_names: list[str] = []
        self._folder: Path | None = None

    def start(self) -> None:
        import onnxruntime as ort

        self._folder = Path(tempfile.mkdtemp(prefix="dlscope-ort-profile-"))
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.enable_profiling = True
        options.profile_file_prefix = str(self._folder / "profile")
        self._session = self._open_session(options)
        self._output_names = [o.name for o in self._session.get_outputs()]

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._session.run(self._output_names, inputs)  # type: ignore[no-any-return]

    def stop(self) -> list[LayerTiming]:
        session, self._session = self._session, None
        try:
            if session is None:
                return []
            start_ns = int(session.get_profiling_start_time_ns())
            path = Path(session.end_profiling())
            try:
                events = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise PredictorError(f"cannot read onnxruntime's profile {path}: {exc}") from exc
            return layers_of_trace(events, start_ns, graph_node_names(self._model_path))
        finally:
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
                self._folder = None
