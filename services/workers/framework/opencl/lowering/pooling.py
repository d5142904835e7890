"""Pooling: max and average windows, global average and max."""

from __future__ import annotations

import math

from services.workers.framework.opencl.graph import Node
from services.workers.framework.opencl.lowering.base import (
    Arg,
    Context,
    Launch,
    Layer,
    TensorArg,
    grid,
    i32,
)
from services.workers.framework.opencl.shapes import window
from shared.errors import PredictorError

__all__ = ["lower_global_average", "lower_global_max", "lower_pool"]


def _check_single_output(node: Node) -> None:
    if len(node.outputs) > 1 and node.outputs[1]:
        raise PredictorError(f"MaxPool {node.name!r}: the Indices output is not supported")


def lower_pool(ctx: Context, node: Node) -> Layer:
    _check_single_output(node)
    xs = ctx.shape(node.inputs[0])
    if len(xs) not in (3, 4):
        raise PredictorError(f"{node.op_type} {node.name!r}: only 1-D and 2-D pooling")
    win = window(node, xs[2:], tuple(node.attr("kernel_shape")))
    h, w = (1, xs[2]) if len(xs) == 3 else (xs[2], xs[3])
    (oh, ow) = win.output
    global_size, local_size = grid(oh * ow, xs[1], xs[0])
    common: tuple[Arg, ...] = (
        TensorArg(node.inputs[0]),
        TensorArg(node.outputs[0]),
        *map(i32, (xs[1], h, w, oh, ow, *win.kernel, *win.strides, *win.pads_begin)),
    )
    if node.op_type == "MaxPool":
        launch = Launch("max_pool", global_size, local_size, (*common, *map(i32, win.dilations)))
    else:
        if any(d != 1 for d in win.dilations):
            raise PredictorError(f"AveragePool {node.name!r}: dilations are not supported")
        extra = (*win.pads_end, int(node.attr("count_include_pad", 0)))
        launch = Launch("avg_pool", global_size, local_size, (*common, *map(i32, extra)))
    return ctx.layer(node, [launch])


def lower_global_average(ctx: Context, node: Node) -> Layer:
    xs = ctx.shape(node.inputs[0])
    planes = xs[0] * xs[1]
    global_size, local_size = grid(planes)
    args: tuple[Arg, ...] = (
        TensorArg(node.inputs[0]),
        TensorArg(node.outputs[0]),
        i32(planes),
        i32(math.prod(xs[2:])),
    )
    return ctx.layer(node, [Launch("global_avg_pool", global_size, local_size, args)])


def lower_global_max(ctx: Context, node: Node) -> Layer:
    """A max pool whose window is the whole plane."""
    xs = ctx.shape(node.inputs[0])
    h, w = (1, xs[2]) if len(xs) == 3 else (xs[2], xs[3])
    global_size, local_size = grid(1, xs[1], xs[0])
    args: tuple[Arg, ...] = (
        TensorArg(node.inputs[0]),
        TensorArg(node.outputs[0]),
        *map(i32, (xs[1], h, w, 1, 1, h, w, 1, 1, 0, 0, 1, 1)),
    )
    return ctx.layer(node, [Launch("max_pool", global_size, local_size, args)])
