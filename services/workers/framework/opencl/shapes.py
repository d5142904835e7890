"""Static shapes: every tensor's shape, once the graph inputs' shapes are known.

The engine plans memory and sizes kernel launches ahead of running, so each node's output
shape is worked out from its inputs' shapes, its attributes and its constant inputs (a
Reshape's target, say) -- the ONNX rules for the operators the engine runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from services.workers.framework.opencl.graph import Node
from shared.errors import PredictorError

__all__ = ["Shape", "Window", "broadcast", "infer_outputs", "reshape_target", "window"]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Window:
    """Where a convolution or pooling window goes over the spatial dimensions (2-D; a 1-D
    operator is the same with a height of 1)."""

    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads_begin: tuple[int, int]
    pads_end: tuple[int, int]
    output: tuple[int, int]


def _pair(values: list[int], rank: int, default: int, height: int) -> tuple[int, int]:
    """Two values (height, width) from ``rank`` given ones; a 1-D operator's height is
    ``height`` (1 for sizes, strides and dilations, 0 for pads)."""
    values = list(values) if values else [default] * rank
    return (height, values[0]) if rank == 1 else (values[0], values[1])


def window(node: Node, spatial: Shape, kernel: Shape) -> Window:
    """Output size and padding of ``node``'s window over an input of ``spatial`` size,
    following auto_pad (SAME_UPPER, SAME_LOWER, VALID, NOTSET) and ceil_mode."""
    rank = len(spatial)
    if rank not in (1, 2):
        raise PredictorError(
            f"{node.op_type} {node.name!r}: only 1-D and 2-D windows are supported"
        )
    size = _pair(list(spatial), rank, 1, 1)
    kern = _pair(list(kernel), rank, 1, 1)
    strides = _pair(node.attr("strides", []), rank, 1, 1)
    dilations = _pair(node.attr("dilations", []), rank, 1, 1)
    pads = list(node.attr("pads", [])) or [0] * (2 * rank)
    begin = _pair(pads[:rank], rank, 0, 0)
    end = _pair(pads[rank:], rank, 0, 0)
    auto_pad = node.attr("auto_pad", "NOTSET")
    ceil_mode = bool(node.attr("ceil_mode", 0))
    out = []
    new_begin, new_end = [], []
    for axis in range(2):
        extent = (kern[axis] - 1) * dilations[axis] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = math.ceil(size[axis] / strides[axis])
            total = max(0, (o - 1) * strides[axis] + extent - size[axis])
            small, large = total // 2, total - total // 2
            b, e = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
        else:
            b, e = (0, 0) if auto_pad == "VALID" else (begin[axis], end[axis])
            span = size[axis] + b + e - extent
            o = (-(-span // strides[axis]) if ceil_mode else span // strides[axis]) + 1
            if ceil_mode and (o - 1) * strides[axis] >= size[axis] + b:
                o -= 1  # the last window must start inside the input or its leading padding
        if o <= 0:
            raise PredictorError(
                f"{node.op_type} {node.name!r}: a {kern} window does not fit an input of {size}"
            )
        out.append(o)
        new_begin.append(b)
        new_end.append(e)
    return Window(
        kernel=kern,
        strides=strides,
        dilations=dilations,
        pads_begin=(new_begin[0], new_begin[1]),
        pads_end=(new_end[0], new_end[1]),
        output=(out[0], out[1]),
    )


def broadcast(*shapes: Shape) -> Shape:
    """Numpy's (and ONNX's multidirectional) broadcasting."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError as exc:
        raise PredictorError(f"shapes {' and '.join(map(str, shapes))} do not broadcast") from exc


def reshape_target(node: Node, source: Shape, target: np.ndarray) -> Shape:
    """Reshape's output: 0 copies the input's dimension (unless allowzero), -1 is inferred."""
    dims = [int(d) for d in target.reshape(-1)]
    allowzero = bool(node.attr("allowzero", 0))
    dims = [source[i] if d == 0 and not allowzero else d for i, d in enumerate(dims)]
    if dims.count(-1) == 1:
        known = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = math.prod(source) // known if known else 0
    if math.prod(dims) != math.prod(source) or any(d < 0 for d in dims):
        raise PredictorError(f"Reshape {node.name!r}: cannot reshape {source} into {dims}")
    return tuple(dims)


def _axes(node: Node, constants: dict[str, np.ndarray], position: int) -> list[int] | None:
    """Axes given as an attribute (older opsets) or as a constant input (opset 13 on)."""
    if len(node.inputs) > position and node.inputs[position]:
        name = node.inputs[position]
        if name not in constants:
            raise PredictorError(f"{node.op_type} {node.name!r}: its axes must be constant")
        return [int(a) for a in constants[name].reshape(-1)]
    axes = node.attr("axes")
    return None if axes is None else [int(a) for a in axes]


def _same(node: Node, shapes: list[Shape], constants: dict[str, np.ndarray]) -> list[Shape]:
    return [shapes[0]]


def _elementwise(node: Node, shapes: list[Shape], constants: dict[str, np.ndarray]) -> list[Shape]:
    return [broadcast(*shapes)]


