"""A run's verdict as results carry it: VALID or INVALID, with machine-readable reasons.

Each reason has a stable code (``ReasonCode``) and a severity: an error makes the run INVALID,
a warning questions its conditions and leaves the reader to decide. The analyzer's completed
event and an experiment's comparison carry the verdict; judging a run (the rules, their
thresholds) is shared.measurement.validity's.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from shared.values import Frozen

__all__ = ["Reason", "ReasonCode", "Severity", "Verdict"]


class ReasonCode(StrEnum):
    TOO_FEW_QUERIES = "too_few_queries"
    HEADLINE_IS_BOUND = "headline_is_bound"
    DURATION_TOO_SHORT = "duration_too_short"
    LATENCY_BOUND_MISSED = "latency_bound_missed"
    LOAD_GENERATOR_LATE = "load_generator_late"
    QUERIES_UNFINISHED = "queries_unfinished"
    QUERY_STALLED = "query_stalled"
    HIGH_RUN_TO_RUN_VARIATION = "high_run_to_run_variation"
    CPU_GOVERNOR_NOT_PERFORMANCE = "cpu_governor_not_performance"
    OTHER_HEAVY_PROCESSES = "other_heavy_processes"
    WARMUP_NOT_STEADY = "warmup_not_steady"
    HIGH_HARNESS_OVERHEAD = "high_harness_overhead"
    OTHER_PROCESSES_USED_CPU = "other_processes_used_cpu"
    CPU_STEAL = "cpu_steal"
    CPU_THROTTLED = "cpu_throttled"
    OTHER_GPU_PROCESSES = "other_gpu_processes"
    NOISE_PROBE_SHIFTED = "noise_probe_shifted"
    MEASURED_UNDER_CONTENTION = "measured_under_contention"
    TTFT_BOUND_MISSED = "ttft_bound_missed"
    TPOT_BOUND_MISSED = "tpot_bound_missed"
    E2E_BOUND_MISSED = "e2e_bound_missed"
    TOKEN_BOUND_UNPROVEN = "token_bound_unproven"
    REQUESTS_FAILED = "requests_failed"
    TOKEN_COUNTS_DISAGREE = "token_counts_disagree"
    STEADY_WINDOW_SHORT = "steady_window_short"
    CLIENT_SATURATED = "client_saturated"


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


class Reason(Frozen):
    code: ReasonCode
    severity: Severity
    message: str
    batch_size: int | None = Field(default=None, description="the sweep point it concerns")
    measured: float | None = None
    limit: float | None = None


class Verdict(Frozen):
    status: Literal["VALID", "INVALID"]
    reasons: tuple[Reason, ...]

    @property
    def errors(self) -> tuple[Reason, ...]:
        return tuple(r for r in self.reasons if r.severity is Severity.ERROR)

    @property
    def warnings(self) -> tuple[Reason, ...]:
        return tuple(r for r in self.reasons if r.severity is Severity.WARNING)

    @property
    def codes(self) -> frozenset[ReasonCode]:
        return frozenset(r.code for r in self.reasons)
