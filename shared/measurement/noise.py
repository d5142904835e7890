"""The noise probe: a small fixed workload timed before the warm-up and after the timed
queries, so a machine that changed speed under the run (a clock that dropped, a throttled
package, a neighbour that arrived on a shared core or cache) shows as a shift between the two.

The workload is the same everywhere and deterministic: sorting a fixed array of 65 536
doubles (numpy's sort, one thread: no thread pool to wake), 0.25 to 2 ms on a current
server core (AVX-512 sorts fastest). Each probe takes the fastest of at least
``REPETITIONS`` runs over at least ``SPAN_S``: a preemption, a page fault or a burst on a
sibling hyperthread lengthens some runs, not the minimum, so what moves the minimum is the
machine's speed.
The verdict compares the two minimums (``validity``). What a probe records, ``NoiseProbe``,
travels in results and is defined with them (shared.messages.machine).
"""

from __future__ import annotations

import time

import numpy as np

from shared.messages.machine import (
    PROBE_REPETITIONS,
    PROBE_SIZE,
    PROBE_SPAN_S,
    PROBE_WORKLOAD,
    NoiseProbe,
)

__all__ = ["REPETITIONS", "SPAN_S", "WORKLOAD", "NoiseProbe", "probe_ns"]

# The workload is fixed beside the probe's record (shared.messages.machine), which names it.
REPETITIONS = PROBE_REPETITIONS
SPAN_S = PROBE_SPAN_S
_SIZE = PROBE_SIZE
WORKLOAD = PROBE_WORKLOAD
# However fast the core, a probe ends: 30 ms of 0.25 ms sorts is 120 runs.
_MOST_REPETITIONS = 1_000


def probe_ns(repetitions: int = REPETITIONS, span_s: float = SPAN_S) -> int:
    """The fastest run of the fixed workload, in nanoseconds, of at least ``repetitions``
    runs that together span at least ``span_s``."""
    data = np.random.default_rng(0).random(_SIZE)
    clock = time.perf_counter_ns
    began = clock()
    span_ns = span_s * 1e9
    fastest = None
    for done in range(1, _MOST_REPETITIONS + 1):
        start = clock()
        np.sort(data)
        end = clock()
        fastest = end - start if fastest is None else min(fastest, end - start)
        if done >= repetitions and end - began >= span_ns:
            break
    assert fastest is not None, "at least one repetition"
    return max(fastest, 1)
