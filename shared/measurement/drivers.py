"""Scenario drivers: the same timing for every framework (see ``queries`` for what is timed).

A driver runs on the caller's thread, which must not be shared with other work (the
server scenario's threaded issuer adds a thread of its own). Every run measures the
harness's own overhead beside the latencies and, given a ``watch``, what else used the
machine during each timed loop (``window``: a snapshot just before, one just after).
"""

from __future__ import annotations

import math
import time

import numpy as np

from shared.measurement.overhead import HarnessOverhead, null_query_floor_ns
from shared.measurement.progress import (
    OnStep,
    expected_timed_s,
    ignore_steps,
    sweep_label,
    timed_queries,
    typical_ns,
    warming_up,
)
from shared.measurement.queries import RunQuery, SampleOrder, timed
from shared.measurement.results import ScenarioResult, StopReason, TimedPhase
from shared.measurement.scenarios import (
    AdaptiveStop,
    BatchSweep,
    MultiStream,
    Offline,
    ScenarioPlan,
    Server,
    SingleStream,
    check_sample_count,
)
from shared.measurement.server import run_server
from shared.measurement.statistics import (
    bootstrap_quantile,
    effective_size,
    min_queries_for_percentile,
)
from shared.measurement.warmup import warm_up
from shared.measurement.window import WindowWatch

__all__ = ["run_scenario"]

# Offline sizes its sample count from the warm-up's rate, with LoadGen's margin (it issues
# offline_expected_qps x min_duration x 1.1 samples), so a slightly slower timed phase still
# lasts the minimum duration.
_OFFLINE_MARGIN = 1.1
# Adaptive stopping re-checks the interval each time the count grows by this factor, so the
# checks (a sort each) cost a bounded multiple of one final check.
_ADAPTIVE_GROWTH = 1.1
_ADAPTIVE_RESAMPLES = 1000
_LOOP_METHOD = "timed loop wall time minus the timed pairs, per query"


def run_scenario(
    scenario: ScenarioPlan,
    run_query: RunQuery,
    *,
    sample_count: int = 1,
    load_ns: int | None = None,
    on_step: OnStep = ignore_steps,
    watch: WindowWatch | None = None,
) -> ScenarioResult:
    """Run ``scenario`` against ``run_query`` over a dataset of ``sample_count`` samples.
    ``load_ns`` is the model's load time as the caller measured it, kept with the result;
    ``on_step`` is told as each warm-up and timed phase begins; ``watch``, when given, is
    called just before each timed loop and what it returns just after, and the phase keeps
    the window it makes (what else used the machine meanwhile)."""
    check_sample_count(scenario, sample_count)
    floor_ns = null_query_floor_ns()
    phases: list[TimedPhase]
    if isinstance(scenario, SingleStream | MultiStream):
        samples = SampleOrder(sample_count, scenario.samples_per_query, scenario.seed)
        phases = [
            _closed_loop_phase(
                scenario, run_query, samples, floor_ns, scenario.samples_per_query, on_step, watch
            )
        ]
    elif isinstance(scenario, Server):
        samples = SampleOrder(sample_count, 1, scenario.seed)
        phases = [
            run_server(scenario, run_query, samples.next, floor_ns, on_step=on_step, watch=watch)
        ]
    elif isinstance(scenario, Offline):
        samples = SampleOrder(sample_count, scenario.batch_size, scenario.seed)
        phases = [_offline_phase(scenario, run_query, samples, floor_ns, on_step, watch)]
    else:
        sizes = scenario.batch_sizes
        phases = [
            _closed_loop_phase(
                scenario,
                run_query,
                SampleOrder(sample_count, batch_size, scenario.seed),
                floor_ns,
                batch_size,
                on_step,
                watch,
                sweep_label(batch_size, number, len(sizes)),
            )
            for number, batch_size in enumerate(sizes, start=1)
        ]
    return ScenarioResult(
        scenario=scenario, sample_count=sample_count, load_ns=load_ns, phases=tuple(phases)
    )


def _closed_loop_phase(
    scenario: SingleStream | MultiStream | BatchSweep,
    run_query: RunQuery,
    samples: SampleOrder,
    floor_ns: float,
    samples_per_query: int,
    on_step: OnStep,
    watch: WindowWatch | None,
    label: str = "",
) -> TimedPhase:
    """Queries back to back: each issued when the previous one completes."""
    timed_query = timed(run_query, samples.next)
    on_step(warming_up(scenario, label))
    first_ns = timed_query()
    warmup = warm_up(timed_query, scenario.warmup)
    adaptive = None if isinstance(scenario, BatchSweep) else scenario.adaptive
    expected_s = expected_timed_s(
        per_query_ns=typical_ns(warmup.latencies_ns, first_ns),
        min_queries=scenario.min_query_count,
        min_duration_s=scenario.min_duration_s,
        max_duration_s=scenario.max_duration_s,
    )
    # Adaptive stopping may go on past the minimums: the estimate is then a floor.
    on_step(timed_queries(scenario, label, expected_s))
    end_window = watch() if watch is not None else None
    latencies, duration_ns, stopped_by = _timed_loop(
        run_query,
        samples,
        min_queries=scenario.min_query_count,
        min_ns=int(scenario.min_duration_s * 1e9),
        max_ns=int(scenario.max_duration_s * 1e9),
        adaptive=adaptive,
        percentile=scenario.target_latency_percentile,
        seed=scenario.seed,
    )
    window = end_window() if end_window is not None else None
    return TimedPhase(
        samples_per_query=samples_per_query,
        first_query_ns=first_ns,
        warmup=warmup,
        latencies_ns=tuple(latencies),
        duration_ns=duration_ns,
        overhead=_loop_overhead(latencies, duration_ns, floor_ns),
        stopped_by=stopped_by,
        window=window,
    )


