"""The engine: an ONNX graph made ready once, then a plan per input shape, run on a device.

Loading checks that every operator is supported, folds constants and folds batch norms into
convolutions. The first run with a given set of input shapes (a batch size, say) folds what
those shapes make constant, fuses, lowers to kernel launches, plans the buffers and binds
them: that plan is kept, so a batch sweep pays for each size once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from services.workers.framework.opencl.devices import OpenCLDevice
from services.workers.framework.opencl.executor import BoundPlan, Executor
from services.workers.framework.opencl.folding import FOLDED_OPS, fold_batch_norm, fold_constants
from services.workers.framework.opencl.fusion import fuse
from services.workers.framework.opencl.graph import Graph, check_supported, load_graph
from services.workers.framework.opencl.lowering import KERNEL_OPS, ConstantPool, lower
from services.workers.framework.opencl.planner import plan_memory
from services.workers.framework.opencl.shapes import Shape
from shared.errors import PredictorError
from shared.messages import LayerTiming

__all__ = ["SUPPORTED_OPS", "Engine", "prepare"]

SUPPORTED_OPS = KERNEL_OPS | FOLDED_OPS

_FLOAT32 = np.dtype(np.float32)


def prepare(graph: Graph) -> Graph:
    """What does not depend on input shapes: the support check, constants, batch norms."""
    check_supported(graph, SUPPORTED_OPS)
    for spec in graph.inputs:
        if spec.dtype != _FLOAT32:
            raise PredictorError(
                f"graph input {spec.name!r} is {spec.dtype}; the OpenCL engine runs float32 graphs"
            )
    folded, _ = fold_constants(graph)
    return fold_batch_norm(folded)


class Engine:
    def __init__(self, graph: Graph, device: OpenCLDevice) -> None:
        self.graph = prepare(graph)
        self.device = device
        self._pool = ConstantPool()
        self._executor = Executor(device, self._pool)
        self._plans: dict[tuple[Shape, ...], BoundPlan] = {}

    @classmethod
    def load(cls, path: Path, device: OpenCLDevice) -> Engine:
        return cls(load_graph(path), device)

    @property
    def input_names(self) -> list[str]:
        return [spec.name for spec in self.graph.inputs]

    def plan(self, shapes: tuple[Shape, ...]) -> BoundPlan:
        """The bound plan for these input shapes (in graph input order), made on first use."""
        plan = self._plans.get(shapes)
        if plan is None:
            plan = self._make_plan(shapes)
            self._plans[shapes] = plan
        return plan

    def _make_plan(self, shapes: tuple[Shape, ...]) -> BoundPlan:
        given = dict(zip(self.input_names, shapes, strict=True))
        for spec, shape in zip(self.graph.inputs, shapes, strict=True):
            if len(shape) != len(spec.dims) or any(
                d is not None and d != s for d, s in zip(spec.dims, shape, strict=True)
            ):
                declared = tuple("?" if d is None else d for d in spec.dims)
                raise PredictorError(
                    f"input {spec.name!r} has shape {shape}; the graph takes {declared}"
                )
        graph, all_shapes = fold_constants(self.graph, given)
        graph = fuse(graph, all_shapes)
        info = self.device.info
        steps = lower(
            graph,
            all_shapes,
            self._pool,
            compute_units=info.compute_units,
            local_memory_bytes=info.local_memory_bytes,
            tiling=self.device.tiling,
        )
        sizes = {name: 4 * math.prod(shape) for name, shape in all_shapes.items()}
        memory = plan_memory(
            steps,
            self.input_names,
            [o for o in graph.outputs if o not in graph.constants],
            sizes,
            self.device.alignment,
        )
        held = sum(plan.arena_bytes for plan in self._plans.values())
        if held + memory.arena_bytes + self._executor.constant_bytes > info.global_memory_bytes:
            # The plans of other shapes hold device memory this one needs: let them go (a
            # shape that comes back is planned again).
            self._plans.clear()
        outputs = [
            (name, all_shapes[name] if name in all_shapes else graph.constants[name].shape)
            for name in graph.outputs
        ]
        return self._executor.bind(
            steps,
            memory,
            list(given.items()),
            outputs,
            {o: graph.constants[o] for o in graph.outputs if o in graph.constants},
            f"graph {self.graph.name!r} with inputs {shapes}",
        )

    def run(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        unknown = set(inputs) - set(self.input_names)
        missing = [name for name in self.input_names if name not in inputs]
        if unknown or missing:
            raise PredictorError(
                f"the graph takes inputs {self.input_names}; missing {missing}, "
                f"unknown {sorted(unknown)}"
            )
        arrays = []
        for name in self.input_names:
            array = inputs[name]
            if array.dtype != _FLOAT32:
                raise PredictorError(f"input {name!r} is {array.dtype}; the graph takes float32")
            arrays.append(np.ascontiguousarray(array))
        plan = self.plan(tuple(tuple(int(d) for d in a.shape) for a in arrays))
        return self._executor.run(plan, arrays)

    def layer_timings(self) -> list[LayerTiming]:
        return self._executor.layer_timings()

    def kernel_timings(self) -> list[LayerTiming]:
        return self._executor.kernel_timings()

    def close(self) -> None:
        self._plans.clear()
        self._executor.close()
