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
from collections.abc import Awaitable, Callable
from typing import Literal

from shared.measurement.scenarios import WarmupSettings
from shared.messages.results import WarmupReport

__all__ = ["WarmupReport", "Windows", "warm_up", "warm_up_async"]


def warm_up(timed_query: Callable[[], int], settings: WarmupSettings) -> WarmupReport:
    """Run ``timed_query`` (one query; returns its latency in ns) until steady or capped."""
    windows = Windows(settings)
    while windows.open:
        windows.took([timed_query() for _ in range(settings.window_queries)])
    return windows.report()


async def warm_up_async(
    timed_query: Callable[[], Awaitable[int]], settings: WarmupSettings
) -> WarmupReport:
    """``warm_up`` for a query that is a coroutine (a request in an event loop)."""
    windows = Windows(settings)
    while windows.open:
        windows.took([await timed_query() for _ in range(settings.window_queries)])
    return windows.report()


class Windows:
    """The warm-up's windows as they are run, and when they may stop."""

    def __init__(self, settings: WarmupSettings) -> None:
        self.settings = settings
        self.latencies: list[int] = []
        self.medians: list[float] = []
        self.change: float | None = None
        self.decided_by: Literal["steady", "max_windows", "max_duration", "disabled"] = (
            "disabled" if settings.max_windows == 0 else "max_windows"
        )
        self.open = settings.max_windows > 0
        self.begin = time.perf_counter_ns()

    def took(self, window: list[int]) -> None:
        """One window's latencies; closes the warm-up once steady or capped."""
        settings, medians = self.settings, self.medians
        self.latencies.extend(window)
        medians.append(float(statistics.median(window)))
        if len(medians) >= 2:
            self.change = _relative_change(medians[-2], medians[-1])
            if len(medians) >= settings.min_windows and self.change < settings.threshold:
                self.decided_by, self.open = "steady", False
                return
        if time.perf_counter_ns() - self.begin >= int(settings.max_duration_s * 1e9):
            self.decided_by, self.open = "max_duration", False
        elif len(medians) >= settings.max_windows:
            self.open = False

    def report(self) -> WarmupReport:
        disabled = self.decided_by == "disabled"
        return WarmupReport(
            latencies_ns=tuple(self.latencies),
            window_queries=self.settings.window_queries,
            window_medians_ns=tuple(self.medians),
            threshold=self.settings.threshold,
            steady=self.decided_by == "steady",
            decided_by=self.decided_by,
            last_change=self.change,
            duration_ns=0 if disabled else time.perf_counter_ns() - self.begin,
        )


def _relative_change(previous: float, current: float) -> float:
    if previous == 0:
        return 0.0 if current == 0 else float("inf")
    return abs(current - previous) / previous
