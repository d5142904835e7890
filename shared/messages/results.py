"""What a scenario run measured, raw, as it travels in the measured event: every statistic
can be recomputed from it later.

    ScenarioResult   dlscope's drivers: per timed phase (one, or one per batch size of a
                     sweep) the cold first query, the warm-up, every timed latency, the
                     harness's own overhead and the machine window
    LoadgenResult    the same scenarios through MLCommons LoadGen: per phase, the warm-up and
                     LoadGen's parsed summary

Running the scenarios, warming up and measuring the overhead are shared.measurement's
(``drivers``, ``warmup``, ``overhead``, ``loadgen``); here is only what they record.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.messages.machine import MachineWindow
from shared.messages.plans import ScenarioPlan

__all__ = [
    "HarnessOverhead",
    "LoadgenPhase",
    "LoadgenResult",
    "ScenarioResult",
    "StopReason",
    "TimedPhase",
    "WarmupReport",
]

# Why a timed phase ended: its minimums met, its adaptive interval narrow enough, its
# max_duration_s cap, a server's schedule issued to the end, or offline's samples all run.
StopReason = Literal["minimums", "adaptive", "max_duration", "schedule", "all_samples"]


class WarmupReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    latencies_ns: tuple[int, ...]
    window_queries: int
    window_medians_ns: tuple[float, ...]
    threshold: float
    steady: bool
    decided_by: Literal["steady", "max_windows", "max_duration", "disabled"]
    last_change: float | None = None
    duration_ns: int


class HarnessOverhead(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    per_query_ns: float = Field(description="time per query outside the framework call")
    timer_floor_ns: float = Field(
        description="median latency of a null query: the harness's part of every latency"
    )
    method: str = Field(description="how per_query_ns was measured")


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
        default=(),
        description="server: how late the load generator issued each query; closed-loop "
        "streams: each request's issue after its stream's previous one was done",
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


class LoadgenPhase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    samples_per_query: int
    output_dir: str
    first_query_ns: int
    warmup: WarmupReport
    summary: dict[str, Any] = Field(description="parse_summary of mlperf_log_summary.txt")
    window: MachineWindow | None = Field(
        default=None, description="what else used the machine while LoadGen ran the test"
    )
    framework_calls: int | None = Field(
        default=None, description="framework calls the test made (dlscope's queries)"
    )

    @property
    def valid(self) -> bool:
        return self.summary.get("result") == "VALID"


class LoadgenResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    scenario: ScenarioPlan
    sample_count: int
    load_ns: int | None = None
    phases: tuple[LoadgenPhase, ...]

    @property
    def valid(self) -> bool:
        return all(phase.valid for phase in self.phases)
