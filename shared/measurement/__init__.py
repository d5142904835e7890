"""Measurement shared by every framework: scenarios, their drivers, and the statistics,
validity verdicts and comparisons of the raw latencies they record.

    scenarios    the settings of each scenario (plain data) and their validation
    queries      what a query is: its samples, and the framework call ``run_query(indices)``
    drivers      run a scenario against ``run_query``: ``run_scenario``
    server       the server scenario's Poisson schedule and issuing thread
    warmup       warm-up until steady state
    overhead     the harness's own cost per query
    results      what a run measured (raw) and its per-phase statistics
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
