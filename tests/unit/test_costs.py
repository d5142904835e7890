"""What a result cost: CPU seconds per query from the timed window, the framework process's
peak memory over the job, energy per query where a counter exists and "not measured" with
the reason where none does; and where the result, the comparison and the reports show it."""

from __future__ import annotations

import gc
import mmap
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from services.analyzer.experiments import compare
from services.analyzer.summary import summarize
from shared.measurement import ScenarioResult, SingleStream, TimedPhase
from shared.measurement.cost import (
    JobReadings,
    PeakMemory,
    PeakMemoryMark,
    peak_memory,
    reset_peak_memory,
    run_cost,
)
from shared.measurement.loadgen import LoadgenPhase, LoadgenResult
from shared.measurement.noise import SPAN_S, NoiseProbe, probe_ns
from shared.measurement.overhead import HarnessOverhead
from shared.measurement.window import MachineWindow
from shared.messages import EvaluationCompleted, EvaluationMeasured, Scenario
from tests.unit.test_experiments import MEMBERS, PLAN, completed, fold
from tests.unit.test_result_summary import WARMUP

NO_RAPL = "not measured: /sys/class/powercap does not exist (no RAPL here)"
JOB_PEAK = PeakMemory(bytes=300 * 2**20, scope="job", method="VmHWM, reset at the job's start")


def window(
    *, own_cpu_s: float, energy_j: float | None = None, other_cores: float = 0.02
) -> MachineWindow:
    return MachineWindow(
        started_at_ns=1_700_000_000_000_000_000,
        ended_at_ns=1_700_000_002_000_000_000,
        duration_ns=2_000_000_000,
        cpus=2,
        own_cpu_s=own_cpu_s,
        busy_cpu_s=own_cpu_s + other_cores * 2,
        steal_s=0.0,
        resolution_s=0.04,
        energy_j=energy_j,
        energy_source=None if energy_j is None else "RAPL package (intel-rapl:0)",
        not_exposed={} if energy_j is not None else {"energy": NO_RAPL},
    )


def test_cpu_per_query_is_the_windows_cpu_time_over_its_queries() -> None:
    cost = run_cost(window(own_cpu_s=3.6), 400, 32, JobReadings(peak_memory=JOB_PEAK))
    assert cost.cpu_s == pytest.approx(3.6)
    assert cost.cpu_s_per_query == pytest.approx(0.009)
    assert cost.samples_per_query == 32
    assert cost.peak_memory == JOB_PEAK


def test_energy_per_query_is_measured_only_where_a_counter_was_read() -> None:
    measured = run_cost(window(own_cpu_s=1.0, energy_j=40.0), 400, 1, None)
    assert measured.energy_j_per_query == pytest.approx(0.1)
    assert measured.energy_source == "RAPL package (intel-rapl:0)"
    missing = run_cost(window(own_cpu_s=1.0), 400, 1, None)
    assert missing.energy_j_per_query is None  # never an estimate in its place
    assert missing.not_measured["energy"] == NO_RAPL
    assert "no peak memory" in missing.not_measured["memory"]


def test_a_measurement_without_a_window_says_its_cost_was_not_measured() -> None:
    cost = run_cost(None, 400, 1, None)
    assert cost.cpu_s_per_query is None
    assert "no timed window was recorded" in cost.not_measured["cpu"]


