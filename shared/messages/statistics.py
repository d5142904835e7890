"""Latency statistics as results carry them: percentiles with their confidence intervals,
throughput, and the summary of one timed phase (``LatencyStatistics``).

The analyzer's completed event carries these, so they are part of the wire contract;
computing them from raw latencies (the bootstrap, MLPerf's early-stopping minimums) is
shared.measurement.statistics'.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from shared.values import Frozen

__all__ = ["Interval", "LatencyStatistics", "Percentile", "Throughput"]


class Interval(Frozen):
    low: float
    # None: no upper limit (a throughput whose queries vary as much as they last). JSON has
    # no infinity, and the interval travels in messages.
    high: float | None
    confidence: float

    @property
    def half_width(self) -> float:
        return math.inf if self.high is None else (self.high - self.low) / 2


class Percentile(Frozen):
    """One latency percentile. ``kind`` is "estimate" when the run had at least MLPerf's
    early-stopping minimum of queries for it, else "bound": the value is what the queries
    showed, but too few to claim it, and the true percentile may well be higher."""

    percentile: float
    value_ns: float
    kind: Literal["estimate", "bound"]
    min_queries: int
    interval: Interval | None = None


class Throughput(Frozen):
    per_s: float
    unit: Literal["samples/s"] = "samples/s"
    interval: Interval


class LatencyStatistics(Frozen):
    count: int
    samples_per_query: int
    duration_ns: int
    mean_ns: float
    std_ns: float
    cv: float
    min_ns: float
    max_ns: float
    median: Percentile
    headline: Percentile
    percentiles: tuple[Percentile, ...]
    throughput: Throughput
    # Optional, so results recorded before them read: None there.
    autocorrelation: float | None = Field(
        default=None,
        description="lag-1 autocorrelation of the values in the order they were taken "
        "(None: fewer than three, or all equal)",
    )
    effective_count: int | None = Field(
        default=None,
        description="where successive values are correlated (autocorrelation r beyond white "
        "noise's 95% band), the effective sample size n (1 - r) / (1 + r) the intervals are "
        "drawn from; None: they treat every value as independent",
    )

    def percentile(self, p: float) -> Percentile:
        for candidate in (self.headline, self.median, *self.percentiles):
            if math.isclose(candidate.percentile, p):
                return candidate
        raise KeyError(f"p{p * 100:g} was not computed")
