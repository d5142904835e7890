"""The noise probe: a small fixed workload timed before the warm-up and after the timed
queries, so a machine that changed speed under the run (a clock that dropped, a throttled
package, a neighbour that arrived on a shared core or cache) shows as a shift between the two.

The workload is the same everywhere and deterministic: sorting a fixed array of 65 536
doubles (numpy's sort, one thread: no thread pool to wake), about 2 ms on a current
server core. Each probe takes the fastest of ``REPETITIONS``: a preemption or a page fault
lengthens one repetition, not the minimum, so what moves the minimum is the machine's speed.
The verdict compares the two minimums (``validity``). What a probe records, ``NoiseProbe``,
travels in results and is defined with them (shared.messages.machine).
"""

from __future__ import annotations

import time

import numpy as np

from shared.messages.machine import PROBE_REPETITIONS, PROBE_SIZE, PROBE_WORKLOAD, NoiseProbe

__all__ = ["REPETITIONS", "WORKLOAD", "NoiseProbe", "probe_ns"]

# The workload is fixed beside the probe's record (shared.messages.machine), which names it.
REPETITIONS = PROBE_REPETITIONS
_SIZE = PROBE_SIZE
WORKLOAD = PROBE_WORKLOAD


def probe_ns(repetitions: int = REPETITIONS) -> int:
    """The fastest of ``repetitions`` runs of the fixed workload, in nanoseconds."""
    data = np.random.default_rng(0).random(_SIZE)
    clock = time.perf_counter_ns
    fastest = None
    for _ in range(repetitions):
        start = clock()
        np.sort(data)
        took = clock() - start
        fastest = took if fastest is None else min(fastest, took)
    assert fastest is not None, "at least one repetition"
    return max(fastest, 1)
