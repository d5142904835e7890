"""A profiled pass's layers summarised: per layer, its calls over the pass's queries, their
total, mean and median time, and its share of a query's time.

A layer is a (name, op type) pair: the same node in every query of the pass. Layers keep the
order in which they first ran, so two frameworks' layers can be lined up in graph order.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Protocol

from shared.messages import LayerStat, LayerTiming

__all__ = ["MAX_LAYERS", "layer_stats"]

# Layers kept of one pass: a model with more distinct layers keeps the ones that ran first
# (the event stays a bounded size; the count of the others is kept).
MAX_LAYERS = 2_000


class _Query(Protocol):
    @property
    def start_ns(self) -> int: ...
    @property
    def end_ns(self) -> int: ...
    @property
    def layers(self) -> tuple[LayerTiming, ...]: ...


def layer_stats(queries: Sequence[_Query]) -> tuple[list[LayerStat], int]:
    """Every layer's statistics over ``queries``, in the order they first ran; and how many
    layers were left out past ``MAX_LAYERS``."""
    query_time = sum(query.end_ns - query.start_ns for query in queries)
    calls: dict[tuple[str, str], list[LayerTiming]] = {}
    for query in queries:
        for layer in query.layers:
            calls.setdefault((layer.node, layer.op_type), []).append(layer)
    stats = []
    for timings in list(calls.values())[:MAX_LAYERS]:
        first = timings[0]
        durations = [max(timing.duration_ns, 0) for timing in timings]
        total = sum(durations)
        stats.append(
            LayerStat(
                node=first.node,
                op_type=first.op_type,
                implementation=first.implementation,
                input_shapes=first.input_shapes,
                output_shapes=first.output_shapes,
                calls=len(timings),
                total_ns=total,
                mean_ns=total / len(timings),
                p50_ns=float(statistics.median(durations)),
                share=total / query_time if query_time > 0 else 0.0,
            )
        )
    return stats, max(len(calls) - MAX_LAYERS, 0)
