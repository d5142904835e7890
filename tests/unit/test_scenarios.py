"""Scenarios: their settings refuse what cannot work, and each driver issues the queries its
MLPerf counterpart would, timed the way users expect."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Literal

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from shared.errors import ConfigurationError
from shared.measurement import (
    AdaptiveStop,
    BatchSweep,
    MultiStream,
    Offline,
    ReasonCode,
    ScenarioPlan,
    Server,
    SingleStream,
    WarmupSettings,
    check_sample_count,
    judge,
    run_scenario,
    summarize_result,
)
from shared.measurement.server import poisson_arrivals_ns
from shared.measurement.warmup import warm_up

# Short runs: these tests check behaviour, not the defaults' durations.
QUICK_WARMUP = WarmupSettings(window_queries=8, max_windows=3)


class Recorder:
    """A framework call that records what it was asked for and takes ``seconds``."""

    def __init__(self, seconds: float = 0.0, per_sample: float = 0.0) -> None:
        self.calls: list[list[int]] = []
        self.seconds = seconds
        self.per_sample = per_sample

    def __call__(self, indices: Sequence[int]) -> None:
        self.calls.append(list(indices))
        if self.seconds or self.per_sample:
            time.sleep(self.seconds + self.per_sample * len(indices))


# Settings -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"name": "server", "target_qps": 0}, "target_qps"),
        ({"name": "server", "target_qps": -5}, "target_qps"),
        ({"name": "server", "latency_bound_ms": 0}, "latency_bound_ms"),
        ({"name": "multi-stream", "samples_per_query": 0}, "samples_per_query"),
        ({"name": "single-stream", "target_latency_percentile": 1.0}, "target_latency_percentile"),
        ({"name": "offline", "batch_size": 0}, "batch_size"),
        ({"name": "batch-sweep", "batch_sizes": [1, 2, 2]}, "batch sizes repeat"),
        ({"name": "single-stream", "min_duration_s": 10, "max_duration_s": 5}, "max_duration_s"),
        ({"name": "single-stream", "warmup": {"min_windows": 5, "max_windows": 2}}, "max_windows"),
        ({"name": "single-stream", "iterations": 5}, "iterations"),
    ],
)
def test_impossible_settings_are_refused_naming_the_field(
    settings: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError, match=field):
        TypeAdapter(ScenarioPlan).validate_python(settings)


def test_a_scenario_is_chosen_by_its_name_and_keeps_mlperf_like_defaults() -> None:
    server = TypeAdapter(ScenarioPlan).validate_python({"name": "server", "target_qps": 250})
    assert isinstance(server, Server)
    assert (server.target_qps, server.latency_bound_ms, server.target_latency_percentile) == (
        250,
        10.0,
        0.99,
    )
    assert SingleStream().target_latency_percentile == 0.9
    assert MultiStream().target_latency_percentile == 0.99
    # The defaults make the headline percentile reportable (MLPerf early stopping).
    assert SingleStream().min_query_count >= 64
    assert MultiStream().min_query_count >= 662
    assert Server().min_query_count >= 662


def test_multi_stream_cannot_ask_for_more_samples_per_query_than_the_dataset_has() -> None:
    with pytest.raises(ConfigurationError, match=r"8 samples.*has 4"):
        check_sample_count(MultiStream(samples_per_query=8), 4)
    check_sample_count(MultiStream(samples_per_query=8), 8)
    with pytest.raises(ConfigurationError, match="8 samples"):
        run_scenario(MultiStream(samples_per_query=8), Recorder(), sample_count=4)


# Poisson arrivals ---------------------------------------------------------------------------


def test_poisson_arrivals_have_the_requested_mean_rate() -> None:
    qps = 2000.0
    arrivals = poisson_arrivals_ns(qps, seed=7, min_count=20_000, min_duration_ns=0)
    gaps = np.diff(arrivals, prepend=0) / 1e9
    n = gaps.size
    # Exponential gaps: mean 1/qps with standard error (1/qps)/sqrt(n); allow 4 of them.
    assert abs(gaps.mean() - 1 / qps) < 4 * (1 / qps) / math.sqrt(n)
    # ... and a coefficient of variation of 1 (a regular schedule would have 0).
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)


def test_poisson_arrivals_are_reproducible_by_seed_and_cover_the_minimums() -> None:
    first = poisson_arrivals_ns(500, seed=3, min_count=100, min_duration_ns=2_000_000_000)
    assert np.array_equal(
        first, poisson_arrivals_ns(500, seed=3, min_count=100, min_duration_ns=2_000_000_000)
    )
    assert not np.array_equal(
        first, poisson_arrivals_ns(500, seed=4, min_count=100, min_duration_ns=2_000_000_000)
    )
    assert first.size >= 100
    assert first[-1] >= 2_000_000_000
    assert np.all(np.diff(first) >= 0)
    many = poisson_arrivals_ns(500, seed=3, min_count=5000, min_duration_ns=0)
    assert many.size == 5000


# Drivers ------------------------------------------------------------------------------------


def test_single_stream_times_one_sample_per_query_until_both_minimums_are_met() -> None:
    call = Recorder()
    scenario = SingleStream(min_query_count=300, min_duration_s=0.05, warmup=QUICK_WARMUP)
    result = run_scenario(scenario, call, sample_count=10, load_ns=1234)
    phase = result.phases[0]
    assert len(phase.latencies_ns) >= 300
    assert phase.duration_ns >= 50_000_000
    assert phase.stopped_by == "minimums"
    # The cold query and the warm-up are reported apart from the timed queries.
    assert len(call.calls) == 1 + len(phase.warmup.latencies_ns) + len(phase.latencies_ns)
    assert result.load_ns == 1234
    assert result.first_inference_ns == phase.first_query_ns
    assert all(len(c) == 1 and 0 <= c[0] < 10 for c in call.calls)
    # Every sample is used, in a seeded order that a second run repeats.
    assert {c[0] for c in call.calls} == set(range(10))
    again = Recorder()
    run_scenario(scenario, again, sample_count=10)
    assert again.calls[:50] == call.calls[:50]


def test_multi_stream_queries_carry_the_requested_number_of_distinct_samples() -> None:
    call = Recorder()
    scenario = MultiStream(
        samples_per_query=6, min_query_count=50, min_duration_s=0, warmup=QUICK_WARMUP
    )
    result = run_scenario(scenario, call, sample_count=10)
    assert all(len(c) == 6 and len(set(c)) == 6 for c in call.calls)
    assert result.phases[0].samples_per_query == 6
    stats = summarize_result(result)[0]
    assert stats.headline.percentile == 0.99
    assert stats.throughput.per_s == pytest.approx(
        6 * stats.count / (result.phases[0].duration_ns / 1e9)
    )


def test_offline_runs_every_sample_in_batches_and_reports_samples_per_second() -> None:
    call = Recorder(seconds=0.001)
    scenario = Offline(batch_size=8, min_sample_count=200, min_duration_s=0, warmup=QUICK_WARMUP)
    result = run_scenario(scenario, call, sample_count=50)
    phase = result.phases[0]
    timed = call.calls[-len(phase.latencies_ns) :]
    assert all(len(c) == 8 for c in timed)
    assert len(timed) * 8 >= 200
    assert phase.stopped_by == "all_samples"
    stats = summarize_result(result)[0]
    # Samples per second of wall time, batches back to back: at most what 1 ms per batch of
    # 8 allows, and not far below it.
    assert stats.throughput.per_s == pytest.approx(len(timed) * 8 / (phase.duration_ns / 1e9))
    assert 8 / 0.005 < stats.throughput.per_s < 8 / 0.001
    assert stats.throughput.interval.high is not None
    assert stats.throughput.interval.low <= stats.throughput.per_s <= stats.throughput.interval.high


def test_offline_sizes_its_sample_count_to_last_the_minimum_duration() -> None:
    scenario = Offline(batch_size=4, min_sample_count=1, min_duration_s=0.2, warmup=QUICK_WARMUP)
    result = run_scenario(scenario, Recorder(seconds=0.002), sample_count=4)
    assert result.phases[0].duration_ns >= 0.2e9 * 0.9


def test_a_batch_sweep_reports_latency_and_throughput_per_batch_size() -> None:
    # A fixed cost per call plus a cost per sample: larger batches amortise the fixed cost.
    call = Recorder(seconds=0.001, per_sample=0.00005)
    scenario = BatchSweep(
        batch_sizes=(1, 8), min_query_count=20, min_duration_s=0, warmup=QUICK_WARMUP
    )
    result = run_scenario(scenario, call, sample_count=8)
    assert [p.samples_per_query for p in result.phases] == [1, 8]
    one, eight = summarize_result(result)
    assert eight.median.value_ns > one.median.value_ns
    assert eight.throughput.per_s > 3 * one.throughput.per_s


@pytest.mark.parametrize("issuer", ["inline", "thread"])
def test_server_latency_counts_queueing_when_queries_arrive_faster_than_they_run(
    issuer: Literal["inline", "thread"],
) -> None:
    # 1 000 QPS offered to a 2 ms call: the queue grows by about a query every 2 ms.
    scenario = Server(
        target_qps=1000,
        latency_bound_ms=10,
        min_query_count=150,
        min_duration_s=0,
        warmup=QUICK_WARMUP,
        issuer=issuer,
    )
    result = run_scenario(scenario, Recorder(seconds=0.002), sample_count=1)
    phase = result.phases[0]
    latencies_ms = np.array(phase.latencies_ns) / 1e6
    service_ms = 2.0
    assert latencies_ms.min() >= service_ms * 0.9
    # The last queries waited behind most of the others: far more than their own 2 ms.
    assert latencies_ms[-10:].mean() > 20 * service_ms
    verdict = judge(result)
    assert verdict.status == "INVALID"
    assert ReasonCode.LATENCY_BOUND_MISSED in verdict.codes
    # Queued behind a busy worker is not issued late: the lateness stays small.
    assert np.median(phase.issue_delays_ns) < 1_000_000


@pytest.mark.parametrize("issuer", ["inline", "thread"])
def test_server_issues_on_schedule_and_records_how_late_each_query_went_out(
    issuer: Literal["inline", "thread"],
) -> None:
    scenario = Server(
        target_qps=400, min_query_count=100, min_duration_s=0, warmup=QUICK_WARMUP, issuer=issuer
    )
    result = run_scenario(scenario, Recorder(), sample_count=3)
    phase = result.phases[0]
    assert len(phase.issue_delays_ns) == len(phase.latencies_ns) >= 100
    assert min(phase.issue_delays_ns) >= 0
    # Latency runs from the scheduled arrival: never shorter than the lateness of the issue.
    assert all(
        lat >= delay for lat, delay in zip(phase.latencies_ns, phase.issue_delays_ns, strict=True)
    )
    # 100 arrivals at 400 QPS span about a quarter of a second.
    assert 0.1e9 < phase.duration_ns < 1.5e9
    assert phase.unfinished_queries == 0


def test_a_server_run_stops_at_its_duration_cap_and_says_what_was_left() -> None:
    scenario = Server(
        target_qps=2000,
        min_query_count=400,
        min_duration_s=0,
        max_duration_s=0.1,
        warmup=WarmupSettings(max_windows=0),
    )
    result = run_scenario(scenario, Recorder(seconds=0.005), sample_count=1)
    phase = result.phases[0]
    assert phase.stopped_by == "max_duration"
    assert phase.unfinished_queries == 400 - len(phase.latencies_ns) > 0
    assert ReasonCode.QUERIES_UNFINISHED in judge(result).codes


class Spread:
    """A model whose latencies really vary: each query busy-waits a seeded random 50-150 µs,
    so an interval has width on any machine (a null model's latencies can all be one timer
    tick, and then any interval is "narrow")."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def __call__(self, indices: Sequence[int]) -> None:
        end = time.perf_counter_ns() + int(self._rng.integers(50_000, 150_000))
        while time.perf_counter_ns() < end:
            pass


