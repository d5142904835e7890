"""What lowering produces: per node, the kernel launches that compute it, or an alias.

A ``Layer`` is one node of the (folded, fused) graph with its launches, the run-time
tensors it reads and writes (for the memory planner) and its scratch space. A ``TensorArg``
names a tensor; the executor binds it to a constant buffer or to the tensor's place in the
plan's arena.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from services.workers.framework.opencl.graph import Activation, Node
from services.workers.framework.opencl.shapes import Shape
from services.workers.framework.opencl.tiling import Tiling
from shared.errors import PredictorError

__all__ = [
    "GROUP",
    "Alias",
    "Arg",
    "ConstantPool",
    "Context",
    "Launch",
    "Layer",
    "LocalBytes",
    "Lowering",
    "TensorArg",
    "activation_args",
    "f32",
    "grid",
    "i32",
    "right_aligned",
]

# Work-group size of the one-item-per-element kernels: PoCL vectorises across the items of a
# group, and compiles each kernel once per distinct group size, so there is just one.
GROUP = 64

_ACTIVATION_CODES = {"relu": 1, "clip": 2, "leaky_relu": 3, "sigmoid": 4}


@dataclass(frozen=True)
class TensorArg:
    name: str


@dataclass(frozen=True)
class LocalBytes:
    """A ``__local`` buffer argument of this many bytes per work-group."""

    nbytes: int


Arg = TensorArg | LocalBytes | np.int32 | np.float32 | None


def i32(value: int) -> np.int32:
    if not -(2**31) <= value < 2**31:
        raise PredictorError(f"{value} does not fit the kernels' 32-bit indices")
    return np.int32(value)


def f32(value: float) -> np.float32:
    return np.float32(value)


def activation_args(activation: Activation | None) -> tuple[np.int32, np.float32, np.float32]:
    """The (act, a, b) kernel arguments of an activation epilogue (see kernels/common.cl)."""
    if activation is None:
        return np.int32(0), np.float32(0), np.float32(0)
    return np.int32(_ACTIVATION_CODES[activation.kind]), f32(activation.a), f32(activation.b)


def grid(items: int, *rest: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Global and local sizes for one work-item per element along the first dimension."""
    groups = math.ceil(items / GROUP)
    return (groups * GROUP, *rest), (GROUP, *[1] * len(rest))


def right_aligned(values: Sequence[int], fill: int, rank: int = 6) -> list[int]:
    if len(values) > rank:
        raise PredictorError(f"tensors of rank {len(values)} exceed the kernels' {rank}")
    return [fill] * (rank - len(values)) + list(values)


@dataclass(frozen=True)
class Launch:
    kernel: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]
    args: tuple[Arg, ...]


@dataclass(frozen=True)
class Layer:
    node: str
    op_type: str  # the ONNX operator, also for the engine's own (Dense is a Gemm or MatMul)
    fused: tuple[str, ...]
    reads: tuple[str, ...]  # run-time tensors
    writes: tuple[str, ...]
    input_shapes: tuple[Shape, ...]
    output_shapes: tuple[Shape, ...]
    launches: tuple[Launch, ...]
    scratch: tuple[tuple[str, int], ...] = ()  # (name, bytes): alive during this layer only


@dataclass(frozen=True)
class Alias:
    """``output`` is ``source`` under another shape (Reshape, Flatten, Dropout...): same bytes."""

    output: str
    source: str


class ConstantPool:
    """Device constants as the kernels want them (packed weights, say), made once per model
    and shared by the plans of every input shape."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self._sources: dict[str, int] = {}

    def add(
        self,
        key: str,
        source: np.ndarray,
        transform: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> TensorArg:
        """The constant ``transform(source)`` under ``key``; made only the first time ``key``
        is asked for with this very array (a different array gets a key of its own)."""
        name, suffix = key, 1
        while name in self.arrays and self._sources[name] != id(source):
            suffix += 1
            name = f"{key}#{suffix}"
        if name not in self.arrays:
            made = transform(source) if transform is not None else source
            self.arrays[name] = np.ascontiguousarray(made, dtype=made.dtype)
            self._sources[name] = id(source)
        return TensorArg(name)


@dataclass
class Context:
    """What lowering one node may consult: shapes, the graph's constants, the pool, and the
    device's resources and the tiling its program was built with."""

    shapes: dict[str, Shape]
    constants: dict[str, np.ndarray]
    pool: ConstantPool
    opset: int
    compute_units: int
    local_memory_bytes: int
    tiling: Tiling

    def shape(self, name: str) -> Shape:
        if name in self.shapes:
            return self.shapes[name]
        return tuple(self.constants[name].shape)

    def tensor(self, name: str) -> TensorArg:
        """A node input as a kernel argument: constants go to the pool as float32."""
        if name in self.constants:
            value = self.constants[name]
            return self.pool.add(name, value, lambda v: v.astype(np.float32))
        return TensorArg(name)

    def layer(
        self,
        node: Node,
        launches: Sequence[Launch],
        scratch: Sequence[tuple[str, int]] = (),
    ) -> Layer:
        present = [n for n in node.inputs if n]
        return Layer(
            node=node.name,
            op_type=str(node.attr("onnx_op", node.op_type)),
            fused=node.fused,
            reads=tuple(n for n in present if n not in self.constants),
            writes=tuple(n for n in node.outputs if n),
            input_shapes=tuple(self.shape(n) for n in present),
            output_shapes=tuple(self.shapes[n] for n in node.outputs if n),
            launches=tuple(launches),
            scratch=tuple(scratch),
        )


Lowering = Callable[[Context, Node], Layer | Alias]
