"""The validity verdict: VALID only when the run kept its scenario's rules, with a reason a
machine can act on and a person can read for everything that is wrong or doubtful."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

from shared.measurement import (
    BatchSweep,
    Offline,
    ReasonCode,
    ScenarioResult,
    Server,
    SingleStream,
    TimedPhase,
    ValidityThresholds,
    judge,
    summarize_repetitions,
)
from shared.measurement.contention import heavy_processes
from shared.measurement.overhead import HarnessOverhead
from shared.measurement.scenarios import ScenarioPlan
from shared.measurement.validity import Severity
from shared.measurement.warmup import WarmupReport

STEADY = WarmupReport(
    latencies_ns=(1_000_000,) * 64,
    window_queries=32,
    window_medians_ns=(1_000_000.0, 1_000_000.0),
    threshold=0.05,
    steady=True,
    decided_by="steady",
    last_change=0.0,
    duration_ns=64_000_000,
)
QUIET = {"cpu_governor": "performance", "heavy_processes": [], "load_average": [0.5, 0.5, 0.5]}


def phase(
    latencies_ms: list[float] | np.ndarray,
    *,
    duration_s: float | None = None,
    samples_per_query: int = 1,
    warmup: WarmupReport = STEADY,
    overhead_ns: float = 300.0,
    **extra: Any,
) -> TimedPhase:
    latencies_ns = tuple(int(ms * 1e6) for ms in latencies_ms)
    return TimedPhase(
        samples_per_query=samples_per_query,
        first_query_ns=20_000_000,
        warmup=warmup,
        latencies_ns=latencies_ns,
        duration_ns=int(duration_s * 1e9) if duration_s is not None else sum(latencies_ns),
        overhead=HarnessOverhead(per_query_ns=overhead_ns, timer_floor_ns=100.0, method="test"),
        stopped_by="minimums",
        **extra,
    )


def result(scenario: ScenarioPlan, *phases: TimedPhase) -> ScenarioResult:
    return ScenarioResult(scenario=scenario, sample_count=1, phases=phases)


def steady_ms(count: int) -> np.ndarray:
    return np.random.default_rng(0).normal(1.0, 0.02, count)


def test_a_run_that_kept_every_rule_on_a_quiet_machine_is_valid_without_reasons() -> None:
    verdict = judge(result(SingleStream(), phase(steady_ms(1200))), environment=QUIET)
    assert verdict.status == "VALID"
    assert verdict.reasons == ()


def test_too_few_queries_for_the_scenario_and_its_headline_percentile_is_invalid() -> None:
    scenario = SingleStream(min_query_count=50, min_duration_s=0)
    verdict = judge(result(scenario, phase(steady_ms(40))))
    assert verdict.status == "INVALID"
    assert verdict.codes == {ReasonCode.TOO_FEW_QUERIES, ReasonCode.HEADLINE_IS_BOUND}
    bound = next(r for r in verdict.errors if r.code is ReasonCode.HEADLINE_IS_BOUND)
    assert (bound.measured, bound.limit) == (40, 64)
    assert "p90 needs at least 64 queries" in bound.message


def test_a_run_shorter_than_the_minimum_duration_is_invalid() -> None:
    scenario = SingleStream(min_query_count=100, min_duration_s=2)
    verdict = judge(result(scenario, phase(steady_ms(1200))))  # 1.2 s of 1 ms queries
    assert verdict.codes == {ReasonCode.DURATION_TOO_SHORT}
    assert verdict.status == "INVALID"
    assert verdict.errors[0].limit == 2


def test_a_server_whose_p99_exceeds_the_bound_is_invalid() -> None:
    scenario = Server(target_qps=100, latency_bound_ms=5, min_query_count=700, min_duration_s=0)
    latencies = np.concatenate([np.full(680, 2.0), np.full(20, 8.0)])  # 2.9% over 5 ms
    verdict = judge(result(scenario, phase(latencies, issue_delays_ns=(50_000,) * 700)))
    assert verdict.status == "INVALID"
    assert verdict.codes == {ReasonCode.LATENCY_BOUND_MISSED}
    missed = verdict.errors[0]
    assert missed.limit == 5
    assert missed.measured == pytest.approx(8.0)
    assert "exceeds the 5 ms bound at 100 QPS" in missed.message


def test_a_server_load_generator_that_issued_too_many_queries_late_is_invalid() -> None:
    scenario = Server(target_qps=100, latency_bound_ms=10, min_query_count=700, min_duration_s=0)
    # 2% of the queries went out 3 ms late (more than a tenth of the 10 ms bound); p99 allows 1%.
    delays = (3_000_000,) * 14 + (40_000,) * 686
    verdict = judge(result(scenario, phase(np.full(700, 4.0), issue_delays_ns=delays)))
    assert verdict.codes == {ReasonCode.LOAD_GENERATOR_LATE}
    late = verdict.errors[0]
    assert late.measured == pytest.approx(0.02)
    assert late.limit == pytest.approx(0.01)
    relaxed = ValidityThresholds(max_late_share=0.05)
    assert (
        judge(
            result(scenario, phase(np.full(700, 4.0), issue_delays_ns=delays)), thresholds=relaxed
        ).status
        == "VALID"
    )


def test_queries_cut_off_by_the_duration_cap_make_the_run_invalid() -> None:
    scenario = Server(target_qps=100, min_query_count=700, min_duration_s=0)
    cut = phase(np.full(700, 1.0), issue_delays_ns=(0,) * 700, unfinished_queries=30)
    assert ReasonCode.QUERIES_UNFINISHED in judge(result(scenario, cut)).codes


def test_a_query_held_up_for_a_minute_is_named_as_stalled() -> None:
    # Given a worker stopped (SIGSTOP) for a minute in the middle of its timed queries
    latencies = np.concatenate([steady_ms(600), [62_000.0], steady_ms(600)])
    verdict = judge(result(SingleStream(), phase(latencies)), environment=QUIET)
    # Then the verdict says a query stalled, how long, and against what bound
    assert verdict.status == "INVALID"
    assert verdict.codes == {ReasonCode.QUERY_STALLED}
    stalled = verdict.errors[0]
    assert stalled.measured == pytest.approx(62.0)
    assert stalled.limit == pytest.approx(1.0)  # 100 x a 1 ms median is less than a second
    assert "1 timed query took longer than 1.000 s" in stalled.message
    assert "the longest 62.000 s" in stalled.message


def test_a_quiet_runs_tail_is_never_a_stall() -> None:
    # A fast model's spikes (page faults, a scheduler tick: 500 x its median) stay under a
    # second, and a slow model's slowest query under a hundred times its median
    fast = np.concatenate([steady_ms(1200), [500.0, 250.0]])
    slow = np.concatenate([np.full(100, 2_000.0), [30_000.0]])  # 2 s per query, one of 30 s
    slow_scenario = SingleStream(min_query_count=100, min_duration_s=0)
    for run in (result(SingleStream(), phase(fast)), result(slow_scenario, phase(slow))):
        assert ReasonCode.QUERY_STALLED not in judge(run, environment=QUIET).codes
    # and the bounds are thresholds a stricter reader can tighten
    strict = ValidityThresholds(stall_min_s=0.2)
    assert (
        ReasonCode.QUERY_STALLED
        in judge(result(SingleStream(), phase(fast)), thresholds=strict).codes
    )


def test_offline_counts_samples_not_batches() -> None:
    scenario = Offline(batch_size=16, min_sample_count=1000, min_duration_s=0)
    short = phase(np.full(60, 10.0), samples_per_query=16)  # 960 samples
    verdict = judge(result(scenario, short))
    assert verdict.codes == {ReasonCode.TOO_FEW_QUERIES}
    assert "960 samples" in verdict.errors[0].message
    assert judge(result(scenario, phase(np.full(63, 10.0), samples_per_query=16))).status == "VALID"


def test_each_point_of_a_sweep_is_judged_and_named() -> None:
    scenario = BatchSweep(batch_sizes=(1, 4), min_query_count=64, min_duration_s=0)
    verdict = judge(
        result(
            scenario,
            phase(steady_ms(100)),
            phase(steady_ms(30), samples_per_query=4),
        )
    )
    assert verdict.status == "INVALID"
    assert {r.batch_size for r in verdict.errors} == {4}
    assert all(r.message.endswith("at batch size 4") for r in verdict.errors)


def test_doubtful_conditions_are_warnings_that_keep_the_run_valid() -> None:
    unsteady = STEADY.model_copy(
        update={"steady": False, "decided_by": "max_windows", "last_change": 0.2}
    )
    environment = {
        "cpu_governor": "powersave",
        "heavy_processes": [{"pid": 42, "name": "stress", "cpu_percent": 99.0}],
    }
    verdict = judge(
        result(SingleStream(), phase(steady_ms(1200), warmup=unsteady, overhead_ns=80_000)),
        environment=environment,
    )
    assert verdict.status == "VALID"
    assert verdict.codes == {
        ReasonCode.CPU_GOVERNOR_NOT_PERFORMANCE,
        ReasonCode.OTHER_HEAVY_PROCESSES,
        ReasonCode.WARMUP_NOT_STEADY,
        ReasonCode.HIGH_HARNESS_OVERHEAD,
    }
    assert all(r.severity is Severity.WARNING for r in verdict.reasons)
    assert "stress (pid 42, 99% CPU)" in " ".join(r.message for r in verdict.reasons)


def test_a_loaded_machine_is_noticed_from_the_load_average_when_no_process_list_was_taken() -> None:
    busy = {"load_average": [6.0, 5.0, 4.0], "cpu_threads": 2}
    verdict = judge(result(SingleStream(), phase(steady_ms(1200))), environment=busy)
    assert verdict.codes == {ReasonCode.OTHER_HEAVY_PROCESSES}
    # A governor the environment could not read (containers hide it) is no reason.
    assert (
        judge(
            result(SingleStream(), phase(steady_ms(1200))), environment={"cpu_governor": None}
        ).reasons
        == ()
    )


def test_a_process_list_that_was_taken_outranks_the_load_average() -> None:
    # Load average is a minute's history; an empty list taken at the start is the fresher word.
    busy_then_quiet = {"load_average": [6.0, 5.0, 4.0], "cpu_threads": 2, "heavy_processes": []}
    verdict = judge(result(SingleStream(), phase(steady_ms(1200))), environment=busy_then_quiet)
    assert verdict.reasons == ()


def test_busy_processes_are_found_for_the_environment() -> None:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # let it start spinning
        found = heavy_processes(min_cpu_percent=10.0, sample_s=0.3)
    finally:
        spinner.kill()
        spinner.wait()
    assert spinner.pid in {p["pid"] for p in found}
    assert os.getpid() not in {p["pid"] for p in found}
    assert all(p["cpu_percent"] >= 10.0 for p in found)


def test_repeats_that_disagree_are_flagged_as_high_run_to_run_variation() -> None:
    rng = np.random.default_rng(1)
    spread = summarize_repetitions([rng.normal(m, 0.01, 500) for m in (1.0, 1.2, 0.85)])
    close = summarize_repetitions([rng.normal(m, 0.01, 500) for m in (1.0, 1.01, 0.99)])
    run = result(SingleStream(), phase(steady_ms(1200)))
    flagged = judge(run, repetitions=spread)
    assert flagged.codes == {ReasonCode.HIGH_RUN_TO_RUN_VARIATION}
    assert flagged.warnings[0].measured == pytest.approx(spread.median_cv)
    assert "the farthest is run 2 (+" in flagged.warnings[0].message
    assert judge(run, repetitions=close).reasons == ()


def test_the_verdict_travels_as_json_with_its_codes() -> None:
    verdict = judge(result(SingleStream(min_duration_s=0), phase(steady_ms(10))))
    document = verdict.model_dump(mode="json")
    assert document["status"] == "INVALID"
    assert {r["code"] for r in document["reasons"]} >= {"too_few_queries", "headline_is_bound"}
    assert all(r["severity"] == "error" for r in document["reasons"])
