"""What a scenario run measured: raw, so every statistic can be recomputed later."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.measurement.overhead import HarnessOverhead
from shared.measurement.scenarios import Offline, ScenarioPlan, Server
from shared.measurement.statistics import LatencyStatistics, summarize_latencies
from shared.measurement.warmup import WarmupReport
from shared.measurement.window import MachineWindow

__all__ = ["ScenarioResult", "StopReason", "TimedPhase", "summarize_result"]

StopReason = Literal["minimums", "adaptive", "max_duration", "schedule", "all_samples"]

# Offline's headline is throughput; its per-batch latency percentile is reported beside it.
_OFFLINE_BATCH_PERCENTILE = 0.9


class TimedPhase(BaseModel):
    """One timed phase: the whole run, or one batch size of a sweep."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    samples_per_query: int = Field(ge=1)
    first_query_ns: int = Field(description="the cold first query, excluded from statistics")
    warmup: WarmupReport
    latencies_ns: tuple[int, ...] = Field(description="one per timed query, in issue order")
    duration_ns: int = Field(description="wall time of the timed phase")
    overhead: HarnessOverhead
    stopped_by: StopReason
    issue_delays_ns: tuple[int, ...] = Field(
        default=(), description="server: how late the load generator issued each query"
    )
    unfinished_queries: int = Field(
        default=0, ge=0, description="queries scheduled but cut off by max_duration_s"
    )
    window: MachineWindow | None = Field(
        default=None, description="what else used the machine while the phase was timed"
    )


class ScenarioResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    scenario: ScenarioPlan
    sample_count: int = Field(ge=1, description="distinct samples the queries drew from")
    load_ns: int | None = Field(default=None, description="model load time, as the caller timed it")
    phases: tuple[TimedPhase, ...] = Field(min_length=1)

    @property
    def first_inference_ns(self) -> int:
        return self.phases[0].first_query_ns


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
