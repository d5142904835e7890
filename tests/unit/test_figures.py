"""What the pages and reports draw, from a measurement's raw latencies: every query counted
once in the histogram (or said to lie beyond it), a CDF that climbs to the slowest query, a
series over the query index that keeps the spikes, batch curves in order, and a history that
marks where the environment changed. Sizes stay bounded however long the run."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from services.analyzer.figures import CDF_POINTS, MAX_BINS, SERIES_POINTS, figures
from services.analyzer.history import history
from services.analyzer.summary import summarize
from shared.eventstore import EvaluationView
from shared.measurement import BatchSweep, ScenarioResult
from shared.messages import (
    EvaluationMeasured,
    EvaluationProfiled,
    LayerStat,
    LayerTiming,
    ProfiledPass,
    Scenario,
)
from tests.unit.test_result_summary import measured, phase


def test_a_short_run_is_drawn_query_by_query() -> None:
    drawn = figures(measured(phase([float(i) for i in range(1, 101)])))
    (one,) = drawn.phases
    assert one.count == 100
    assert sum(b.count for b in one.histogram) == 100
    assert one.above_count == 0
    assert [p.fraction for p in one.cdf][-1] == 1.0
    assert one.cdf[-1].latency_ms == pytest.approx(100.0)
    assert one.cdf[0].latency_ms == pytest.approx(1.0)
    assert one.bucket == 1
    assert [p.latency_ms for p in one.series] == pytest.approx([float(i) for i in range(1, 101)])
    assert one.first_query_ms == pytest.approx(9.0)
    assert drawn.warmup is not None
    assert drawn.warmup.latencies_ms == pytest.approx([2.0, 2.0, 2.0])


def test_a_long_run_stays_small_and_keeps_its_spikes() -> None:
    rng = np.random.default_rng(0)
    latencies = list(rng.lognormal(0, 0.1, 100_000))
    latencies[70_001] = 500.0  # one preempted query
    drawn = figures(measured(phase(latencies)))
    (one,) = drawn.phases
    assert len(one.histogram) <= MAX_BINS
    assert len(one.cdf) <= CDF_POINTS + 5
    assert len(one.series) <= SERIES_POINTS
    # The spike is beyond the histogram, said so, and still the top of its series bucket.
    assert one.above_ms is not None
    assert sum(b.count for b in one.histogram) + one.above_count == 100_000
    spiked = next(p for p in one.series if p.index <= 70_001 < p.index + one.bucket)
    assert spiked.high_ms == pytest.approx(500.0)
    assert all(p.low_ms <= p.latency_ms <= p.high_ms for p in one.series)
    # The CDF never goes back, and ends at the slowest query.
    fractions = [p.fraction for p in one.cdf]
    latencies_ms = [p.latency_ms for p in one.cdf]
    assert fractions == sorted(fractions)
    assert latencies_ms == sorted(latencies_ms)
    assert one.cdf[-1].latency_ms == pytest.approx(500.0)
    assert any(p.fraction == pytest.approx(0.999) for p in one.cdf)


def test_a_batch_sweep_gives_one_curve_point_per_batch_size_with_intervals() -> None:
    wire = Scenario(name="batch-sweep", batch_sizes=(1, 4, 16), min_duration_s=0)
    sweep = EvaluationMeasured(
        evaluation_id=uuid.uuid4(),
        agent_id="a",
        scenario=wire,
        load_ns=1,
        run=ScenarioResult(
            scenario=BatchSweep(batch_sizes=(1, 4, 16), min_query_count=100, min_duration_s=0),
            sample_count=100,
            phases=tuple(
                phase([float(size)] * 50 + [size * 1.1] * 50, samples_per_query=size)
                for size in (1, 4, 16)
            ),
        ),
    )
    drawn = figures(sweep)
    assert [p.batch_size for p in drawn.batch_curve] == [1, 4, 16]
    assert [p.batch_size for p in drawn.phases] == [1, 4, 16]
    for point in drawn.batch_curve:
        assert point.headline == "p90"
        assert point.headline_low_ms is not None
        assert point.headline_low_ms <= point.headline_ms
        assert point.throughput_low is not None
        assert point.throughput_low <= point.throughput_per_s
    # Bigger batches: more samples per second here.
    throughputs = [p.throughput_per_s for p in drawn.batch_curve]
    assert throughputs == sorted(throughputs)


def test_layers_are_listed_slowest_first_with_their_share() -> None:
    layers = [
        LayerTiming(node=name, op_type="Conv", queued_ns=0, submit_ns=0, start_ns=0, end_ns=ns)
        for name, ns in (("a", 1_000), ("b", 3_000), ("c", 6_000))
    ]
    with_layers = measured(phase([1.0] * 10)).model_copy(update={"layers": layers})
    drawn = figures(with_layers)
    assert [layer.node for layer in drawn.layers] == ["c", "b", "a"]
    assert [layer.share for layer in drawn.layers] == pytest.approx([0.6, 0.3, 0.1])
    assert drawn.layers_source is not None


def _view(
    at: datetime, environment: dict[str, Any], p90_ms: float, version: str = "1.0.0"
) -> EvaluationView:
    summary = summarize(measured(phase([p90_ms] * 100)))
    return EvaluationView(
        evaluation_id=uuid.uuid4(),
        status="completed",
        model="m",
        model_version=version,
        framework="onnxruntime",
        hardware="cpu",
        agent_id="a",
        host=environment.get("host"),
        environment=environment,
        attempts=1,
        trace_id="0" * 32,
        request=None,
        result=summary,
        error=None,
        requested_at=at,
        updated_at=at,
        last_position=1,
    )


def test_history_marks_where_the_environment_changed_oldest_first() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    old = {"host": "h1", "framework_version": "1.30.0", "cpu_model": "Xeon"}
    new = {**old, "framework_version": "1.31.1"}
    views = [
        _view(start + timedelta(days=2), new, 2.0),
        _view(start, old, 1.0),
        _view(start + timedelta(days=1), old, 1.0),
        _view(start + timedelta(days=3), {**new, "host": "h2"}, 2.0, version="1.1.0"),
    ]
    drawn = history("m", "onnxruntime", "cpu", views)
    assert [p.at for p in drawn.points] == sorted(v.requested_at for v in views)
    assert [p.changed for p in drawn.points] == [
        [],
        [],
        ["framework 1.30.0 → 1.31.1"],
        ["model 1.0.0 → 1.1.0", "host h1 → h2"],
    ]
    assert [p.headline_ms for p in drawn.points] == pytest.approx([1.0, 1.0, 2.0, 2.0])


def test_layers_of_a_profiled_pass_come_first_per_query() -> None:
    profiled = EvaluationProfiled(
        evaluation_id=uuid.uuid4(),
        agent_id="a",
        framework="onnxruntime",
        trace_level="framework",
        levels=[],
        passes=[
            ProfiledPass(
                level="framework",
                source="onnxruntime session profiling",
                queries=5,
                batch_size=1,
                query_p50_ns=1e6,
                layers=[
                    LayerStat(
                        node=name,
                        op_type="Conv",
                        calls=5,
                        total_ns=ns,
                        mean_ns=ns / 5,
                        p50_ns=ns / 5,
                        share=s,
                    )
                    for name, ns, s in (("small", 500_000, 0.1), ("big", 2_500_000, 0.5))
                ],
            )
        ],
    )
    drawn = figures(measured(phase([1.0] * 10)), profiled)
    assert [layer.node for layer in drawn.layers] == ["big", "small"]
    # Per query: 2.5 ms over 5 queries.
    assert drawn.layers[0].duration_ms == pytest.approx(0.5)
    assert drawn.layers_source == "framework pass: onnxruntime session profiling, 5 queries"
