"""Measurement shared by every framework: scenarios, their drivers, and the statistics,
validity verdicts and comparisons of the raw latencies they record.

This package is the logic. The types it produces that travel in messages (the scenario
plans, results, statistics, verdicts, costs, machine windows and noise probes) are defined in
shared.messages, the wire contract, and imported from there; each module here still names the
ones it makes, so they are reachable where they always were.

    scenarios    the scenario plans (shared.messages.plans); whether a dataset can feed one
    queries      what a query is: its samples, and the framework call ``run_query(indices)``
    drivers      run a scenario against ``run_query``: ``run_scenario``
    server       the server scenario's Poisson schedule and issuing thread
    requests     what the load shapes of requests issue: a request that may fail
    streams      concurrent closed loops of requests, a thread a stream (in-process models)
    paced        a served model's requests in one event loop: closed loops, and the open loop
                 (a Poisson schedule, each request issued at its time)
    pacing       waking an event loop at a scheduled time, to the tens of microseconds
    warmup       warm-up until steady state
    overhead     the harness's own cost per query
    results      the per-phase statistics of what a run measured
    statistics   percentiles, bootstrap intervals, MLPerf's early-stopping minimums
    validity     VALID / INVALID with machine-readable reasons
    repetitions  run-to-run variation; is a difference between two evaluations significant
    contention   other busy processes, for the environment
    window       what else used the machine during a timed window: two snapshots' arithmetic
    readings     the snapshots themselves: /proc, /sys, NVML
    noise        the noise probe, timed before the warm-up and after the timed queries
    cost         CPU s/query, peak memory, energy/query: what a result cost
    loadgen      the same scenarios through MLCommons LoadGen
"""

from shared.measurement.drivers import run_scenario
from shared.measurement.queries import RunQuery
from shared.measurement.repetitions import (
    LatencyComparison,
    RepetitionSummary,
    compare,
    summarize_repetitions,
)
from shared.measurement.results import ScenarioResult, TimedPhase, summarize_result
from shared.measurement.scenarios import (
    AdaptiveStop,
    BatchSweep,
    MultiStream,
    Offline,
    ScenarioPlan,
    Server,
    SingleStream,
    WarmupSettings,
    check_sample_count,
)
from shared.measurement.statistics import (
    LatencyStatistics,
    min_queries_for_percentile,
    summarize_latencies,
)
from shared.measurement.validity import ReasonCode, ValidityThresholds, Verdict, judge

__all__ = [
    "AdaptiveStop",
    "BatchSweep",
    "LatencyComparison",
    "LatencyStatistics",
    "MultiStream",
    "Offline",
    "ReasonCode",
    "RepetitionSummary",
    "RunQuery",
    "ScenarioPlan",
    "ScenarioResult",
    "Server",
    "SingleStream",
    "TimedPhase",
    "ValidityThresholds",
    "Verdict",
    "WarmupSettings",
    "check_sample_count",
    "compare",
    "judge",
    "min_queries_for_percentile",
    "run_scenario",
    "summarize_latencies",
    "summarize_repetitions",
    "summarize_result",
]
