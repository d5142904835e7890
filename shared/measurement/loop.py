"""The single-stream timing loop, the same for every framework.

It runs on a thread of its own (never beside other coroutines), times each query with a
``perf_counter_ns`` pair around the framework call only, and keeps every raw latency.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Measurement", "measure"]


@dataclass(frozen=True)
class Measurement:
    first_inference_ns: int
    warmup_latencies_ns: list[int]
    latencies_ns: list[int]
    duration_ns: int


def measure(run_query: Callable[[], object], *, warmup: int, iterations: int) -> Measurement:
    """Time one cold query, ``warmup`` untimed-for-statistics queries, then ``iterations``."""
    clock = time.perf_counter_ns
    start = clock()
    run_query()
    first = clock() - start

    warmup_latencies = [0] * warmup
    for i in range(warmup):
        start = clock()
        run_query()
        warmup_latencies[i] = clock() - start

    latencies = [0] * iterations
    loop_start = clock()
    for i in range(iterations):
        start = clock()
        run_query()
        latencies[i] = clock() - start
    duration = clock() - loop_start
    return Measurement(first, warmup_latencies, latencies, duration)
