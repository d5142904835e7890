"""Warm-up until steady state, decided from the latencies rather than assumed.

Caches, allocators, JIT compilers and CPU frequency settle at the start of a run. Rather than
trusting a fixed count, the queries run in windows; once the median of one window differs
from the previous window's by less than the threshold (relative), the model is taken as
steady. Medians, not means, so one preempted query cannot hold the warm-up open. The report
says how it was decided, so a reader can judge it; it travels in the result, and is defined
with it (``WarmupReport``, shared.messages.results).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Literal

from shared.measurement.scenarios import WarmupSettings
from shared.messages.results import WarmupReport

__all__ = ["WarmupReport", "warm_up"]


def warm_up(timed_query: Callable[[], int], settings: WarmupSettings) -> WarmupReport:
    """Run ``timed_query`` (one query; returns its latency in ns) until steady or capped."""
    if settings.max_windows == 0:
        return WarmupReport(
            latencies_ns=(),
            window_queries=settings.window_queries,
            window_medians_ns=(),
            threshold=settings.threshold,
            steady=False,
            decided_by="disabled",
            duration_ns=0,
        )
    clock = time.perf_counter_ns
    deadline_ns = int(settings.max_duration_s * 1e9)
    latencies: list[int] = []
    medians: list[float] = []
    change: float | None = None
    decided_by: Literal["steady", "max_windows", "max_duration"] = "max_windows"
    begin = clock()
    while len(medians) < settings.max_windows:
        window = [timed_query() for _ in range(settings.window_queries)]
        latencies.extend(window)
        medians.append(float(statistics.median(window)))
        if len(medians) >= 2:
            change = _relative_change(medians[-2], medians[-1])
            if len(medians) >= settings.min_windows and change < settings.threshold:
                decided_by = "steady"
                break
        if clock() - begin >= deadline_ns:
            decided_by = "max_duration"
            break
    return WarmupReport(
        latencies_ns=tuple(latencies),
        window_queries=settings.window_queries,
        window_medians_ns=tuple(medians),
        threshold=settings.threshold,
        steady=decided_by == "steady",
        decided_by=decided_by,
        last_change=change,
        duration_ns=clock() - begin,
    )


def _relative_change(previous: float, current: float) -> float:
    if previous == 0:
        return 0.0 if current == 0 else float("inf")
    return abs(current - previous) / previous
