"""What a scenario run measured, and the statistics of each of its phases.

The result itself is raw, so every statistic can be recomputed later; it travels in the
measured event and is defined with the other wire types (``ScenarioResult``, ``TimedPhase``:
shared.messages.results). Here is the summary of it the analyzer reports.
"""

from __future__ import annotations

from shared.measurement.scenarios import Offline, Server
from shared.measurement.statistics import LatencyStatistics, summarize_latencies
from shared.messages.results import ScenarioResult, StopReason, TimedPhase

__all__ = ["ScenarioResult", "StopReason", "TimedPhase", "summarize_result"]

# Offline's headline is throughput; its per-batch latency percentile is reported beside it.
_OFFLINE_BATCH_PERCENTILE = 0.9


def summarize_result(
    result: ScenarioResult, *, confidence: float = 0.95, resamples: int = 1000
) -> tuple[LatencyStatistics, ...]:
    """Statistics of each phase, around the scenario's headline percentile."""
    scenario = result.scenario
    percentile = (
        _OFFLINE_BATCH_PERCENTILE
        if isinstance(scenario, Offline)
        else scenario.target_latency_percentile
    )
    return tuple(
        summarize_latencies(
            phase.latencies_ns,
            duration_ns=phase.duration_ns,
            samples_per_query=phase.samples_per_query,
            headline_percentile=percentile,
            open_loop=isinstance(scenario, Server),
            confidence=confidence,
            resamples=resamples,
            seed=scenario.seed,
        )
        for phase in result.phases
    )
