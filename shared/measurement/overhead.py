"""The harness's own cost per query, measured on every run.

Two parts. Outside the timed pair: the loop's bookkeeping between one query's end clock and
the next one's start (choosing samples, storing the latency, checking when to stop) — it
lowers throughput but not latency; it is the loop's wall time minus the sum of latencies,
per query (for the server, the delay from a query being ready and the worker free to the
framework call starting). Inside the pair: the clock read and the Python call, which every
reported latency includes; calibrated by timing a null query the same way. Both travel in
the result (``HarnessOverhead``, shared.messages.results).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

from shared.messages.results import HarnessOverhead

__all__ = ["HarnessOverhead", "null_query_floor_ns", "server_dispatch_ns"]

_CALIBRATION_QUERIES = 2000


def _null_query(_: Sequence[int]) -> None:
    return None


def null_query_floor_ns(queries: int = _CALIBRATION_QUERIES) -> float:
    """Median latency of a query that does nothing, timed exactly as the drivers time one."""
    clock = time.perf_counter_ns
    run = _null_query
    sample = [0]
    latencies = [0] * queries
    for i in range(queries):
        start = clock()
        run(sample)
        latencies[i] = clock() - start
    return float(statistics.median(latencies))


def server_dispatch_ns(
    issued_ns: Sequence[int], started_ns: Sequence[int], completed_ns: Sequence[int]
) -> float:
    """Mean delay from a query being ready (issued, and the worker done with the previous
    one) to its framework call starting: the server driver's cost per query."""
    if not started_ns:
        return 0.0
    total = 0
    previous_done = 0
    for issued, started, completed in zip(issued_ns, started_ns, completed_ns, strict=True):
        total += started - max(issued, previous_done)
        previous_done = completed
    return total / len(started_ns)