def _timed_loop(
    run_query: RunQuery,
    samples: SampleOrder,
    *,
    min_queries: int,
    min_ns: int,
    max_ns: int,
    adaptive: AdaptiveStop | None,
    percentile: float,
    seed: int,
) -> tuple[list[int], int, StopReason]:
    clock = time.perf_counter_ns
    next_query = samples.next
    latencies: list[int] = []
    record = latencies.append
    check_at = max(min_queries, min_queries_for_percentile(percentile) if adaptive else 1)
    stopped_by: StopReason
    begin = clock()
    while True:
        query = next_query()
        start = clock()
        run_query(query)
        end = clock()
        record(end - start)
        if end - begin >= max_ns:
            stopped_by = "max_duration"
            break
        if len(latencies) >= check_at and end - begin >= min_ns:
            if adaptive is None:
                stopped_by = "minimums"
                break
            if _narrow_enough(latencies, percentile, adaptive, seed):
                stopped_by = "adaptive"
                break
            check_at = int(len(latencies) * _ADAPTIVE_GROWTH) + 1
    return latencies, clock() - begin, stopped_by


def _narrow_enough(latencies: list[int], p: float, adaptive: AdaptiveStop, seed: int) -> bool:
    taken = np.asarray(latencies, dtype=np.float64)
    _, effective = effective_size(taken)  # correlated latencies: a wider interval, as reported
    values = np.sort(taken)
    replicates = bootstrap_quantile(
        values,
        p,
        confidence=adaptive.confidence,
        resamples=_ADAPTIVE_RESAMPLES,
        seed=seed,
        size=effective,
    )
    tail = (1 - adaptive.confidence) / 2
    low, high = np.quantile(replicates, [tail, 1 - tail])
    return bool((high - low) / 2 <= adaptive.relative_half_width * np.quantile(values, p))


def _offline_phase(
    scenario: Offline,
    run_query: RunQuery,
    samples: SampleOrder,
    floor_ns: float,
    on_step: OnStep,
    watch: WindowWatch | None,
) -> TimedPhase:
    """All samples at once, run back to back in batches; sized from the warm-up's rate."""
    timed_query = timed(run_query, samples.next)
    on_step(warming_up(scenario))
    first_ns = timed_query()
    warmup = warm_up(timed_query, scenario.warmup)
    batch_ns = typical_ns(warmup.latencies_ns, first_ns)
    expected_per_s = scenario.batch_size * 1e9 / max(batch_ns, 1)
    wanted = max(
        scenario.min_sample_count,
        math.ceil(expected_per_s * scenario.min_duration_s * _OFFLINE_MARGIN),
    )
    batches = math.ceil(wanted / scenario.batch_size)
    max_ns = int(scenario.max_duration_s * 1e9)
    on_step(timed_queries(scenario, "", min(batches * batch_ns / 1e9, scenario.max_duration_s)))

    clock = time.perf_counter_ns
    next_query = samples.next
    latencies: list[int] = []
    record = latencies.append
    stopped_by: StopReason = "all_samples"
    end_window = watch() if watch is not None else None
    begin = clock()
    for _ in range(batches):
        query = next_query()
        start = clock()
        run_query(query)
        end = clock()
        record(end - start)
        if end - begin >= max_ns:
            stopped_by = "max_duration"
            break
    duration_ns = clock() - begin
    window = end_window() if end_window is not None else None
    return TimedPhase(
        samples_per_query=scenario.batch_size,
        first_query_ns=first_ns,
        warmup=warmup,
        latencies_ns=tuple(latencies),
        duration_ns=duration_ns,
        overhead=_loop_overhead(latencies, duration_ns, floor_ns),
        stopped_by=stopped_by,
        unfinished_queries=batches - len(latencies),
        window=window,
    )


def _loop_overhead(latencies: list[int], duration_ns: int, floor_ns: float) -> HarnessOverhead:
    return HarnessOverhead(
        per_query_ns=(duration_ns - sum(latencies)) / len(latencies),
        timer_floor_ns=floor_ns,
        method=_LOOP_METHOD,
    )
