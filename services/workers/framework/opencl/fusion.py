"""Nodes merged so that fewer kernels make fewer passes over memory (per input shape).

- BatchNormalization that no Conv absorbed becomes a ``ChannelAffine`` (x * scale + shift per
  channel), which also absorbs a following per-channel Mul or Add (DenseNet's scale layers).
- Gemm and MatMul by a constant become ``Dense`` (weights [outputs, K]), which absorbs a
  following bias Add.
- Conv absorbs the Add (or two-input Sum) of a residual connection.
- Conv, Dense, ChannelAffine and element-wise binary nodes absorb a following activation
  (Relu, Clip, LeakyRelu, Sigmoid).

A node absorbs another only when nothing else reads the tensor between them, so no result
that anyone reads disappears. ``Dense`` and ``ChannelAffine`` are the engine's own operators.
"""

from __future__ import annotations

import numpy as np

from services.workers.framework.opencl.graph import Activation, Graph, Node, consumers
from services.workers.framework.opencl.shapes import Shape
from shared.errors import PredictorError

__all__ = ["activation_of", "fuse"]

_FLOAT_MAX = float(np.finfo(np.float32).max)
ACTIVATIONS = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid"})
_TAKES_ACTIVATION = frozenset({"Conv", "Dense", "ChannelAffine", "Add", "Sub", "Mul", "Div"})


def activation_of(node: Node, constants: dict[str, np.ndarray]) -> Activation:
    """The epilogue that computes activation node ``node``."""
    if node.op_type == "Relu":
        return Activation("relu")
    if node.op_type == "Sigmoid":
        return Activation("sigmoid")
    if node.op_type == "LeakyRelu":
        return Activation("leaky_relu", a=float(node.attr("alpha", 0.01)))
    bounds = [float(node.attr("min", -_FLOAT_MAX)), float(node.attr("max", _FLOAT_MAX))]
    for position, name in enumerate(node.inputs[1:3]):  # opset 11 on: inputs, not attributes
        if not name:
            continue
        if name not in constants:
            raise PredictorError(f"Clip {node.name!r}: its bounds must be constant")
        bounds[position] = float(constants[name].reshape(-1)[0])
    return Activation("clip", a=bounds[0], b=bounds[1])


def _normalise(graph: Graph, shapes: dict[str, Shape]) -> Graph:
    constants = dict(graph.constants)
    nodes: list[Node] = []
    for node in graph.nodes:
        if node.op_type == "BatchNormalization":
            params = node.inputs[1:5]
            if not all(name in constants for name in params):
                raise PredictorError(
                    f"BatchNormalization {node.name!r}: the engine needs its scale, bias, mean "
                    "and variance constant (inference mode)"
                )
            scale, beta, mean, var = (constants[n].astype(np.float64) for n in params)
            factor = scale / np.sqrt(var + node.attr("epsilon", 1e-5))
            constants[f"{node.name}/scale"] = factor.astype(np.float32)
            constants[f"{node.name}/shift"] = (beta - mean * factor).astype(np.float32)
            nodes.append(
                Node(
                    node.name,
                    "ChannelAffine",
                    (node.inputs[0], f"{node.name}/scale", f"{node.name}/shift"),
                    node.outputs[:1],
                    fused=node.fused,
                    attrs={"onnx_op": "BatchNormalization"},
                )
            )
        elif node.op_type in ("Gemm", "MatMul") and node.inputs[1] in constants:
            nodes.extend(_dense(node, constants, shapes))
        else:
            nodes.append(node)
    return graph.with_nodes(nodes, constants)


def _dense(node: Node, constants: dict[str, np.ndarray], shapes: dict[str, Shape]) -> list[Node]:
    """Gemm or MatMul with constant weights as Dense (plus an Add when Gemm's C is not a
    bias vector), or the node unchanged when it is not a product by a 2-D constant.
    ``shapes`` gains the shape of the product that the Add then reads."""
    b = constants[node.inputs[1]]
    if b.ndim != 2 or node.attr("transA", 0):
        return [node]
    weight = (b if node.attr("transB", 0) else b.T) * np.float32(node.attr("alpha", 1.0))
    constants[f"{node.name}/weight"] = np.ascontiguousarray(weight, dtype=np.float32)
    inputs = (node.inputs[0], f"{node.name}/weight")
    attrs = {"onnx_op": node.op_type}
    c = node.inputs[2] if len(node.inputs) > 2 else ""
    if not c:
        return [Node(node.name, "Dense", inputs, node.outputs, attrs, fused=node.fused)]
    bias = constants.get(c)
    beta = np.float32(node.attr("beta", 1.0))
    if (
        bias is not None
        and bias.size in (1, len(weight))
        and bias.shape[:-1] == (1,) * (bias.ndim - 1)
    ):
        constants[f"{node.name}/bias"] = np.broadcast_to(
            bias.reshape(-1) * beta, (len(weight),)
        ).astype(np.float32)
        return [
            Node(
                node.name,
                "Dense",
                (*inputs, f"{node.name}/bias"),
                node.outputs,
                attrs,
                fused=node.fused,
            )
        ]
    product = f"{node.name}/product"
    shapes[product] = shapes[node.outputs[0]]
    if beta != 1:
        if bias is None:
            raise PredictorError(f"Gemm {node.name!r}: beta != 1 needs a constant C")
        constants[f"{node.name}/c"] = (bias * beta).astype(np.float32)
        c = f"{node.name}/c"
    return [
        Node(node.name, "Dense", inputs, (product,), attrs, fused=node.fused),
        Node(f"{node.name}/add_c", "Add", (product, c), node.outputs),
    ]


