"""What tracing costs, per framework and level, and what it leaves of the headline.

For each framework (ONNX Runtime on SqueezeNet and ResNet-50, and the zoo's digits CNN on
ONNX Runtime, PyTorch, TensorFlow and the OpenCL engine), in this process, on the CPU:

- reported: one evaluation at trace level ``full`` (``measure``, as the framework process runs
  it): each level's overhead as dlscope reports it (traced query p50 / untraced p50, each pass
  against its own untraced reference on the same inputs);
- raw: the framework's profiler used directly on the open model, the bench's own figure:
  rounds of plain queries alternating with rounds under the profiler, ratio of medians;
- headline: evaluations at ``none`` and at ``full`` alternating, the headline (timed pass)
  p50 of each: the ratio says whether tracing reaches the numbers a user compares
  (target <= 1.02; leveling keeps the profilers out of the timed pass);
- spans: how fast the worker turns a profiled pass into spans and exports them over
  OTLP/HTTP to a stand-in collector (spans per second, export included).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import digits_manifests
from harness.opencl import opencl_problem
from services.workers.framework.frameworks import framework_for
from services.workers.framework.predictors import Profiles, Unavailable
from services.workers.framework.profiling import PROFILER_WARMUP
from services.workers.framework.sessions import session_for
from services.workers.framework.sessions.inputs import synthetic_inputs
from services.workers.handover import JobInputs, TracedPass, TracedQuery, Tracing
from services.workers.tracing import record_trace
from shared.artifacts import ArtifactCache
from shared.manifests import ModelManifest, load_manifest
from shared.measurement import summarize_result
from shared.messages import PROFILED_LEVELS, LayerTiming, RunEvaluation, Scenario, TraceLevel

__all__ = ["Scale", "run"]

MANIFESTS = Path(__file__).parent.parent / "manifests" / "models"
# Queries per traced pass (dlscope's default is 5: more here, for steadier medians).
TRACE_QUERIES = 20
# Raw profiler slowdown: rounds of this many queries, plain and profiled, alternating.
ROUNDS, PER_ROUND = 5, 10
# Headline: evaluations at "none" and "full", alternating, this many of each (ResNet-50: 3).
HEADLINE_PAIRS = 5
HEADLINE = Scenario(iterations=200, min_duration_s=1.0, warmup=16)
HEADLINE_LARGE = Scenario(iterations=30, min_duration_s=1.0, warmup=4)
SPAN_LAYERS = 5_000


@dataclass(frozen=True)
class Scale:
    """How much each subject runs: the defaults are the benchmark's; tests/bench runs it
    with a handful of queries of each."""

    trace_queries: int = TRACE_QUERIES
    rounds: int = ROUNDS
    per_round: int = PER_ROUND
    headline_pairs: int = HEADLINE_PAIRS
    headline: Scenario = HEADLINE
    headline_large: Scenario = HEADLINE_LARGE
    span_layers: int = SPAN_LAYERS


def _subjects(zoo: Path) -> list[tuple[str, str, ModelManifest]]:
    built = digits_manifests(zoo)
    resnet = load_manifest(MANIFESTS / "resnet50.yaml")
    squeezenet = load_manifest(MANIFESTS / "squeezenet.yaml")
    assert isinstance(resnet, ModelManifest)
    assert isinstance(squeezenet, ModelManifest)
    return [
        ("onnxruntime", "squeezenet", squeezenet),
        ("onnxruntime", "resnet50", resnet),
        ("onnxruntime", "digits-cnn", built["onnxruntime"]),
        ("pytorch", "digits-cnn", built["pytorch"]),
        ("tensorflow", "digits-cnn", built["tensorflow"]),
        ("opencl", "digits-cnn", built["onnxruntime"]),
    ]


def _measure(
    framework: str,
    manifest: ModelManifest,
    path: Path,
    level: TraceLevel,
    scenario: Scenario,
    trace_queries: int = TRACE_QUERIES,
) -> Any:
    job = RunEvaluation(
        evaluation_id=uuid.uuid4(),
        manifest=manifest,
        framework=framework,  # type: ignore[arg-type]
        framework_version="*",
        hardware="cpu",
        scenario=scenario,
        trace_level=level,
        trace_queries=trace_queries,
    )
    with tempfile.TemporaryDirectory() as results:
        inputs = JobInputs(model=path, results_dir=Path(results))
        return session_for(framework_for(framework), job).measure(job, inputs)


def _headline_p50_ms(run: Any) -> float:
    return float(summarize_result(run.native)[0].percentile(0.5).value_ns) / 1e6


def _timed(call: Any, inputs: dict[str, np.ndarray], queries: int) -> list[int]:
    durations = []
    for _ in range(queries):
        start = time.perf_counter_ns()
        call(inputs)
        durations.append(time.perf_counter_ns() - start)
    return durations


def _raw_slowdowns(
    framework: str, manifest: ModelManifest, path: Path, scale: Scale
) -> dict[str, Any]:
    """Each profiler on the open model: rounds of plain queries alternating with rounds
    under the profiler (switched on for its round only)."""
    predictor = framework_for(framework).create()
    predictor.open(manifest, path, hardware="cpu")
    inputs = synthetic_inputs(manifest, batch_size=1, seed=0)
    found: dict[str, Any] = {}
    try:
        for level in PROFILED_LEVELS:
            profiler = (
                predictor.profiler(level) if isinstance(predictor, Profiles) else Unavailable("")
            )
            if isinstance(profiler, Unavailable):
                continue
            plain: list[int] = []
            traced: list[int] = []
            layers = 0
            for _ in range(scale.rounds):
                plain += _timed(predictor.predict, inputs, scale.per_round)
                profiler.start()  # on only for its round: torch's and TF's see every op
                try:
                    for _ in range(PROFILER_WARMUP):  # as dlscope's own pass does
                        profiler.predict(inputs)
                    traced += _timed(profiler.predict, inputs, scale.per_round)
                finally:
                    layers += len(profiler.stop())
            found[level] = {
                "source": profiler.source,
                "plain_p50_ms": statistics.median(plain) / 1e6,
                "profiled_p50_ms": statistics.median(traced) / 1e6,
                "slowdown": statistics.median(traced) / statistics.median(plain),
                "layer_records": layers,
            }
    finally:
        predictor.close()
    return found


def _subject(
    framework: str, manifest: ModelManifest, path: Path, large: bool, scale: Scale
) -> dict[str, Any]:
    scenario = scale.headline_large if large else scale.headline
    pairs = min(3, scale.headline_pairs) if large else scale.headline_pairs
    queries = scale.trace_queries
    full = _measure(framework, manifest, path, "full", scenario, queries)
    reported = {
        o.level: (
            {"source": o.source, "overhead": o.overhead, "traced_p50_ms": o.traced_p50_ns / 1e6}
            if o.captured and o.traced_p50_ns is not None
            else {"captured": o.captured, "reason": o.reason}
        )
        for o in full.tracing.outcomes
        if o.level != "application"
    }
    headline: dict[str, list[float]] = {"none": [], "full": [_headline_p50_ms(full)]}
    for _ in range(pairs):
        for level in ("none", "full"):
            if len(headline[level]) < pairs:
                run = _measure(framework, manifest, path, level, scenario, queries)  # type: ignore[arg-type]
                headline[level].append(_headline_p50_ms(run))
    return {
        "reported_overhead": reported,
        "raw_profiler": _raw_slowdowns(framework, manifest, path, scale),
        "headline_p50_ms": headline,
        "headline_full_over_none": statistics.median(headline["full"])
        / statistics.median(headline["none"]),
    }


class _Collector(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Accept)
        self.received = 0


class _Accept(BaseHTTPRequestHandler):
    server: _Collector

    def do_POST(self) -> None:
        self.server.received += len(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def _spans_per_second(span_layers: int = SPAN_LAYERS) -> dict[str, Any]:
    """A pass of ``SPAN_LAYERS`` layers recorded as spans and exported over OTLP/HTTP."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    collector = _Collector()
    serving = threading.Thread(target=collector.serve_forever, daemon=True)
    serving.start()
    provider = TracerProvider()
    endpoint = f"http://127.0.0.1:{collector.server_address[1]}/v1/traces"
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    tracer = provider.get_tracer("bench")
    now = time.time_ns()
    per_query = 100
    queries = tuple(
        TracedQuery(
            index,
            now + index * 1_000_000,
            now + index * 1_000_000 + 900_000,
            layers=tuple(
                LayerTiming(
                    node=f"node{layer}",
                    op_type="Conv",
                    input_shapes=((1, 64, 56, 56), (64, 64, 3, 3)),
                    output_shapes=((1, 64, 56, 56),),
                    start_ns=now + index * 1_000_000 + layer * 9000,
                    end_ns=now + index * 1_000_000 + layer * 9000 + 8000,
                    thread=1,
                )
                for layer in range(per_query)
            ),
        )
        for index in range(max(1, span_layers // per_query))
    )
    tracing = Tracing("framework", passes=(TracedPass("framework", "bench", queries),))
    try:
        start = time.perf_counter()
        with tracer.start_as_current_span("job"):
            record_trace(tracer, tracing)
        recorded = time.perf_counter() - start
        provider.force_flush()
        exported = time.perf_counter() - start
    finally:
        provider.shutdown()
        collector.shutdown()
        collector.server_close()
    # The job, the pass, its queries and their layers.
    spans = 2 + len(queries) + sum(len(query.layers) for query in queries)
    return {
        "spans": spans,
        "recorded_per_s": spans / recorded,
        "exported_per_s": spans / exported,
        "bytes_exported": collector.received,
    }


async def run(scale: Scale | None = None, *, zoo: Path | None = None) -> dict[str, Any]:
    """Every subject at ``scale`` (``Scale()``); ``zoo``: a folder where ``build_digits`` has
    built the digits CNN already (built into a temporary folder otherwise)."""
    scale = scale or Scale()
    with tempfile.TemporaryDirectory() as scratch:
        cache = ArtifactCache(Path(scratch) / "artifacts")
        results: dict[str, Any] = {"load_average_before": os.getloadavg()}
        for framework, name, manifest in _subjects(zoo or Path(scratch) / "zoo"):
            key = f"{framework} {name}"
            if framework == "opencl" and (problem := opencl_problem()) is not None:
                results[key] = {"skipped": problem}  # e.g. PoCL's LLVM too old for this CPU
                continue
            assert manifest.source is not None
            path = await asyncio.to_thread(cache.fetch, manifest.source)
            results[key] = await asyncio.to_thread(
                _subject, framework, manifest, path, name == "resnet50", scale
            )
        results["spans"] = _spans_per_second(scale.span_layers)
        results["load_average_after"] = os.getloadavg()
        results["numpy"] = np.__version__
        return results
