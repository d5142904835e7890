"""Running a plan on the device: buffers bound once per plan, kernels enqueued in order.

Binding does everything that does not change between runs: the arena is allocated, each
tensor gets a sub-buffer at its planned offset, constants are uploaded (once per model), and
every launch gets its own kernel object with its arguments set. A run then only copies the
inputs in, enqueues the kernels, and copies the outputs out. Every kernel is enqueued with a
profiling event; the events of the last run are kept and read only when asked for: per layer
(a node's kernels, queued and submitted as the first was, started as the first did, ended as
the last did; ``fused`` names the ONNX nodes computed by the same kernels), or per kernel.
Their times are on the device's clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl

from services.workers.framework.opencl.devices import OpenCLDevice
from services.workers.framework.opencl.lowering import (
    Alias,
    ConstantPool,
    Launch,
    Layer,
    LocalBytes,
    TensorArg,
)
from services.workers.framework.opencl.planner import MemoryPlan
from services.workers.framework.opencl.shapes import Shape
from shared.errors import PredictorError
from shared.messages import LayerTiming

__all__ = ["BoundPlan", "Executor"]


@dataclass(frozen=True)
class _BoundLaunch:
    kernel: cl.Kernel
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]


@dataclass(frozen=True)
class BoundPlan:
    """One input shape's plan, bound to device memory: ready to run any number of times."""

    inputs: tuple[tuple[str, Shape], ...]
    outputs: tuple[tuple[str, Shape], ...]
    constant_outputs: dict[str, np.ndarray]  # outputs folded to constants
    layers: tuple[tuple[Layer, tuple[_BoundLaunch, ...]], ...]
    buffers: dict[str, cl.Buffer]
    arena: cl.Buffer | None
    arena_bytes: int


class Executor:
    def __init__(self, device: OpenCLDevice, pool: ConstantPool) -> None:
        self._device = device
        self._pool = pool
        self._constants: dict[str, cl.Buffer] = {}
        self._last: tuple[BoundPlan, list[list[cl.Event]]] | None = None

    @property
    def constant_bytes(self) -> int:
        """Device memory the uploaded constants hold."""
        return sum(buffer.size for buffer in self._constants.values())

    def bind(
        self,
        steps: Sequence[Layer | Alias],
        memory: MemoryPlan,
        inputs: Sequence[tuple[str, Shape]],
        outputs: Sequence[tuple[str, Shape]],
        constant_outputs: dict[str, np.ndarray],
        what: str,
    ) -> BoundPlan:
        layers = [step for step in steps if isinstance(step, Layer)]
        needed = {
            arg.name
            for layer in layers
            for launch in layer.launches
            for arg in launch.args
            if isinstance(arg, TensorArg) and arg.name in self._pool.arrays
        }
        new_constants = sum(self._pool.arrays[n].nbytes for n in needed if n not in self._constants)
        self._device.check_fits(memory.arena_bytes, self.constant_bytes + new_constants, what)
        for name in sorted(needed - set(self._constants)):
            self._constants[name] = self._upload(self._pool.arrays[name])

        arena = None
        buffers: dict[str, cl.Buffer] = {}
        if memory.arena_bytes:
            arena = self._allocate(memory.arena_bytes)
            for name, offset in memory.offsets.items():
                buffers[name] = arena.get_sub_region(offset, max(memory.sizes[name], 4))
        bound = tuple(
            (layer, tuple(self._bind_launch(launch, buffers) for launch in layer.launches))
            for layer in layers
        )
        return BoundPlan(
            inputs=tuple(inputs),
            outputs=tuple(outputs),
            constant_outputs=constant_outputs,
            layers=bound,
            buffers=buffers,
            arena=arena,
            arena_bytes=memory.arena_bytes,
        )

    def _allocate(self, nbytes: int) -> cl.Buffer:
        try:
            return cl.Buffer(self._device.context, cl.mem_flags.READ_WRITE, nbytes)
        except cl.Error as exc:
            raise PredictorError(
                f"cannot allocate {nbytes / 1024**2:.1f} MiB on {self._device.info.name}: {exc}"
            ) from exc

    def _upload(self, array: np.ndarray) -> cl.Buffer:
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        try:
            return cl.Buffer(self._device.context, flags, hostbuf=array)
        except cl.Error as exc:
            raise PredictorError(
                f"cannot upload {array.nbytes / 1024**2:.1f} MiB of weights to "
                f"{self._device.info.name}: {exc}"
            ) from exc

    def _bind_launch(self, launch: Launch, buffers: dict[str, cl.Buffer]) -> _BoundLaunch:
        kernel = cl.Kernel(self._device.program, launch.kernel)
        values: list[Any] = []
        for arg in launch.args:
            if isinstance(arg, TensorArg):
                known = arg.name in self._constants
                values.append(self._constants[arg.name] if known else buffers[arg.name])
            elif isinstance(arg, LocalBytes):
                values.append(cl.LocalMemory(arg.nbytes))
            else:
                values.append(arg)
        kernel.set_args(*values)
        return _BoundLaunch(kernel, launch.global_size, launch.local_size)

    def run(self, plan: BoundPlan, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        queue = self._device.queue
        for (name, _), array in zip(plan.inputs, arrays, strict=True):
            cl.enqueue_copy(queue, plan.buffers[name], array, is_blocking=False)
        events = [
            [
                cl.enqueue_nd_range_kernel(queue, b.kernel, b.global_size, b.local_size)
                for b in launches
            ]
            for _, launches in plan.layers
        ]
        results = []
        for name, shape in plan.outputs:
            if name in plan.constant_outputs:
                results.append(plan.constant_outputs[name].copy())
                continue
            result = np.empty(shape, dtype=np.float32)
            if math.prod(shape):
                cl.enqueue_copy(queue, result, plan.buffers[name], is_blocking=False)
            results.append(result)
        queue.finish()
        self._last = (plan, events)
        return results

    def layer_timings(self) -> list[LayerTiming]:
        """Per layer of the last run, in the order they ran (empty before any run)."""
        if self._last is None:
            return []
        plan, events = self._last
        timings = []
        for (layer, _), layer_events in zip(plan.layers, events, strict=True):
            if not layer_events:
                continue
            first, last = layer_events[0].profile, layer_events[-1].profile
            timings.append(
                LayerTiming(
                    node=layer.node,
                    op_type=layer.op_type,
                    fused=layer.fused,
                    input_shapes=layer.input_shapes,
                    output_shapes=layer.output_shapes,
                    kernels=len(layer_events),
                    queued_ns=int(first.queued),
                    submit_ns=int(first.submit),
                    start_ns=int(first.start),
                    end_ns=int(last.end),
                )
            )
        return timings

    def kernel_timings(self) -> list[LayerTiming]:
        """Per kernel launch of the last run, in the order they ran, each named by its
        layer's node and its kernel function (empty before any run)."""
        if self._last is None:
            return []
        plan, events = self._last
        return [
            LayerTiming(
                node=layer.node,
                op_type=launch.kernel.function_name,
                fused=layer.fused,
                output_shapes=layer.output_shapes,
                queued_ns=int(event.profile.queued),
                submit_ns=int(event.profile.submit),
                start_ns=int(event.profile.start),
                end_ns=int(event.profile.end),
                implementation=f"global {launch.global_size} local {launch.local_size}",
            )
            for (layer, launches), layer_events in zip(plan.layers, events, strict=True)
            for launch, event in zip(launches, layer_events, strict=True)
        ]

    def close(self) -> None:
        self._last = None
        for buffer in self._constants.values():
            buffer.release()
        self._constants.clear()
