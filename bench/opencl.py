"""The OpenCL engine against ONNX Runtime: ResNet-50 at batch 1 and 8, on the same CPU.

Both run the zoo's ResNet-50 graph (the onnx wheel's, placeholder weights: speed does not
depend on the values) with the batch dimension made dynamic, on the same random input.
Queries alternate between the two, so a busy neighbour on a shared machine slows both
alike; the ratio of medians is the figure (target: OpenCL <= 3x ONNX Runtime at batch 8).
OpenCL runs on the CPU device (PoCL here) with dlscope's kernels built from source; ONNX
Runtime on its CPU execution provider with its default threads (one per core).

The per-operator split of the last OpenCL query (from its profiling events) says where the
time goes; the load average before and after says how busy the machine was.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from bench.common import percentiles
from services.workers.framework.opencl.devices import open_device
from services.workers.framework.opencl.engine import Engine
from shared.artifacts import locate

__all__ = ["run"]

RESNET50 = "pkg://onnx/backend/test/data/light/light_resnet50.onnx"
WARMUP = 2
QUERIES = {1: 20, 8: 8}


def batch_dynamic(source: Path, target: Path) -> None:
    """The graph with its batch dimension left to run time: the inputs' and outputs' first
    dimension named, and Reshape targets copying the batch (0) instead of fixing it to 1."""
    model = onnx.load(str(source))
    initializers = {t.name: t for t in model.graph.initializer}
    for value in (*model.graph.input, *model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if value.name not in initializers and dims:
            dims[0].dim_param = "batch"
    for node in model.graph.node:
        if node.op_type == "Reshape" and node.input[1] in initializers:
            shape = numpy_helper.to_array(initializers[node.input[1]]).copy()
            shape[0] = 0
            initializers[node.input[1]].CopyFrom(numpy_helper.from_array(shape, node.input[1]))
    onnx.save(model, str(target))


def _by_operator(engine: Engine) -> dict[str, float]:
    totals: defaultdict[str, float] = defaultdict(float)
    for layer in engine.layer_timings():
        totals[layer.op_type] += layer.duration_ns / 1e6
    return {op: round(ms, 2) for op, ms in sorted(totals.items(), key=lambda kv: -kv[1])}


def _measure(path: Path, queries_by_batch: dict[int, int], warmup: int) -> dict[str, Any]:
    device = open_device("cpu")
    engine = Engine.load(path, device)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    results: dict[str, Any] = {
        "device": device.info.as_dict(),
        "onnxruntime": ort.__version__,
        "load_average_before": os.getloadavg(),
    }
    for batch, queries in queries_by_batch.items():
        x = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224), np.float32)
        started = time.perf_counter()
        ours = engine.run({name: x})[0]  # the first run makes and binds the plan
        plan_s = time.perf_counter() - started
        theirs = session.run(None, {name: x})[0]
        error = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
        for _ in range(warmup):
            engine.run({name: x})
            session.run(None, {name: x})
        opencl_ms, ort_ms = [], []
        for _ in range(queries):
            started = time.perf_counter()
            engine.run({name: x})
            opencl_ms.append((time.perf_counter() - started) * 1e3)
            started = time.perf_counter()
            session.run(None, {name: x})
            ort_ms.append((time.perf_counter() - started) * 1e3)
        ours_stats, theirs_stats = percentiles(opencl_ms), percentiles(ort_ms)
        results[f"batch_{batch}"] = {
            "opencl": ours_stats,
            "onnxruntime": theirs_stats,
            "ratio_p50": round(ours_stats["p50_ms"] / theirs_stats["p50_ms"], 2),
            "opencl_images_per_s": round(batch * 1e3 / ours_stats["p50_ms"], 1),
            "onnxruntime_images_per_s": round(batch * 1e3 / theirs_stats["p50_ms"], 1),
            "first_run_with_planning_s": round(plan_s, 2),
            "relative_error": error,
            "opencl_ms_by_operator": _by_operator(engine),
        }
    engine.close()
    results["load_average_after"] = os.getloadavg()
    results["target"] = "batch_8 ratio_p50 <= 3"
    return results


async def run(queries: dict[int, int] | None = None, *, warmup: int = WARMUP) -> dict[str, Any]:
    """``queries``: how many timed queries at each batch size (``QUERIES``), each size after
    ``warmup`` untimed ones."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "resnet50-dynamic.onnx"
        batch_dynamic(locate(RESNET50), path)
        return await asyncio.to_thread(_measure, path, queries or QUERIES, warmup)
