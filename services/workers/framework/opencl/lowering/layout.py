"""Operators that only move data (Concat, Transpose) or not even that (the aliases)."""

from __future__ import annotations

import math

import numpy as np

from services.workers.framework.opencl.graph import Node
from services.workers.framework.opencl.lowering.base import (
    Alias,
    Arg,
    Context,
    Launch,
    Layer,
    TensorArg,
    grid,
    i32,
    right_aligned,
)

__all__ = ["lower_alias", "lower_concat", "lower_transpose"]


def lower_alias(ctx: Context, node: Node) -> Alias:
    """Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout (inference): same bytes."""
    return Alias(node.outputs[0], node.inputs[0])


def lower_concat(ctx: Context, node: Node) -> Layer:
    out_shape = ctx.shapes[node.outputs[0]]
    axis = node.attr("axis") % len(out_shape)
    rows = math.prod(out_shape[:axis])
    out_len = math.prod(out_shape[axis:])
    launches, offset = [], 0
    for name in node.inputs:
        length = math.prod(ctx.shape(name)[axis:])
        if length == 0:
            continue
        global_size, local_size = grid(length, rows)
        args: tuple[Arg, ...] = (
            ctx.tensor(name),
            TensorArg(node.outputs[0]),
            *map(i32, (length, out_len, offset)),
        )
        launches.append(Launch("copy_into", global_size, local_size, args))
        offset += length
    return ctx.layer(node, launches)


def lower_transpose(ctx: Context, node: Node) -> Layer:
    shape = ctx.shape(node.inputs[0])
    perm = node.attr("perm") or list(reversed(range(len(shape))))
    strides = [math.prod(shape[axis + 1 :]) for axis in range(len(shape))]
    out_shape = [shape[p] for p in perm]
    table = np.asarray(
        right_aligned(out_shape, 1) + right_aligned([strides[p] for p in perm], 0), np.int32
    )
    count = math.prod(shape)
    global_size, local_size = grid(count)
    args: tuple[Arg, ...] = (
        TensorArg(node.inputs[0]),
        TensorArg(node.outputs[0]),
        ctx.pool.add(f"{node.name}/layout{tuple(shape)}", table),
        i32(count),
    )
    return ctx.layer(node, [Launch("transpose", global_size, local_size, args)])
