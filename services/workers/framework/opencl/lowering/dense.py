"""Matrix products: Dense (Gemm and MatMul by a constant, folded by fusion.py) and the
general Gemm and MatMul of run-time tensors."""

from __future__ import annotations

import math

import numpy as np

from services.workers.framework.opencl.graph import Node
from services.workers.framework.opencl.lowering.base import (
    Arg,
    Context,
    Launch,
    Layer,
    TensorArg,
    activation_args,
    f32,
    grid,
    i32,
)
from services.workers.framework.opencl.lowering.elementwise import binary_launch
from services.workers.framework.opencl.shapes import broadcast
from shared.errors import PredictorError

__all__ = ["lower_dense", "lower_gemm", "lower_matmul"]

# The dense kernel's tile: outputs x rows (kernels/dense.cl).
_TILE = 4


def lower_dense(ctx: Context, node: Node) -> Layer:
    x, w = node.inputs[0], node.inputs[1]
    rows = math.prod(ctx.shape(x)[:-1])
    outputs, depth = ctx.shape(w)
    bias = ctx.tensor(node.inputs[2]) if len(node.inputs) > 2 else None
    launch = Launch(
        "dense",
        (math.ceil(outputs / _TILE), math.ceil(rows / _TILE)),
        (1, 1),
        (
            TensorArg(x),
            ctx.tensor(w),
            bias,
            TensorArg(node.outputs[0]),
            *map(i32, (rows, outputs, depth)),
            *activation_args(node.activation),
        ),
    )
    return ctx.layer(node, [launch])


def _matmul_launch(
    ctx: Context,
    node: Node,
    batches: np.ndarray,
    sizes: tuple[int, int, int],
    strides: tuple[int, int, int, int],
    alpha: float,
) -> Launch:
    """The general product; ``batches``: [batch, 2] element offsets of a and b."""
    m, n, k = sizes
    table = ctx.pool.add(f"{node.name}/offsets{batches.shape}", batches.astype(np.int32))
    global_size, local_size = grid(n, m, len(batches))
    args: tuple[Arg, ...] = (
        ctx.tensor(node.inputs[0]),
        ctx.tensor(node.inputs[1]),
        table,
        TensorArg(node.outputs[0]),
        *map(i32, (m, n, k, *strides)),
        f32(alpha),
    )
    return Launch("matmul", global_size, local_size, args)


def lower_matmul(ctx: Context, node: Node) -> Layer:
    a, b = ctx.shape(node.inputs[0]), ctx.shape(node.inputs[1])
    a2 = a if len(a) > 1 else (1, *a)  # numpy: a vector is a row on the left...
    b2 = b if len(b) > 1 else (*b, 1)  # ...and a column on the right
    m, k, n = a2[-2], a2[-1], b2[-1]
    batch = broadcast(a2[:-2], b2[:-2])
    count = math.prod(batch)

    def offsets(shape: tuple[int, ...], size: int) -> np.ndarray:
        index = np.arange(math.prod(shape)).reshape(shape)
        return np.broadcast_to(index, batch).reshape(count) * size

    batches = np.stack([offsets(a2[:-2], m * k), offsets(b2[:-2], k * n)], axis=1)
    launch = _matmul_launch(ctx, node, batches, (m, n, k), (k, 1, n, 1), 1.0)
    return ctx.layer(node, [launch])


def lower_gemm(ctx: Context, node: Node) -> Layer:
    """Y = alpha * A' B' + beta * C of run-time A and B (constant B became Dense)."""
    a, b = ctx.shape(node.inputs[0]), ctx.shape(node.inputs[1])
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    m, k = (a[1], a[0]) if trans_a else a
    n = b[0] if trans_b else b[1]
    strides = (
        *((1, m) if trans_a else (k, 1)),  # a_row, a_col
        *((1, k) if trans_b else (n, 1)),  # b_row, b_col
    )
    launch = _matmul_launch(
        ctx, node, np.zeros((1, 2), np.int64), (m, n, k), strides, node.attr("alpha", 1.0)
    )
    launches = [launch]
    c = node.inputs[2] if len(node.inputs) > 2 else ""
    if c:
        beta = float(node.attr("beta", 1.0))
        if c in ctx.constants:
            scaled = ctx.pool.add(
                f"{c}:beta{beta}", ctx.constants[c], lambda v: (v * beta).astype(np.float32)
            )
        elif beta == 1.0:
            scaled = TensorArg(c)
        else:
            raise PredictorError(f"Gemm {node.name!r}: beta != 1 needs a constant C")
        out = (TensorArg(node.outputs[0]), (m, n))
        launches.append(
            binary_launch(ctx, node.name, (out[0], scaled), ((m, n), ctx.shape(c)), out, "Add")
        )
    return ctx.layer(node, launches)
