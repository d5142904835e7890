"""Conv: register-tiled GEMM kernels over a panel of the input in local memory, or over its
im2col copy where local memory is small; a direct kernel where the tile does not fit (see
kernels/conv.cl)."""

from __future__ import annotations

import math

import numpy as np

from services.workers.framework.opencl.graph import Node
from services.workers.framework.opencl.lowering.base import (
    Arg,
    Context,
    Launch,
    Layer,
    LocalBytes,
    TensorArg,
    activation_args,
    grid,
    i32,
)
from services.workers.framework.opencl.shapes import window
from shared.errors import PredictorError

__all__ = ["lower_conv", "pack_weights"]

# The register tile, output channels x output pixels (kernels/conv.cl TM, TP), is the
# device's: ctx.tiling, what its program was built with (tiling.py).
# Work-items per compute unit worth having: enough for the last ones not to leave the
# others idle for long, few enough that each fills its panel once for many channels.
_ITEMS_PER_UNIT = 16
# Adjacent tiles per work-item, and the most local memory their panels may take (well
# inside a CPU core's L2 cache, beside the weights and outputs): longer contiguous reads of
# each input row, which the prefetchers follow, and each block of weights used again.
_TILES_PER_ITEM = 16
_PANEL_BYTES = 128 * 1024


def pack_weights(weight: np.ndarray, groups: int, channels: int) -> np.ndarray:
    """[M*G, C, KH, KW] as [G][ceil(M/TM)][C*KH*KW][TM] (TM: ``channels``), zero rows past
    M: the TM weights one k of a tile needs lie side by side."""
    m = weight.shape[0] // groups
    k = math.prod(weight.shape[1:])
    blocks = math.ceil(m / channels)
    padded = np.zeros((groups, blocks * channels, k), dtype=np.float32)
    padded[:, :m] = weight.reshape(groups, m, k)
    tiles = padded.reshape(groups, blocks, channels, k).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(tiles)


def lower_conv(ctx: Context, node: Node) -> Layer:
    x, w = node.inputs[0], node.inputs[1]
    if w not in ctx.constants:
        raise PredictorError(f"Conv {node.name!r}: the engine needs constant weights")
    xs, ws = ctx.shape(x), ctx.shape(w)
    groups = int(node.attr("group", 1))
    if len(xs) not in (3, 4) or xs[1] != ws[1] * groups or ws[0] % groups:
        raise PredictorError(f"Conv {node.name!r}: input {xs} and weights {ws} do not match")
    win = window(node, xs[2:], ws[2:])
    n, c, m = xs[0], ws[1], ws[0] // groups  # c and m per group
    h, wd = (1, xs[2]) if len(xs) == 3 else (xs[2], xs[3])
    (oh, ow), (kh, kw) = win.output, win.kernel
    pixels, depth = oh * ow, c * kh * kw
    geometry = (*win.kernel, *win.strides, *win.pads_begin, *win.dilations)
    tm, tp = ctx.tiling.channels, ctx.tiling.pixels

    weights = ctx.pool.add(
        f"{w}:tiled{groups}x{tm}", ctx.constants[w], lambda a: pack_weights(a, groups, tm)
    )
    has_bias = len(node.inputs) > 2 and node.inputs[2]
    bias_source = ctx.constants[node.inputs[2]] if has_bias else np.zeros(ws[0], np.float32)
    bias = ctx.pool.add(node.inputs[2] if has_bias else f"{node.name}:bias", bias_source)
    residual = TensorArg(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else None
    ends: tuple[Arg, ...] = (bias, residual, TensorArg(node.outputs[0]))
    act = activation_args(node.activation)

    if pixels < tp or m < tm // 2:
        # Depthwise and narrow groups, tiny outputs: a tile would mostly compute padding.
        global_size, local_size = grid(pixels, groups * m, n)
        shape_args = map(i32, (c, h, wd, m, oh, ow, *geometry, groups))
        args = (TensorArg(x), weights, *ends, *shape_args, *act)
        return ctx.layer(node, [Launch("conv_direct", global_size, local_size, args)])

    panel = 4 * depth * tp
    if panel <= ctx.local_memory_bytes:
        tiles = oh * math.ceil(ow / tp) if ow >= tp else math.ceil(pixels / tp)
        per_item = max(
            1, min(_TILES_PER_ITEM, tiles, min(ctx.local_memory_bytes, _PANEL_BYTES) // panel)
        )
        items = math.ceil(tiles / per_item) * groups * n
        blocks = math.ceil(m / tm)
        chunks = min(blocks, max(1, math.ceil(_ITEMS_PER_UNIT * ctx.compute_units / items)))
        shape_args = map(i32, (c, h, wd, m, oh, ow, *geometry, groups, per_item, chunks))
        args = (TensorArg(x), weights, *ends, LocalBytes(per_item * panel), *shape_args, *act)
        sizes = (math.ceil(tiles / per_item), groups * chunks, n)
        return ctx.layer(node, [Launch("conv_tile", sizes, (1, 1, 1), args)])

    launches = []
    scratch = []
    pointwise = (
        (kh, kw) == (1, 1) and win.strides == (1, 1) and not any((*win.pads_begin, *win.pads_end))
    )
    columns = TensorArg(x)
    if not pointwise:
        columns = TensorArg(f"{node.name}:im2col")
        scratch.append((columns.name, 4 * n * groups * depth * pixels))
        im2col_args: tuple[Arg, ...] = (
            TensorArg(x),
            columns,
            *map(i32, (groups * c, h, wd, *geometry, oh, ow)),
        )
        launches.append(Launch("im2col", (oh, groups * depth, n), (1, 1, 1), im2col_args))
    sizes = (groups * math.ceil(m / tm), math.ceil(pixels / tp), n)
    args = (weights, columns, *ends, *map(i32, (m, depth, pixels, groups)), *act)
    launches.append(Launch("conv_gemm", sizes, (1, 1, 1), args))
    return ctx.layer(node, launches, scratch)
