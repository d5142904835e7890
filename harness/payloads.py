"""Whole, valid payloads for tests that build events by hand: what the services would send."""

from __future__ import annotations

from shared.manifests import ModelManifest
from shared.measurement import ScenarioResult, SingleStream, TimedPhase
from shared.measurement.overhead import HarnessOverhead
from shared.measurement.warmup import WarmupReport
from shared.messages import LatencySummary

__all__ = ["latency", "model_manifest", "single_stream_run"]


def model_manifest(name: str = "net", version: str = "1.0.0") -> ModelManifest:
    """A small ONNX Runtime model's manifest (its file is not there: for what reads names)."""
    return ModelManifest.model_validate(
        {
            "name": name,
            "version": version,
            "framework": {"name": "onnxruntime"},
            "inputs": [{"name": "x", "shape": [-1, 4]}],
            "outputs": [{"name": "y", "shape": [-1, 2]}],
            "source": {"uri": "model.onnx", "sha256": "0" * 64},
        }
    )


def latency(p50_ms: float = 4.2) -> LatencySummary:
    """A completed evaluation's summary around ``p50_ms``."""
    return LatencySummary(
        count=200,
        batch_size=1,
        mean_ms=p50_ms + 0.1,
        std_ms=0.3,
        min_ms=p50_ms - 1,
        max_ms=p50_ms + 3,
        p50_ms=p50_ms,
        p90_ms=p50_ms + 1,
        p99_ms=p50_ms + 2,
        throughput_per_s=1000 / p50_ms,
        first_inference_ms=30.0,
        load_ms=120.0,
        warmup_count=10,
    )


def single_stream_run() -> ScenarioResult:
    """What a worker measured in a short single-stream run: three timed queries of ~4 ms."""
    return ScenarioResult(
        scenario=SingleStream(),
        sample_count=1,
        phases=(
            TimedPhase(
                samples_per_query=1,
                first_query_ns=30_000_000,
                warmup=WarmupReport(
                    latencies_ns=(5_000_000,) * 3,
                    window_queries=3,
                    window_medians_ns=(5e6,),
                    threshold=0.05,
                    steady=False,
                    decided_by="max_windows",
                    duration_ns=15_000_000,
                ),
                latencies_ns=(4_000_000, 4_200_000, 4_500_000),
                duration_ns=12_700_000,
                overhead=HarnessOverhead(per_query_ns=0.0, timer_floor_ns=100.0, method="none"),
                stopped_by="minimums",
            ),
        ),
    )
