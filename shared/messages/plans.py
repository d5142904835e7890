"""The typed scenario plans the drivers run: plain data, with MLPerf LoadGen's semantics.

Each scenario is a frozen pydantic model, so it travels inside messages and HTTP bodies
unchanged and refuses impossible settings with a message naming the field. A measured result
carries the plan it ran, so the plans are part of the wire contract and live here; running
one, and whether a dataset can feed it, is shared.measurement's. The defaults follow MLPerf's
rules in shape (minimum query counts that make the headline percentile reportable, a minimum
duration, seeded schedules) but are scaled down so a default run of a 1 ms model finishes in
a few seconds: MLPerf's 600 s minimum duration and 270 336-query multi-stream minimum are for
submissions, not for everyday comparisons.
    scenario       headline                       defaults (1 ms model: wall time)
    single-stream  p90 latency                    >= 1024 queries and >= 1 s      (~1 s)
    multi-stream   p99 latency of 8-sample query  >= 662 queries and >= 1 s       (~5 s)
    server         p99 latency <= 10 ms bound     500 QPS Poisson, >= 1024 q, 1 s (~2 s)
    offline        samples/s                      >= 1024 samples in batches of 32, >= 1 s (~1 s)
    batch-sweep    p90 and samples/s per batch    1..32, >= 64 queries and >= 0.5 s each (~6 s)

The wall times take the model at ~1 ms per sample (an 8-sample query: ~8 ms). Every
scenario first warms up until steady (``WarmupSettings``: windows of 32 queries until two
medians agree within 5%, at most 20 windows or 5 s) and stops its timed phase at
``max_duration_s`` (60 s) even if a minimum is unmet, which the verdict then reports.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "AdaptiveStop",
    "BatchSweep",
    "MultiStream",
    "Offline",
    "ScenarioPlan",
    "Server",
    "SingleStream",
    "WarmupSettings",
]


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WarmupSettings(_Settings):
    """Warm up in windows of queries until the median latency of one window differs from the
    previous window's by less than ``threshold`` (relative), or a cap is reached."""

    window_queries: int = Field(default=32, ge=1, le=100_000, description="queries per window")
    threshold: float = Field(
        default=0.05, gt=0, lt=1, description="steady when consecutive medians differ by less"
    )
    min_windows: int = Field(default=2, ge=0, le=10_000)
    max_windows: int = Field(default=20, ge=0, le=10_000, description="0 disables warm-up")
    max_duration_s: float = Field(
        default=5.0, gt=0, description="warm-up stops here, steady or not"
    )

    @model_validator(mode="after")
    def _windows_in_order(self) -> Self:
        if self.max_windows and self.min_windows > self.max_windows:
            raise ValueError(
                f"min_windows ({self.min_windows}) exceeds max_windows ({self.max_windows})"
            )
        return self


class AdaptiveStop(_Settings):
    """Keep measuring past the minimums until the headline percentile's confidence interval
    is narrow enough: half-width <= ``relative_half_width`` x estimate (or ``max_duration_s``)."""

    relative_half_width: float = Field(default=0.01, gt=0, lt=1)
    confidence: float = Field(default=0.95, gt=0.5, lt=1)


class _Timed(_Settings):
    seed: int = Field(default=0, ge=0, description="seeds sample order and arrival schedule")
    min_duration_s: float = Field(default=1.0, ge=0, description="timed phase lasts at least")
    max_duration_s: float = Field(
        default=60.0, gt=0, description="cap on the timed phase, even if minimums are unmet"
    )
    warmup: WarmupSettings = Field(default_factory=WarmupSettings)

    @model_validator(mode="after")
    def _durations_in_order(self) -> Self:
        if self.min_duration_s > self.max_duration_s:
            raise ValueError(
                f"min_duration_s ({self.min_duration_s}) exceeds "
                f"max_duration_s ({self.max_duration_s})"
            )
        return self


