"""Work done once, before any kernel runs: constants folded, batch norms folded into weights.

Folding runs twice. When the graph is loaded, every node whose inputs are all constants
(initializers, Constant and ConstantOfShape nodes: the zoo's placeholder weights are made
that way) is evaluated, and each BatchNormalization that follows a Conv is folded into the
Conv's weights and bias. When a plan is made for one input shape, the graph inputs' shapes
are known too: Shape nodes become constants, and so does what is computed from them (the
Shape -> Gather -> Concat chains that exporters put in front of a Reshape), while every
tensor's shape is worked out on the way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from services.workers.framework.opencl.graph import Graph, Node, consumers, topological_order
from services.workers.framework.opencl.shapes import Shape, infer_outputs
from shared.errors import PredictorError

__all__ = ["FOLDED_OPS", "fold_batch_norm", "fold_constants", "prune"]

# Operators the engine evaluates only on constants: it has no kernels for them.
FOLDED_OPS = frozenset(
    {
        "Constant",
        "ConstantOfShape",
        "Shape",
        "Gather",
        "Cast",
        "Range",
        "Slice",
        "Expand",
        "Equal",
        "Where",
        "Size",
        "Neg",
        "Sqrt",
        "Pow",
        "ReduceProd",
        "Floor",
        "Ceil",
    }
)


def _constant(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if key in node.attrs:
            return [np.asarray(node.attrs[key], dtype=dtype)]
    for key, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if key in node.attrs:
            return [np.asarray(node.attrs[key], dtype=dtype)]
    if "value" not in node.attrs:
        raise PredictorError(
            f"Constant {node.name!r}: only tensor and numeric values are supported"
        )
    return [np.asarray(node.attrs["value"])]


def _constant_of_shape(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    value = node.attr("value", np.zeros(1, dtype=np.float32))
    return [np.full(tuple(int(d) for d in inputs[0]), value.reshape(-1)[0], dtype=value.dtype)]


def _unsqueeze(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    axes = node.attr("axes") if len(inputs) == 1 else [int(a) for a in inputs[1]]
    rank = inputs[0].ndim + len(axes)
    return [np.expand_dims(inputs[0], tuple(sorted(a % rank for a in axes)))]


# Evaluated here rather than by onnx's reference evaluator, which costs about 2 ms a node:
# the zoo's graphs make hundreds of placeholder weights with these.
_NATIVE: dict[str, Callable[[Node, list[np.ndarray]], list[np.ndarray]]] = {
    "Constant": _constant,
    "ConstantOfShape": _constant_of_shape,
    "Identity": lambda node, inputs: [inputs[0]],
    "Unsqueeze": _unsqueeze,
}


def _attribute(value: Any) -> Any:
    return numpy_helper.from_array(value) if isinstance(value, np.ndarray) else value


def _evaluate(node: Node, inputs: list[np.ndarray], opset: int) -> list[np.ndarray]:
    native = _NATIVE.get(node.op_type)
    if native is not None:
        return native(node, inputs)
    proto = helper.make_node(
        node.op_type,
        list(node.inputs),
        list(node.outputs),
        name=node.name,
        **{k: _attribute(v) for k, v in node.attrs.items()},
    )
    try:
        evaluator = ReferenceEvaluator(proto, opsets={"": opset})
        feeds = {name: value for name, value in zip(node.inputs, inputs, strict=True) if name}
        return [np.asarray(v) for v in evaluator.run(None, feeds)]
    except Exception as exc:  # the reference evaluator raises whatever numpy raises
        raise PredictorError(
            f"cannot fold {node.op_type} {node.name!r} on its constant inputs: {exc}"
        ) from exc


def fold_constants(
    graph: Graph, input_shapes: dict[str, Shape] | None = None
) -> tuple[Graph, dict[str, Shape]]:
    """``graph`` with every node it can evaluate ahead of time replaced by its outputs.

    Without ``input_shapes``, only nodes on constants fold. With them, Shape nodes fold too,
    and the shape of every run-time tensor is returned (the graph inputs' included).
    """
    constants = dict(graph.constants)
    shapes: dict[str, Shape] = dict(input_shapes or {})
    kept: list[Node] = []
    available = [i.name for i in graph.inputs]
    for node in topological_order(graph.nodes, [*available, *constants]):
        present = [name for name in node.inputs if name]
        if node.op_type == "Shape" and present[0] in shapes:
            dims = np.asarray(shapes[present[0]], dtype=np.int64)
            constants[node.outputs[0]] = dims[node.attr("start", 0) : node.attr("end", None)]
            continue
        if all(name in constants for name in present):
            values = [constants[name] if name else np.empty(0) for name in node.inputs]
            for name, value in zip(
                node.outputs, _evaluate(node, values, graph.opset), strict=False
            ):
                if name:
                    constants[name] = value
            continue
        kept.append(node)
        if input_shapes is not None:
            for name, shape in zip(
                node.outputs, infer_outputs(node, shapes, constants), strict=False
            ):
                shapes[name] = shape
    return prune(graph.with_nodes(kept, constants)), shapes


def prune(graph: Graph) -> Graph:
    """``graph`` without the nodes and constants that no graph output depends on."""
    needed = set(graph.outputs)
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if any(name in needed for name in node.outputs):
            kept.append(node)
            needed.update(name for name in node.inputs if name)
    constants = {k: v for k, v in graph.constants.items() if k in needed}
    return graph.with_nodes(reversed(kept), constants)


def fold_batch_norm(graph: Graph) -> Graph:
    """Each BatchNormalization whose input is a Conv's output (read by nothing else) folded
    into that Conv: w' = w * s, b' = (b - mean) * s + beta, s = scale / sqrt(var + eps).

    Conv then BatchNormalization is what most CNNs do; folding saves a pass over the
    activations at every such layer and leaves no trace in the results."""
    readers = consumers(graph.nodes)
    constants = dict(graph.constants)
    producers = {out: node for node in graph.nodes for out in node.outputs}
    replaced: dict[str, Node] = {}  # conv name -> folded conv
    dropped: set[str] = set()
    for bn in graph.nodes:
        if bn.op_type != "BatchNormalization" or any(bn.outputs[1:]):
            continue
        conv = producers.get(bn.inputs[0])
        params = bn.inputs[1:5]
        if (
            conv is None
            or conv.op_type != "Conv"
            or conv.name in replaced
            or len(readers[conv.outputs[0]]) != 1
            or conv.outputs[0] in graph.outputs
            or not all(name in constants for name in (*conv.inputs[1:], *params) if name)
        ):
            continue
        scale, beta, mean, var = (constants[name].astype(np.float64) for name in params)
        weight = constants[conv.inputs[1]].astype(np.float64)
        has_bias = len(conv.inputs) > 2 and conv.inputs[2]
        bias = constants[conv.inputs[2]].astype(np.float64) if has_bias else np.zeros(len(weight))
        factor = scale / np.sqrt(var + bn.attr("epsilon", 1e-5))
        weight_name, bias_name = f"{conv.name}/folded_weight", f"{conv.name}/folded_bias"
        shape = (-1,) + (1,) * (weight.ndim - 1)
        constants[weight_name] = (weight * factor.reshape(shape)).astype(np.float32)
        constants[bias_name] = ((bias - mean) * factor + beta).astype(np.float32)
        replaced[conv.name] = conv.absorbing(bn, inputs=(conv.inputs[0], weight_name, bias_name))
        dropped.add(bn.name)
    nodes = [replaced.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    return prune(graph.with_nodes(nodes, constants))