def _along(value: np.ndarray, shape: Shape, axis: int) -> np.ndarray | None:
    """``value`` as a vector along ``axis`` of ``shape`` when broadcasting it against ``shape``
    varies only along that axis and leaves ``shape`` unchanged; else None."""
    if value.ndim > len(shape):
        return None
    padded = value.reshape((1,) * (len(shape) - value.ndim) + value.shape)
    if any(d != 1 for i, d in enumerate(padded.shape) if i != axis % len(shape)):
        return None
    if padded.shape[axis] not in (1, shape[axis]):
        return None
    return np.broadcast_to(padded.reshape(-1), (shape[axis],)).astype(np.float32)


def fuse(graph: Graph, shapes: dict[str, Shape]) -> Graph:
    """``graph`` with nodes merged; ``shapes`` gains the tensors that fusion introduces."""
    graph = _normalise(graph, shapes)
    fuser = _Fuser(graph, shapes)
    for node in graph.nodes:
        fuser.add(node)
    return graph.with_nodes((n for n in fuser.nodes if n is not None), fuser.constants)


class _Fuser:
    """One pass in topological order; ``nodes`` holds the result, None where a node moved."""

    def __init__(self, graph: Graph, shapes: dict[str, Shape]) -> None:
        self.constants = dict(graph.constants)
        self.nodes: list[Node | None] = []
        self._shapes = shapes
        self._readers = consumers(graph.nodes)
        self._outputs = set(graph.outputs)
        self._where: dict[str, int] = {}  # tensor -> index of its producer in ``nodes``

    def add(self, node: Node) -> None:
        index: int | None = None
        if node.op_type in ACTIVATIONS:
            index = self._absorb_activation(node)
        elif node.op_type in ("Add", "Mul") or (node.op_type == "Sum" and len(node.inputs) == 2):
            index = self._absorb_binary(node)
        if index is None:
            self.nodes.append(node)
            index = len(self.nodes) - 1
        for name in node.outputs:
            self._where[name] = index

    def _producer(self, name: str) -> tuple[int, Node] | None:
        """The node making ``name``, if nothing but one node reads ``name``."""
        index = self._where.get(name)
        if index is None or len(self._readers[name]) != 1 or name in self._outputs:
            return None
        node = self.nodes[index]
        return None if node is None else (index, node)

    def _absorb_activation(self, node: Node) -> int | None:
        found = self._producer(node.inputs[0])
        if not found or found[1].op_type not in _TAKES_ACTIVATION or found[1].activation:
            return None
        index, into = found
        self.nodes[index] = into.absorbing(node, activation=activation_of(node, self.constants))
        return index

    def _absorb_binary(self, node: Node) -> int | None:
        """Fold Add/Mul ``node`` into the node producing one of its operands, if it can."""
        out = self._shapes[node.outputs[0]]
        for mine, other in ((0, 1), (1, 0)):
            found = self._producer(node.inputs[mine])
            if not found or found[1].activation or self._shapes[node.inputs[mine]] != out:
                continue
            index, into = found
            operand = node.inputs[other]
            if operand in self.constants:
                absorbed = self._constant_operand(node, into, self.constants[operand], out)
                if absorbed is not None:
                    self.nodes[index] = absorbed
                    return index
            elif (
                into.op_type == "Conv"
                and node.op_type != "Mul"
                and len(into.inputs) <= 3
                and self._shapes.get(operand) == out
            ):
                # Runs where the Add was: the residual operand exists by then, and nothing in
                # between read the Conv's output.
                padded = (*into.inputs, *[""] * (3 - len(into.inputs)))
                self.nodes[index] = None
                self.nodes.append(into.absorbing(node, inputs=(*padded, operand)))
                return len(self.nodes) - 1
        return None

    def _constant_operand(
        self, node: Node, into: Node, value: np.ndarray, out: Shape
    ) -> Node | None:
        if into.op_type == "ChannelAffine":
            vector = _along(value, out, 1)
            if vector is None:
                return None
            scale, shift = (self.constants[n] for n in into.inputs[1:3])
            if node.op_type == "Mul":
                scale, shift = scale * vector, shift * vector
            else:
                shift = shift + vector
            names = (f"{node.name}/scale", f"{node.name}/shift")
            self.constants[names[0]], self.constants[names[1]] = scale, shift
            return into.absorbing(node, inputs=(into.inputs[0], *names))
        if into.op_type == "Dense" and node.op_type != "Mul":
            vector = _along(value, out, -1)
            if vector is None:
                return None
            if len(into.inputs) > 2:
                vector = vector + self.constants[into.inputs[2]]
            self.constants[f"{node.name}/bias"] = vector
            return into.absorbing(node, inputs=(*into.inputs[:2], f"{node.name}/bias"))
        return None
