"""From a folded, fused graph to kernel launches, one module per family of operators."""

from __future__ import annotations

from services.workers.framework.opencl.graph import Graph
from services.workers.framework.opencl.lowering.base import (
    Alias,
    Arg,
    ConstantPool,
    Context,
    Launch,
    Layer,
    LocalBytes,
    Lowering,
    TensorArg,
)
from services.workers.framework.opencl.lowering.conv import lower_conv
from services.workers.framework.opencl.lowering.dense import lower_dense, lower_gemm, lower_matmul
from services.workers.framework.opencl.lowering.elementwise import (
    lower_activation,
    lower_affine,
    lower_binary,
    lower_sum,
)
from services.workers.framework.opencl.lowering.layout import (
    lower_alias,
    lower_concat,
    lower_transpose,
)
from services.workers.framework.opencl.lowering.normalization import lower_lrn, lower_softmax
from services.workers.framework.opencl.lowering.pooling import (
    lower_global_average,
    lower_global_max,
    lower_pool,
)
from services.workers.framework.opencl.shapes import Shape
from services.workers.framework.opencl.tiling import Tiling
from shared.errors import PredictorError

__all__ = [
    "KERNEL_OPS",
    "Alias",
    "Arg",
    "ConstantPool",
    "Launch",
    "Layer",
    "LocalBytes",
    "TensorArg",
    "lower",
]

_LOWERINGS: dict[str, Lowering] = {
    "Conv": lower_conv,
    "Dense": lower_dense,
    "Gemm": lower_gemm,
    "MatMul": lower_matmul,
    "Relu": lower_activation,
    "Clip": lower_activation,
    "LeakyRelu": lower_activation,
    "Sigmoid": lower_activation,
    "Add": lower_binary,
    "Sub": lower_binary,
    "Mul": lower_binary,
    "Div": lower_binary,
    "Sum": lower_sum,
    "ChannelAffine": lower_affine,
    "MaxPool": lower_pool,
    "AveragePool": lower_pool,
    "GlobalAveragePool": lower_global_average,
    "GlobalMaxPool": lower_global_max,
    "Softmax": lower_softmax,
    "LRN": lower_lrn,
    "Concat": lower_concat,
    "Transpose": lower_transpose,
    **dict.fromkeys(
        ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"), lower_alias
    ),
}

# The ONNX operators the engine has kernels (or aliases) for. BatchNormalization runs as the
# engine's own ChannelAffine when no Conv absorbs it (fusion.py).
KERNEL_OPS = frozenset(
    {op for op in _LOWERINGS if op not in ("Dense", "ChannelAffine")} | {"BatchNormalization"}
)


def lower(
    graph: Graph,
    shapes: dict[str, Shape],
    pool: ConstantPool,
    *,
    compute_units: int,
    local_memory_bytes: int,
    tiling: Tiling,
) -> list[Layer | Alias]:
    """Each node's launches (or alias), sized for a device with these resources and a
    program built with this tiling."""
    ctx = Context(
        shapes=shapes,
        constants=graph.constants,
        pool=pool,
        opset=graph.opset,
        compute_units=compute_units,
        local_memory_bytes=local_memory_bytes,
        tiling=tiling,
    )
    lowered: list[Layer | Alias] = []
    for node in graph.nodes:
        lowering = _LOWERINGS.get(node.op_type)
        if lowering is None:
            raise PredictorError(f"{node.op_type} {node.name!r}: no kernel for this operator")
        lowered.append(lowering(ctx, node))
    return lowered