def test_the_peak_is_the_jobs_own_once_the_mark_is_reset() -> None:
    ballast = np.ones(96 * 2**20 // 8)  # 96 MiB, touched
    del ballast
    # Garbage that earlier tests left (a language model's weights) must not be collected
    # between the two readings: its pages would leave the process as the 128 MiB come in.
    gc.collect()
    mark = reset_peak_memory()
    if not mark.reset:
        pytest.skip(f"this kernel refuses the reset: {mark.why}")
    small = peak_memory(mark)
    assert small.scope == "job"
    assert "VmHWM" in small.method
    # 128 MiB of new pages, each touched: mapped here rather than asked of the allocator,
    # which may hand back memory the process already holds (freed by earlier tests).
    grown = mmap.mmap(-1, 128 * 2**20)
    pages = np.frombuffer(grown, dtype=np.uint8)
    pages[:: mmap.PAGESIZE] = 1
    large = peak_memory(mark)
    del pages
    grown.close()
    assert large.bytes - small.bytes >= 120 * 2**20
    # Reset again, as the next job starts: the 128 MiB are no longer its peak.
    assert peak_memory(reset_peak_memory()).bytes < large.bytes - 100 * 2**20


def test_a_refused_reset_falls_back_to_the_peak_since_the_process_started(
    tmp_path: Path,
) -> None:
    mark = reset_peak_memory(tmp_path)  # a directory: writing it fails, as on a read-only /proc
    assert mark == PeakMemoryMark(False, mark.why)
    assert str(tmp_path) in mark.why
    peak = peak_memory(mark)
    assert peak.scope == "process"
    assert peak.method.startswith("ru_maxrss, since the framework process started")
    assert peak.bytes > 0


def test_the_noise_probe_is_a_fixed_workload_of_milliseconds() -> None:
    timings = [probe_ns() for _ in range(3)]
    assert all(0 < t < 100_000_000 for t in timings)  # under 0.1 s, even on a slow core
    probe = NoiseProbe(before_ns=2_000_000, after_ns=2_300_000)
    assert probe.shift == pytest.approx(0.15)
    assert "numpy sort" in probe.workload


def test_the_noise_probe_spans_long_enough_to_outlast_a_burst_on_a_sibling_core() -> None:
    # Its minimum is the machine's speed only if some run escaped a burst of other work:
    # however fast this core sorts, the runs together span the probe's stated span.
    began = time.perf_counter()
    probe_ns()
    assert time.perf_counter() - began >= SPAN_S
    assert f"over at least {SPAN_S * 1e3:.0f} ms" in NoiseProbe(before_ns=1, after_ns=1).workload


def phase(seen: MachineWindow | None) -> TimedPhase:
    latencies = tuple(int(v) for v in np.random.default_rng(0).normal(5e6, 1e5, 400))
    return TimedPhase(
        samples_per_query=1,
        first_query_ns=9_000_000,
        warmup=WARMUP,
        latencies_ns=latencies,
        duration_ns=sum(latencies),
        overhead=HarnessOverhead(per_query_ns=1_000.0, timer_floor_ns=100.0, method="test"),
        stopped_by="minimums",
        window=seen,
    )


def measured(seen: MachineWindow | None, readings: JobReadings | None) -> EvaluationMeasured:
    wire = Scenario(min_duration_s=0, iterations=400)
    return EvaluationMeasured(
        evaluation_id=uuid.uuid4(),
        agent_id="a",
        scenario=wire,
        load_ns=5_000_000,
        run=ScenarioResult(scenario=wire.measurement(), sample_count=100, phases=(phase(seen),)),
        machine=readings,
    )


def test_the_result_carries_the_cost_the_windows_and_the_probe() -> None:
    readings = JobReadings(
        noise=NoiseProbe(before_ns=2_400_000, after_ns=2_410_000), peak_memory=JOB_PEAK
    )
    summary = summarize(measured(window(own_cpu_s=3.6), readings))
    assert summary.machine is not None
    assert summary.machine.cost.cpu_s_per_query == pytest.approx(3.6 / 400)
    assert summary.machine.cost.peak_memory == JOB_PEAK
    assert summary.machine.cost.not_measured == {"energy": NO_RAPL}
    assert [w.other_cores for w in summary.machine.windows] == [pytest.approx(0.02)]
    assert summary.machine.noise == readings.noise
    assert summary.verdict is not None
    assert summary.verdict.status == "VALID"


def test_the_result_of_a_disturbed_run_is_invalid_and_says_by_how_much() -> None:
    readings = JobReadings(noise=NoiseProbe(before_ns=2_400_000, after_ns=4_000_000))
    summary = summarize(measured(window(own_cpu_s=2.0, other_cores=1.4), readings))
    assert summary.verdict is not None
    assert summary.verdict.status == "INVALID"
    assert {r.code for r in summary.verdict.errors} == {
        "other_processes_used_cpu",
        "noise_probe_shifted",
    }


def test_a_result_recorded_before_costs_were_has_none() -> None:
    summary = summarize(measured(None, None))
    assert summary.machine is not None
    assert summary.machine.windows == ()
    assert summary.machine.cost.cpu_s_per_query is None


def test_loadgen_results_cost_per_framework_call() -> None:
    wire = Scenario(min_duration_s=0, driver="loadgen")
    loadgen = LoadgenResult(
        scenario=SingleStream(),
        sample_count=10,
        phases=(
            LoadgenPhase(
                samples_per_query=1,
                output_dir="/tmp/x",
                first_query_ns=1,
                warmup=WARMUP,
                summary={"result": "VALID", "min_query_count": 100},
                window=window(own_cpu_s=2.5),
                framework_calls=500,
            ),
        ),
    )
    summary = summarize(
        EvaluationMeasured(
            evaluation_id=uuid.uuid4(), agent_id="a", scenario=wire, load_ns=1, loadgen=loadgen
        )
    )
    assert summary.machine is not None
    assert summary.machine.cost.queries == 500  # the calls made, not LoadGen's minimum
    assert summary.machine.cost.cpu_s_per_query == pytest.approx(0.005)


def test_the_experiment_comparison_carries_each_members_cost_and_verdict() -> None:
    disturbed = summarize(measured(window(own_cpu_s=2.0, other_cores=1.4), None))
    quiet = summarize(measured(window(own_cpu_s=3.6), JobReadings(peak_memory=JOB_PEAK)))
    first, second, third = MEMBERS
    state = fold(
        PLAN,
        EvaluationCompleted(
            evaluation_id=first.evaluation_id,
            experiment_id=PLAN.experiment_id,
            result=quiet.model_copy(
                update={"fingerprint": completed(first, 1.0).result.fingerprint}
            ),
        ),
        EvaluationCompleted(
            evaluation_id=second.evaluation_id,
            experiment_id=PLAN.experiment_id,
            result=disturbed.model_copy(
                update={"fingerprint": completed(second, 1.0).result.fingerprint}
            ),
        ),
        completed(third, 1.0),
    )
    results = {r.evaluation_id: r for r in compare(state).evaluations}
    cost = results[first.evaluation_id].cost
    assert cost is not None
    assert cost.cpu_s_per_query == pytest.approx(0.009)
    assert cost.peak_memory == JOB_PEAK
    verdict = results[second.evaluation_id].verdict
    assert verdict is not None
    assert verdict.status == "INVALID"
    assert results[third.evaluation_id].cost is None  # a summary from before costs were
