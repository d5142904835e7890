"""The noise probe: a small fixed workload timed before the warm-up and after the timed
queries, so a machine that changed speed under the run (a clock that dropped, a throttled
package, a neighbour that arrived on a shared core or cache) shows as a shift between the two.

The workload is the same everywhere and deterministic: sorting a fixed array of 65 536
doubles (numpy's sort, one thread: no thread pool to wake), about 2 ms on a current
server core. Each probe takes the fastest of ``REPETITIONS``: a preemption or a page fault
lengthens one repetition, not the minimum, so what moves the minimum is the machine's speed.
The verdict compares the two minimums (``validity``).
"""

from __future__ import annotations

import time

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["REPETITIONS", "WORKLOAD", "NoiseProbe", "probe_ns"]

REPETITIONS = 11
_SIZE = 1 << 16
WORKLOAD = f"numpy sort of {_SIZE} fixed doubles, fastest of {REPETITIONS}"


class NoiseProbe(BaseModel):
    """The probe's time before the warm-up and after the timed queries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: str = WORKLOAD
    before_ns: int = Field(gt=0, description="fastest repetition before the warm-up")
    after_ns: int = Field(gt=0, description="fastest repetition after the timed queries")

    @property
    def shift(self) -> float:
        """How much slower (positive) or faster the machine ran the probe afterwards."""
        return self.after_ns / self.before_ns - 1


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
