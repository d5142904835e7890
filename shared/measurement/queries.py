"""What a query is: the samples it uses, and the framework call on them, timed.

A driver calls ``run_query(sample_indices)`` — the framework call on pre-built inputs, given
the dataset indices of the query's samples (their count is the query's size) — and times it
with a ``perf_counter_ns`` pair around that call and nothing else. Queries walk a seeded
permutation of the dataset, as LoadGen draws sample indices from a seeded generator, so two
runs with one seed use the same samples in the same order.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["RunQuery", "SampleOrder", "timed"]

RunQuery = Callable[[Sequence[int]], object]


class SampleOrder:
    """The samples of successive queries: consecutive windows over a seeded permutation of
    the dataset, wrapping round, so a query's samples are distinct whenever it asks for no
    more than the dataset holds."""

    def __init__(self, sample_count: int, samples_per_query: int, seed: int) -> None:
        order: list[int] = np.random.default_rng(seed).permutation(sample_count).tolist()
        # Repeated so every window is one slice, however it wraps.
        self._order = order * math.ceil((sample_count + samples_per_query) / sample_count)
        self._count = sample_count
        self._width = samples_per_query
        self._start = 0

    def next(self) -> list[int]:
        start = self._start
        self._start = (start + self._width) % self._count
        return self._order[start : start + self._width]


def timed(run_query: RunQuery, next_samples: Callable[[], list[int]]) -> Callable[[], int]:
    """One query at a time, returning its latency (ns): for the cold query and the warm-up.
    The timed phases inline the same pair into their loops, saving a call per query."""
    clock = time.perf_counter_ns

    def timed_query() -> int:
        query = next_samples()
        start = clock()
        run_query(query)
        return clock() - start

    return timed_query
