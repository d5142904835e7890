"""The analyzer's statistics of raw latencies."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from shared.measurement import measure, summarize
from shared.messages import EvaluationMeasured


def measured(latencies_ms: list[float], *, batch_size: int = 1) -> EvaluationMeasured:
    latencies_ns = [int(ms * 1e6) for ms in latencies_ms]
    return EvaluationMeasured(
        evaluation_id=uuid.uuid4(),
        agent_id="a",
        batch_size=batch_size,
        load_ns=5_000_000,
        first_inference_ns=9_000_000,
        warmup_latencies_ns=[2_000_000] * 3,
        latencies_ns=latencies_ns,
        duration_ns=sum(latencies_ns),
    )


def test_percentiles_mean_and_spread_of_one_to_a_hundred_ms() -> None:
    summary = summarize(measured([float(i) for i in range(1, 101)]))
    assert summary.count == 100
    assert summary.mean_ms == pytest.approx(50.5)
    assert summary.std_ms == pytest.approx(np.std(np.arange(1, 101), ddof=1))
    assert (summary.min_ms, summary.max_ms) == (1.0, 100.0)
    assert summary.p50_ms == pytest.approx(50.5)
    assert summary.p90_ms == pytest.approx(90.1)
    assert summary.p99_ms == pytest.approx(99.01)


def test_throughput_counts_samples_not_queries() -> None:
    summary = summarize(measured([10.0] * 50, batch_size=4))
    assert summary.throughput_per_s == pytest.approx(400.0)


def test_cold_start_and_warm_up_are_reported_apart_from_the_timed_queries() -> None:
    summary = summarize(measured([1.0, 1.0]))
    assert (summary.load_ms, summary.first_inference_ms, summary.warmup_count) == (5.0, 9.0, 3)
    assert summary.max_ms == 1.0


def test_the_loop_runs_one_cold_query_the_warm_up_and_the_timed_queries() -> None:
    calls: list[int] = []
    result = measure(lambda: calls.append(1), warmup=3, iterations=7)
    assert len(calls) == 1 + 3 + 7
    assert (len(result.warmup_latencies_ns), len(result.latencies_ns)) == (3, 7)
    assert result.duration_ns >= sum(result.latencies_ns)
