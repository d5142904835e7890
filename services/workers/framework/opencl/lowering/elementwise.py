"""Element-wise operators: activations, broadcasting arithmetic, per-channel affine."""

from __future__ import annotations

import math

import numpy as np

from services.workers.framework.opencl.fusion import activation_of
from services.workers.framework.opencl.graph import Activation, Node
from services.workers.framework.opencl.lowering.base import (
    Alias,
    Arg,
    Context,
    Launch,
    Layer,
    TensorArg,
    activation_args,
    grid,
    i32,
    right_aligned,
)
from services.workers.framework.opencl.shapes import Shape

__all__ = ["binary_launch", "lower_activation", "lower_affine", "lower_binary", "lower_sum"]

_OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Sum": 0}


def _strides(shape: Shape, out: Shape) -> list[int]:
    """Element strides of a contiguous ``shape`` read as ``out``: 0 where it broadcasts."""
    padded = right_aligned(shape, 1, len(out))
    strides, step = [], 1
    for extent in reversed(padded):
        strides.append(step if extent != 1 else 0)
        step *= extent
    return right_aligned(list(reversed(strides)), 0)


def binary_launch(
    ctx: Context,
    key: str,
    operands: tuple[TensorArg, TensorArg],
    shapes: tuple[Shape, Shape],
    out: tuple[TensorArg, Shape],
    op: str,
    activation: Activation | None = None,
) -> Launch:
    """``out = activation(a op b)`` with numpy broadcasting of ``a`` and ``b`` to ``out``."""
    target, out_shape = out
    count = math.prod(out_shape)
    layout = None
    if shapes[0] != out_shape or shapes[1] != out_shape:
        table = np.asarray(
            right_aligned(out_shape, 1)
            + _strides(shapes[0], out_shape)
            + _strides(shapes[1], out_shape),
            dtype=np.int32,
        )
        layout = ctx.pool.add(f"{key}/layout{shapes}", table)
    global_size, local_size = grid(count)
    args: tuple[Arg, ...] = (
        *operands,
        target,
        layout,
        i32(count),
        i32(layout is not None),
        i32(_OPS[op]),
        *activation_args(activation),
    )
    return Launch("binary", global_size, local_size, args)


def lower_binary(ctx: Context, node: Node) -> Layer:
    a, b = node.inputs
    out = node.outputs[0]
    launch = binary_launch(
        ctx,
        node.name,
        (ctx.tensor(a), ctx.tensor(b)),
        (ctx.shape(a), ctx.shape(b)),
        (TensorArg(out), ctx.shapes[out]),
        node.op_type,
        node.activation,
    )
    return ctx.layer(node, [launch])


def lower_sum(ctx: Context, node: Node) -> Layer | Alias:
    """Sum of one input is that input; of more, a chain of in-place additions."""
    if len(node.inputs) == 1:
        return Alias(node.outputs[0], node.inputs[0])
    out = (TensorArg(node.outputs[0]), ctx.shapes[node.outputs[0]])
    first, *rest = node.inputs
    launches: list[Launch] = []
    left, left_shape = ctx.tensor(first), ctx.shape(first)
    for index, name in enumerate(rest):
        last = index == len(rest) - 1
        launches.append(
            binary_launch(
                ctx,
                f"{node.name}/{index}",
                (left, ctx.tensor(name)),
                (left_shape, ctx.shape(name)),
                out,
                "Add",
                node.activation if last else None,
            )
        )
        left, left_shape = out
    return ctx.layer(node, launches)


def lower_activation(ctx: Context, node: Node) -> Layer:
    count = math.prod(ctx.shapes[node.outputs[0]])
    global_size, local_size = grid(count)
    args: tuple[Arg, ...] = (
        TensorArg(node.inputs[0]),
        TensorArg(node.outputs[0]),
        i32(count),
        *activation_args(activation_of(node, ctx.constants)),
    )
    return ctx.layer(node, [Launch("unary", global_size, local_size, args)])


def lower_affine(ctx: Context, node: Node) -> Layer:
    shape = ctx.shapes[node.outputs[0]]
    count = math.prod(shape)
    global_size, local_size = grid(count)
    args: tuple[Arg, ...] = (
        TensorArg(node.inputs[0]),
        ctx.tensor(node.inputs[1]),
        ctx.tensor(node.inputs[2]),
        TensorArg(node.outputs[0]),
        i32(count),
        i32(shape[1]),
        i32(math.prod(shape[2:])),
        *activation_args(node.activation),
    )
    return ctx.layer(node, [Launch("channel_affine", global_size, local_size, args)])