def _conv(node: Node, shapes: list[Shape], constants: dict[str, np.ndarray]) -> list[Shape]:
    x, w = shapes[0], shapes[1]
    win = window(node, x[2:], w[2:])
    spatial = win.output if len(x) == 4 else win.output[1:]
    return [(x[0], w[0], *spatial)]


def _pool(node: Node, shapes: list[Shape], constants: dict[str, np.ndarray]) -> list[Shape]:
    x = shapes[0]
    win = window(node, x[2:], tuple(node.attr("kernel_shape")))
    return [(x[0], x[1], *(win.output if len(x) == 4 else win.output[1:]))]


def _global_pool(node: Node, shapes: list[Shape], constants: dict[str, np.ndarray]) -> list[Shape]:
    x = shapes[0]
    return [(x[0], x[1], *([1] * (len(x) - 2)))]


def _gemm(node: Node, shapes: list[Shape], constants: dict[str, np.ndarray]) -> list[Shape]:
    a, b = shapes[0], shapes[1]
    rows = a[1] if node.attr("transA", 0) else a[0]
    cols = b[0] if node.attr("transB", 0) else b[1]
    return [(rows, cols)]


def _matmul(node: Node, shapes: list[Shape], constants: dict[str, np.ndarray]) -> list[Shape]:
    a, b = shapes
    if a[-1] != (b[0] if len(b) == 1 else b[-2]):
        raise PredictorError(f"MatMul {node.name!r}: {a} and {b} do not multiply")
    if len(a) == 1 or len(b) == 1:
        return [tuple(int(d) for d in np.matmul(np.empty(a), np.empty(b)).shape)]
    return [(*broadcast(a[:-2], b[:-2]), a[-2], b[-1])]


def _concat(node: Node, shapes: list[Shape], constants: dict[str, np.ndarray]) -> list[Shape]:
    axis = node.attr("axis") % len(shapes[0])
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [tuple(out)]


def _flatten(node: Node, shapes: list[Shape], constants: dict[str, np.ndarray]) -> list[Shape]:
    x = shapes[0]
    axis = node.attr("axis", 1) % (len(x) + 1) if x else 0
    return [(math.prod(x[:axis]), math.prod(x[axis:]))]


def _reshape(node: Node, shapes: list[Shape], constants: dict[str, np.ndarray]) -> list[Shape]:
    if len(node.inputs) > 1:
        if node.inputs[1] not in constants:
            raise PredictorError(
                f"Reshape {node.name!r}: its target shape {node.inputs[1]!r} is computed at run "
                "time; the engine needs it constant for a given input shape"
            )
        target = constants[node.inputs[1]]
    else:
        target = np.asarray(node.attr("shape"))
    return [reshape_target(node, shapes[0], target)]


def _squeeze(node: Node, shapes: list[Shape], constants: dict[str, np.ndarray]) -> list[Shape]:
    x = shapes[0]
    axes = _axes(node, constants, 1)
    drop = (
        {a % len(x) for a in axes} if axes is not None else {i for i, d in enumerate(x) if d == 1}
    )
    return [tuple(d for i, d in enumerate(x) if i not in drop)]


def _unsqueeze(node: Node, shapes: list[Shape], constants: dict[str, np.ndarray]) -> list[Shape]:
    x = shapes[0]
    axes = _axes(node, constants, 1) or []
    rank = len(x) + len(axes)
    inserted = {a % rank for a in axes}
    rest = iter(x)
    return [tuple(1 if i in inserted else next(rest) for i in range(rank))]


def _transpose(node: Node, shapes: list[Shape], constants: dict[str, np.ndarray]) -> list[Shape]:
    x = shapes[0]
    perm = node.attr("perm") or list(reversed(range(len(x))))
    return [tuple(x[p] for p in perm)]


def _dense(node: Node, shapes: list[Shape], constants: dict[str, np.ndarray]) -> list[Shape]:
    # The engine's own fully connected node: x [..., K] times a constant [M, K].
    return [(*shapes[0][:-1], shapes[1][0])]


SHAPE_RULES: dict[str, Callable[[Node, list[Shape], dict[str, np.ndarray]], list[Shape]]] = {
    "Conv": _conv,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "Dense": _dense,
    "Concat": _concat,
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Transpose": _transpose,
    "Add": _elementwise,
    "Sub": _elementwise,
    "Mul": _elementwise,
    "Div": _elementwise,
    "Sum": _elementwise,
    **dict.fromkeys(
        (
            "Relu",
            "Clip",
            "LeakyRelu",
            "Sigmoid",
            "BatchNormalization",
            "ChannelAffine",
            "LRN",
            "Softmax",
            "Dropout",
            "Identity",
        ),
        _same,
    ),
}


def infer_outputs(
    node: Node, shapes: dict[str, Shape], constants: dict[str, np.ndarray]
) -> list[Shape]:
    """The shapes of ``node``'s outputs (Dropout's mask output is not produced)."""
    rule = SHAPE_RULES.get(node.op_type)
    if rule is None:
        raise PredictorError(
            f"{node.op_type} {node.name!r} runs on tensors computed at run time, but the engine "
            "only evaluates it on constants (folded when the graph is loaded)"
        )
    given = [
        shapes[name] if name in shapes else tuple(constants[name].shape)
        for name in node.inputs
        if name
    ]
    return rule(node, given, constants)
