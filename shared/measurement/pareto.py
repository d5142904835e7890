"""The Pareto frontier of a language model's trade-off between throughput and interactivity:
the whole system's output tokens/s against one user's (1000 / the mean time per output
token), as MLPerf Endpoints, AIPerf and vllm bench draw it. A load (or an experiment's
member) is on the frontier when no other is at least as good on both and better on one."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

from shared.messages import GenerationSummary

__all__ = ["pareto_frontier", "per_user_tokens_per_s"]

K = TypeVar("K", bound=Hashable)


def per_user_tokens_per_s(generation: GenerationSummary | None) -> float | None:
    """One user's speed while decoding: 1000 / the mean TPOT (None: no second token)."""
    if generation is None or generation.tpot is None or generation.tpot.mean_ns <= 0:
        return None
    return 1e9 / generation.tpot.mean_ns


def pareto_frontier(points: Sequence[tuple[K, float | None, float | None]]) -> set[K]:
    """The keys of the points no other point beats on both ``x`` and ``y`` (at least as high
    on both, higher on one): the trade-offs worth having. A point missing either is none."""
    known = [(key, x, y) for key, x, y in points if x is not None and y is not None]
    return {
        key
        for key, x, y in known
        if not any(
            ox >= x and oy >= y and (ox > x or oy > y) for other, ox, oy in known if other != key
        )
    }
