"""Softmax and local response normalisation."""

from __future__ import annotations

import math

from services.workers.framework.opencl.graph import Node
from services.workers.framework.opencl.lowering.base import (
    Arg,
    Context,
    Launch,
    Layer,
    TensorArg,
    f32,
    grid,
    i32,
)

__all__ = ["lower_lrn", "lower_softmax"]


def lower_softmax(ctx: Context, node: Node) -> Layer:
    """Before opset 13 Softmax flattens at ``axis`` (default 1) and normalises each row; from
    13 on it normalises along ``axis`` (default -1) alone."""
    shape = ctx.shapes[node.inputs[0]]
    if ctx.opset < 13:
        axis = node.attr("axis", 1) % len(shape)
        outer, length, inner = math.prod(shape[:axis]), math.prod(shape[axis:]), 1
    else:
        axis = node.attr("axis", -1) % len(shape)
        outer, length = math.prod(shape[:axis]), shape[axis]
        inner = math.prod(shape[axis + 1 :])
    global_size, local_size = grid(inner, outer)
    args = (TensorArg(node.inputs[0]), TensorArg(node.outputs[0]), i32(length), i32(inner))
    return ctx.layer(node, [Launch("softmax", global_size, local_size, args)])


def lower_lrn(ctx: Context, node: Node) -> Layer:
    shape = ctx.shapes[node.inputs[0]]
    inner = math.prod(shape[2:])
    global_size, local_size = grid(inner, shape[1], shape[0])
    args: tuple[Arg, ...] = (
        TensorArg(node.inputs[0]),
        TensorArg(node.outputs[0]),
        i32(shape[1]),
        i32(inner),
        i32(int(node.attr("size"))),
        f32(node.attr("alpha", 1e-4)),
        f32(node.attr("beta", 0.75)),
        f32(node.attr("bias", 1.0)),
    )
    return ctx.layer(node, [Launch("lrn", global_size, local_size, args)])