class _LatencyBound(_Timed):
    min_query_count: int = Field(default=1024, ge=1, le=100_000_000)
    target_latency_percentile: float = Field(default=0.9, gt=0, lt=1)


class _ClosedLoop(_LatencyBound):
    adaptive: AdaptiveStop | None = Field(
        default=None, description="measure until the headline's interval is narrow enough"
    )


class SingleStream(_ClosedLoop):
    """One query of one sample at a time; the next is issued when the previous completes."""

    name: Literal["single-stream"] = "single-stream"

    @property
    def samples_per_query(self) -> int:
        return 1


class MultiStream(_ClosedLoop):
    """One query of ``samples_per_query`` samples at a time (MLPerf: 8 camera frames)."""

    name: Literal["multi-stream"] = "multi-stream"
    samples_per_query: int = Field(default=8, ge=1, le=65_536)
    # p99 needs 662 queries (see shared.measurement.statistics.min_queries_for_percentile).
    min_query_count: int = Field(default=662, ge=1, le=100_000_000)
    target_latency_percentile: float = Field(default=0.99, gt=0, lt=1)


class Server(_LatencyBound):
    """Poisson arrivals at ``target_qps``; a query's latency runs from its scheduled arrival,
    so time spent queueing behind earlier queries counts. Valid only if the
    ``target_latency_percentile`` latency stays within ``latency_bound_ms``."""

    name: Literal["server"] = "server"
    target_qps: float = Field(default=500.0, gt=0, le=10_000_000, description="mean arrival rate")
    latency_bound_ms: float = Field(default=10.0, gt=0, description="p99 must stay within")
    target_latency_percentile: float = Field(default=0.99, gt=0, lt=1)
    arrivals: Literal["poisson", "replay"] = Field(
        default="poisson",
        description="poisson: seeded Poisson arrivals at target_qps; replay: a trace's "
        "arrival times (the scenario's replay), target_qps its mean rate",
    )
    issuer: Literal["inline", "thread"] = Field(
        default="inline",
        description="thread: an issuing thread hands queries to the worker (LoadGen's shape, "
        "pays a thread hand-over per query); inline: the worker waits for each arrival itself",
    )

    @property
    def samples_per_query(self) -> int:
        return 1


class Offline(_Timed):
    """All samples issued at once; the worker runs them back to back in batches. The sample
    count is sized from the warm-up's rate so the run lasts ``min_duration_s`` (as LoadGen
    sizes it from ``offline_expected_qps``), and never below ``min_sample_count``."""

    name: Literal["offline"] = "offline"
    batch_size: int = Field(default=32, ge=1, le=65_536)
    min_sample_count: int = Field(default=1024, ge=1, le=1_000_000_000)

    @property
    def samples_per_query(self) -> int:
        return self.batch_size


class BatchSweep(_Timed):
    """Single-stream timing at each batch size in turn: latency and samples/s per size.
    ``min_duration_s`` and ``min_query_count`` apply to each batch size."""

    name: Literal["batch-sweep"] = "batch-sweep"
    batch_sizes: tuple[int, ...] = Field(default=(1, 2, 4, 8, 16, 32), min_length=1)
    min_query_count: int = Field(default=64, ge=1, le=100_000_000)
    min_duration_s: float = Field(default=0.5, ge=0)
    target_latency_percentile: float = Field(default=0.9, gt=0, lt=1)

    @model_validator(mode="after")
    def _positive_distinct_sizes(self) -> Self:
        if any(size < 1 for size in self.batch_sizes):
            raise ValueError(f"batch sizes must be >= 1, got {list(self.batch_sizes)}")
        if len(set(self.batch_sizes)) != len(self.batch_sizes):
            raise ValueError(f"batch sizes repeat: {list(self.batch_sizes)}")
        return self


ScenarioPlan = Annotated[
    SingleStream | MultiStream | Server | Offline | BatchSweep, Field(discriminator="name")
]
