"""The analyzer's result of a measurement: the headline phase's figures, intervals, the
verdict and the harness overhead, for the native driver and for LoadGen's summary."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from services.analyzer.summary import summarize
from shared.measurement import BatchSweep, ScenarioResult, SingleStream, TimedPhase
from shared.measurement.loadgen import LoadgenPhase, LoadgenResult
from shared.measurement.overhead import HarnessOverhead
from shared.measurement.warmup import WarmupReport
from shared.messages import (
    EvaluationMeasured,
    GeneratedRequest,
    GenerationRecord,
    ReasonCode,
    Scenario,
    ServedRun,
)

WARMUP = WarmupReport(
    latencies_ns=(2_000_000,) * 3,
    window_queries=3,
    window_medians_ns=(2e6,),
    threshold=0.05,
    steady=True,
    decided_by="steady",
    duration_ns=6_000_000,
)


def phase(latencies_ms: list[float], *, samples_per_query: int = 1) -> TimedPhase:
    latencies_ns = tuple(int(ms * 1e6) for ms in latencies_ms)
    return TimedPhase(
        samples_per_query=samples_per_query,
        first_query_ns=9_000_000,
        warmup=WARMUP,
        latencies_ns=latencies_ns,
        duration_ns=sum(latencies_ns) + 1_000 * len(latencies_ns),
        overhead=HarnessOverhead(per_query_ns=1_000.0, timer_floor_ns=100.0, method="test"),
        stopped_by="minimums",
    )


def measured(*phases: TimedPhase, scenario: Scenario | None = None) -> EvaluationMeasured:
    wire = scenario or Scenario(min_duration_s=0)
    return EvaluationMeasured(
        evaluation_id=uuid.uuid4(),
        agent_id="a",
        scenario=wire,
        load_ns=5_000_000,
        run=ScenarioResult(scenario=wire.measurement(), sample_count=100, phases=phases),
    )


def test_percentiles_mean_and_spread_of_one_to_a_hundred_ms() -> None:
    summary = summarize(measured(phase([float(i) for i in range(1, 101)])))
    assert summary.count == 100
    assert summary.mean_ms == pytest.approx(50.5)
    assert summary.std_ms == pytest.approx(np.std(np.arange(1, 101), ddof=1), rel=1e-3)
    assert (summary.min_ms, summary.max_ms) == pytest.approx((1.0, 100.0))
    assert summary.p50_ms == pytest.approx(50.5, rel=0.02)
    assert summary.p90_ms == pytest.approx(90.1, rel=0.02)
    assert summary.headline == "p90"
    # 100 queries are enough for p90 (64) but not for p99 (662): the p99 is a bound.
    headline = summary.statistics[0].headline
    assert headline.kind == "estimate"
    assert headline.interval is not None
    assert headline.interval.low <= headline.value_ns <= headline.interval.high
    assert summary.statistics[0].percentile(0.99).kind == "bound"


def test_throughput_counts_samples_not_queries() -> None:
    summary = summarize(measured(phase([10.0] * 64, samples_per_query=4)))
    assert summary.batch_size == 4
    # 4 samples per 10 ms query, the 1 µs a query outside the call included.
    assert summary.throughput_per_s == pytest.approx(400.0, rel=1e-3)


def test_cold_start_warm_up_and_overhead_are_reported_apart_from_the_timed_queries() -> None:
    summary = summarize(measured(phase([1.0] * 64)))
    assert (summary.load_ms, summary.first_inference_ms, summary.warmup_count) == (5.0, 9.0, 3)
    assert summary.max_ms == pytest.approx(1.0)
    assert summary.harness_overhead_ns == 1_000.0
    assert summary.warmup is not None
    assert summary.warmup["decided_by"] == "steady"


def test_too_few_queries_make_the_verdict_invalid_with_the_reason() -> None:
    summary = summarize(measured(phase([1.0] * 10), scenario=Scenario(iterations=1024)))
    assert summary.verdict is not None
    assert summary.verdict.status == "INVALID"
    assert "too_few_queries" in {reason.code for reason in summary.verdict.reasons}


def test_a_sweep_reports_every_batch_size_and_heads_with_the_first() -> None:
    scenario = Scenario(name="batch-sweep", batch_sizes=(1, 8), min_duration_s=0, iterations=64)
    assert isinstance(scenario.measurement(), BatchSweep)
    summary = summarize(
        measured(phase([1.0] * 64), phase([4.0] * 64, samples_per_query=8), scenario=scenario)
    )
    assert [s.samples_per_query for s in summary.statistics] == [1, 8]
    assert summary.p50_ms == pytest.approx(1.0)
    assert summary.statistics[1].throughput.per_s == pytest.approx(2000.0, rel=1e-3)


def test_loadgen_figures_are_loadgens_own() -> None:
    scenario = Scenario(driver="loadgen")
    summary_file = {
        "scenario": "SingleStream",
        "result": "VALID",
        "qps_w_loadgen_overhead": 500.0,
        "min_latency_ns": 1_000_000,
        "max_latency_ns": 4_000_000,
        "mean_latency_ns": 2_000_000,
        "50_00_percentile_latency_ns": 1_900_000,
        "90_00_percentile_latency_ns": 2_500_000,
        "99_00_percentile_latency_ns": 3_900_000,
    }
    measured_ = EvaluationMeasured(
        evaluation_id=uuid.uuid4(),
        agent_id="a",
        scenario=scenario,
        load_ns=1,
        loadgen=LoadgenResult(
            scenario=SingleStream(),
            sample_count=10,
            phases=(
                LoadgenPhase(
                    samples_per_query=1,
                    output_dir="/results/x",
                    first_query_ns=3,
                    warmup=WARMUP,
                    summary=summary_file,
                ),
            ),
        ),
    )
    summary = summarize(measured_)
    assert (summary.p50_ms, summary.p90_ms, summary.p99_ms) == (1.9, 2.5, 3.9)
    assert summary.throughput_per_s == 500.0
    assert summary.std_ms is None
    assert summary.loadgen is not None
    assert summary.loadgen[0]["result"] == "VALID"
    assert summary.loadgen[0]["output_dir"] == "/results/x"


def test_a_generation_under_loadgen_keeps_loadgens_verdict_and_dlscopes_token_statistics() -> None:
    scenario = Scenario(
        name="server", driver="loadgen", target_qps=2.0, ttft_bound_ms=50, slo_percentile=0.9
    )
    # Two requests of 3 tokens: the first issued at once, the second after 100 ms of queue.
    requests = [
        GeneratedRequest(
            scheduled_ns=scheduled,
            issued_ns=issued,
            token_ns=[issued + 20_000_000 + k * 10_000_000 for k in range(3)],
            input_tokens=5,
            stopped_by="max_new_tokens",
        )
        for scheduled, issued in ((0, 0), (0, 100_000_000))
    ]
    measured_ = EvaluationMeasured(
        evaluation_id=uuid.uuid4(),
        agent_id="a",
        scenario=scenario,
        load_ns=1,
        loadgen=LoadgenResult(
            scenario=scenario.measurement(),
            sample_count=2,
            phases=(
                LoadgenPhase(
                    samples_per_query=1,
                    output_dir="/results/x",
                    first_query_ns=3,
                    warmup=WARMUP,
                    summary={
                        "scenario": "Server",
                        "result": "INVALID",
                        "completed_samples_per_second": 1.5,
                        "ttft_percentile_ns": 120e6,
                    },
                ),
            ),
        ),
        generation=GenerationRecord(
            max_new_tokens=3, ignore_eos=True, duration_ns=140_000_000, requests=requests
        ),
    )
    summary = summarize(measured_)
    assert summary.throughput_per_s == 1.5, "the server's samples per second"
    assert summary.verdict is None, "LoadGen's result is the verdict; dlscope adds none"
    assert summary.loadgen is not None
    assert summary.loadgen[0]["result"] == "INVALID"
    assert summary.generation is not None
    # TTFT from the scheduled time: 20 ms, and 120 ms for the request that waited.
    assert summary.generation.ttft.max_ns == 120_000_000
    assert summary.generation.ttft.min_ns == 20_000_000
    assert summary.generation.goodput_per_s == pytest.approx(1 / 0.14)


def test_a_measurement_carries_exactly_one_run() -> None:
    with pytest.raises(ValueError, match="exactly one of run"):
        EvaluationMeasured(evaluation_id=uuid.uuid4(), agent_id="a", load_ns=1)


def served_generation(
    scenario: Scenario, requests: int = 64, failures: dict[str, int] | None = None
) -> EvaluationMeasured:
    """A language model's server run of ``requests`` Poisson arrivals 250 ms apart: each
    request's first chunk 80 ms after its arrival, 15 more 20 ms apart (a 380 ms generation),
    issued a tenth of a millisecond late, on a quiet machine; ``failures`` failed besides."""
    ms = 1_000_000
    made = [
        GeneratedRequest(
            scheduled_ns=i * 250 * ms,
            issued_ns=i * 250 * ms + ms // 10,
            token_ns=[i * 250 * ms + (80 + 20 * k) * ms for k in range(16)],
            input_tokens=20,
            stopped_by="max_new_tokens",
            counted_tokens=16,
            finish_reason="length",
        )
        for i in range(requests)
    ]
    timed = TimedPhase(
        samples_per_query=1,
        first_query_ns=400 * ms,
        warmup=WARMUP,
        latencies_ns=tuple(r.token_ns[-1] - r.scheduled_ns for r in made),
        duration_ns=requests * 250 * ms,
        overhead=HarnessOverhead(per_query_ns=100_000.0, timer_floor_ns=100.0, method="test"),
        stopped_by="schedule",
        issue_delays_ns=(ms // 10,) * requests,
    )
    return EvaluationMeasured(
        evaluation_id=uuid.uuid4(),
        agent_id="a",
        scenario=scenario,
        load_ns=1,
        run=ScenarioResult(scenario=scenario.measurement(), sample_count=16, phases=(timed,)),
        generation=GenerationRecord(
            max_new_tokens=16,
            ignore_eos=True,
            duration_ns=requests * 250 * ms,
            requests=made,
            timed="chunk",
            served=ServedRun(
                url="http://127.0.0.1:8000/v1",
                model="smollm2",
                api="completions",
                client_lag_ns=[ms // 10] * requests,
                failures=failures or {},
            ),
            load="open",
        ),
    )


def test_a_language_models_server_run_without_bounds_is_judged_on_nothing_it_did_not_ask() -> None:
    scenario = Scenario(name="server", target_qps=4.0, iterations=64, max_new_tokens=16)
    summary = summarize(served_generation(scenario))
    assert summary.verdict is not None
    # Its 380 ms generations are far beyond the image models' default 10 ms latency bound, and
    # 64 requests cannot back a p99 of a query's latency: neither was asked of a generation.
    assert summary.p99_ms > scenario.latency_bound_ms
    assert summary.verdict.status == "VALID", summary.verdict.reasons
    codes = summary.verdict.codes
    assert ReasonCode.LATENCY_BOUND_MISSED not in codes
    assert ReasonCode.HEADLINE_IS_BOUND not in codes
    assert ReasonCode.LOAD_GENERATOR_LATE not in codes


def test_the_token_bounds_asked_judge_a_language_models_server_run() -> None:
    scenario = Scenario(
        name="server", target_qps=4.0, iterations=64, ttft_bound_ms=100, e2e_bound_ms=300
    )
    summary = summarize(served_generation(scenario))
    assert summary.verdict is not None
    assert summary.verdict.status == "INVALID"
    (missed,) = summary.verdict.errors
    assert missed.code is ReasonCode.E2E_BOUND_MISSED
    assert missed.measured == pytest.approx(380)
    assert missed.limit == 300
    assert summary.generation is not None
    assert summary.generation.goodput_per_s == 0.0, "no request met its 300 ms E2E bound"


def test_an_image_models_server_run_keeps_its_latency_bound() -> None:
    scenario = Scenario(name="server", target_qps=4.0, iterations=64)
    image = served_generation(scenario).model_copy(update={"generation": None})
    verdict = summarize(image).verdict
    assert verdict is not None
    assert ReasonCode.LATENCY_BOUND_MISSED in verdict.codes
    assert verdict.status == "INVALID"