def test_adaptive_duration_stops_once_the_interval_is_narrow_or_at_the_cap() -> None:
    loose = SingleStream(
        min_query_count=100,
        min_duration_s=0,
        adaptive=AdaptiveStop(relative_half_width=0.5),
        warmup=QUICK_WARMUP,
    )
    assert run_scenario(loose, Spread()).phases[0].stopped_by == "adaptive"
    strict = loose.model_copy(
        update={"adaptive": AdaptiveStop(relative_half_width=1e-9), "max_duration_s": 0.2}
    )
    phase = run_scenario(strict, Spread()).phases[0]
    assert phase.stopped_by == "max_duration"
    assert 0.2e9 <= phase.duration_ns < 1e9


def test_the_harness_overhead_of_every_run_is_measured_and_small() -> None:
    phase = run_scenario(
        SingleStream(min_query_count=5000, min_duration_s=0, warmup=QUICK_WARMUP), Recorder()
    ).phases[0]
    assert 0 < phase.overhead.per_query_ns < 50_000  # generous: two busy shared cores
    assert 0 < phase.overhead.timer_floor_ns < 10_000


# Warm-up ------------------------------------------------------------------------------------


def test_warm_up_runs_until_consecutive_window_medians_agree() -> None:
    # A cold start that fades: 1 ms steady latency plus 4 ms decaying by a tenth per query.
    count = iter(range(10_000))
    report = warm_up(
        lambda: int(1e6 + 4e6 * 0.9 ** next(count)),
        WarmupSettings(window_queries=8, threshold=0.05, max_windows=50),
    )
    assert report.decided_by == "steady"
    assert report.steady
    medians = report.window_medians_ns
    assert len(medians) >= 3
    assert abs(medians[1] - medians[0]) / medians[0] > 0.05  # still warming at first
    assert report.last_change is not None
    assert report.last_change < 0.05
    assert medians[-1] == pytest.approx(1e6, rel=0.05)
    assert len(report.latencies_ns) == 8 * len(medians)


def test_warm_up_that_never_settles_stops_at_its_cap_and_says_so() -> None:
    count = iter(range(10_000))
    # Every query slower than the last by a tenth: never steady.
    report = warm_up(
        lambda: int(1000 * 1.1 ** next(count)), WarmupSettings(window_queries=4, max_windows=5)
    )
    assert (report.decided_by, report.steady, len(report.window_medians_ns)) == (
        "max_windows",
        False,
        5,
    )
    assert report.last_change is not None
    assert report.last_change > 0.05
    disabled = warm_up(lambda: 1, WarmupSettings(max_windows=0))
    assert disabled.decided_by == "disabled"
    assert disabled.latencies_ns == ()
