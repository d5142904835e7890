"""Statistics of raw per-query latencies."""

from __future__ import annotations

import numpy as np

from shared.messages import EvaluationMeasured, LatencySummary

__all__ = ["summarize"]

_MS = 1e-6


def summarize(measured: EvaluationMeasured) -> LatencySummary:
    latencies = np.asarray(measured.latencies_ns, dtype=np.float64)
    p50, p90, p99 = np.percentile(latencies, [50, 90, 99])
    # Throughput over the timed loop's wall time, so the harness's own per-query work counts.
    seconds = measured.duration_ns / 1e9 if measured.duration_ns > 0 else latencies.sum() / 1e9
    return LatencySummary(
        count=int(latencies.size),
        batch_size=measured.batch_size,
        mean_ms=float(latencies.mean() * _MS),
        std_ms=float(latencies.std(ddof=1) * _MS) if latencies.size > 1 else 0.0,
        min_ms=float(latencies.min() * _MS),
        max_ms=float(latencies.max() * _MS),
        p50_ms=float(p50 * _MS),
        p90_ms=float(p90 * _MS),
        p99_ms=float(p99 * _MS),
        throughput_per_s=float(latencies.size * measured.batch_size / seconds),
        first_inference_ms=measured.first_inference_ns * _MS,
        load_ms=measured.load_ns * _MS,
        warmup_count=len(measured.warmup_latencies_ns),
        accuracy=measured.accuracy,
    )
