"""An ONNX graph as the engine sees it: nodes with Python attributes, constants as arrays.

Loading keeps what execution needs and nothing of protobuf: attribute values become Python
values (tensors become numpy arrays), initializers become constants, and the run-time inputs
are the graph inputs that no initializer feeds (older IR versions list weights as inputs too).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from shared.errors import PredictorError

__all__ = [
    "Activation",
    "Graph",
    "GraphInput",
    "Node",
    "check_supported",
    "consumers",
    "graph_from_model",
    "load_graph",
    "topological_order",
]


@dataclass(frozen=True)
class Activation:
    """An element-wise function applied in another kernel's epilogue (see kernels/common.cl)."""

    kind: str  # relu, clip, leaky_relu, sigmoid
    a: float = 0.0  # clip's min, leaky_relu's alpha
    b: float = 0.0  # clip's max


@dataclass(frozen=True)
class Node:
    """One operation. ``fused`` names the ONNX nodes folded into this one (their timings are
    this node's); ``activation`` is one of them, applied to this node's output."""

    name: str
    op_type: str
    inputs: tuple[str, ...]  # "" where an optional input is absent
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    fused: tuple[str, ...] = ()
    activation: Activation | None = None

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def absorbing(self, other: Node, **changes: Any) -> Node:
        """This node with ``other`` fused into it, producing ``other``'s outputs."""
        return replace(
            self,
            outputs=other.outputs,
            fused=(*self.fused, other.name, *other.fused),
            **changes,
        )


@dataclass(frozen=True)
class GraphInput:
    name: str
    dtype: np.dtype[Any]
    dims: tuple[int | None, ...]  # None: chosen at run time (a batch dimension, say)


@dataclass(frozen=True)
class Graph:
    name: str
    opset: int
    nodes: tuple[Node, ...]
    constants: dict[str, np.ndarray]
    inputs: tuple[GraphInput, ...]
    outputs: tuple[str, ...]

    def with_nodes(self, nodes: Iterable[Node], constants: dict[str, np.ndarray]) -> Graph:
        return replace(self, nodes=tuple(nodes), constants=constants)


def _attribute(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_attribute(v) for v in value]
    return value


def _dims(value_info: onnx.ValueInfoProto) -> tuple[int | None, ...]:
    return tuple(
        d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
        for d in value_info.type.tensor_type.shape.dim
    )


def graph_from_model(model: onnx.ModelProto) -> Graph:
    """The engine's view of ``model``; node names are made unique where ONNX leaves them empty."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    nodes = []
    for index, proto in enumerate(model.graph.node):
        op_type = (
            proto.op_type if proto.domain in ("", "ai.onnx") else f"{proto.domain}.{proto.op_type}"
        )
        nodes.append(
            Node(
                name=proto.name or f"{proto.op_type}_{index}",
                op_type=op_type,
                inputs=tuple(proto.input),
                outputs=tuple(proto.output),
                attrs={a.name: _attribute(helper.get_attribute_value(a)) for a in proto.attribute},
            )
        )
    inputs = []
    for value in model.graph.input:
        if value.name in constants:
            continue
        elem_type = value.type.tensor_type.elem_type
        inputs.append(
            GraphInput(
                value.name, np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)), _dims(value)
            )
        )
    return Graph(
        name=model.graph.name,
        opset=opset,
        nodes=tuple(nodes),
        constants=constants,
        inputs=tuple(inputs),
        outputs=tuple(o.name for o in model.graph.output),
    )


def load_graph(path: Path) -> Graph:
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # protobuf's DecodeError, OSError, onnx's own checks
        raise PredictorError(f"{path} is not a readable ONNX model: {exc}") from exc
    return graph_from_model(model)


def check_supported(graph: Graph, supported: Iterable[str]) -> None:
    """Refuse a graph that uses any operator the engine cannot run, naming all of them at once
    (with the nodes that use them), so a user learns the whole gap from one attempt."""
    known = set(supported)
    missing: defaultdict[str, list[str]] = defaultdict(list)
    for node in graph.nodes:
        if node.op_type not in known:
            missing[node.op_type].append(node.name)
    if missing:
        listed = "; ".join(
            f"{op} (nodes: {', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
            for op, names in sorted(missing.items())
        )
        raise PredictorError(
            f"the OpenCL engine does not support {len(missing)} operator type(s) in graph "
            f"{graph.name!r}: {listed}"
        )


def topological_order(nodes: Sequence[Node], available: Iterable[str]) -> list[Node]:
    """``nodes`` ordered so that each comes after the producers of its inputs (stable: ONNX's
    own order where it already is one). ``available``: tensors known before any node runs."""
    ready = set(available) | {""}
    waiting = list(nodes)
    ordered: list[Node] = []
    while waiting:
        still: list[Node] = []
        for node in waiting:
            if all(name in ready for name in node.inputs):
                ordered.append(node)
                ready.update(node.outputs)
            else:
                still.append(node)
        if len(still) == len(waiting):
            missing = sorted({n for node in still for n in node.inputs if n not in ready})
            raise PredictorError(
                f"the graph has a cycle or reads tensors nothing produces: {', '.join(missing[:5])}"
            )
        waiting = still
    return ordered


def consumers(nodes: Iterable[Node]) -> dict[str, list[Node]]:
    """Tensor name -> the nodes that read it."""
    readers: defaultdict[str, list[Node]] = defaultdict(list)
    for node in nodes:
        for name in node.inputs:
            if name:
                readers[name].append(node)
    return readers
