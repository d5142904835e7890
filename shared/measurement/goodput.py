"""The goodput search: the highest load (concurrent streams) whose TTFT and TPOT meet their
bounds, found by doubling, then bisecting between the last load that met them and the first
that did not.

Each probe is judged at the bounds' percentile with its confidence interval, never on the
point value alone: it **meets** when the interval's upper end is within every bound, it
**misses** when a lower end is beyond one (or when the percentile, from too few requests to
be estimated, is already beyond: the true one is at least that), and it is **indeterminate**
otherwise: the interval straddles a bound, or too few requests make the percentile a bound
that is within it. The search stops at an indeterminate probe rather than guess, and says
where the answer lies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from shared.messages import GenerationSummary, LatencyStatistics

__all__ = ["Judgement", "Probe", "Search", "goodput_search", "judge_probe"]

Judgement = Literal["meets", "misses", "indeterminate"]


@dataclass(frozen=True)
class Probe:
    concurrency: int
    judgement: Judgement
    reason: str


@dataclass
class Search:
    """Where the search ended: ``found``, the highest load shown to meet every bound (0: not
    even one stream); ``below``, the lowest shown to miss one (None: none did, up to the
    largest tried); ``unresolved``, the load whose probe could not tell, where the search
    stopped. The highest load that meets the bounds is ``found`` exactly when ``below`` is
    ``found + 1``; otherwise it lies in [found, below)."""

    found: int = 0
    below: int | None = None
    unresolved: int | None = None
    probes: list[Probe] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return self.below is not None and self.below == self.found + 1


def _judge_metric(
    name: str, statistics: LatencyStatistics | None, bound_ms: float | None, percentile: float
) -> tuple[Judgement, str]:
    label = f"p{percentile * 100:g} {name}"
    if bound_ms is None or statistics is None:
        return "meets", ""
    found = statistics.percentile(percentile)
    value = found.value_ns / 1e6
    if found.kind == "bound":
        if value > bound_ms:
            return "misses", f"{label} ≥ {value:.1f} ms > {bound_ms:g} ms"
        return "indeterminate", (
            f"{label} {value:.1f} ms ≤ {bound_ms:g} ms from {statistics.count} requests, fewer "
            f"than the {found.min_queries} it needs"
        )
    interval = found.interval
    low = value if interval is None else interval.low / 1e6
    high = None if interval is None or interval.high is None else interval.high / 1e6
    if low > bound_ms:
        return "misses", f"{label} {value:.1f} ms, interval above {bound_ms:g} ms"
    if high is not None and high <= bound_ms:
        return "meets", f"{label} {value:.1f} ms, interval within {bound_ms:g} ms"
    return "indeterminate", f"{label} {value:.1f} ms, interval straddles {bound_ms:g} ms"


def judge_probe(
    summary: GenerationSummary,
    *,
    ttft_bound_ms: float | None,
    tpot_bound_ms: float | None,
    percentile: float,
) -> tuple[Judgement, str]:
    """One load's verdict against the bounds, and why."""
    judged = [
        _judge_metric("TTFT", summary.ttft, ttft_bound_ms, percentile),
        _judge_metric("TPOT", summary.tpot, tpot_bound_ms, percentile),
    ]
    for outcome in ("misses", "indeterminate"):
        reasons = [reason for judgement, reason in judged if judgement == outcome]
        if reasons:
            return outcome, "; ".join(reasons)
    return "meets", "; ".join(reason for _, reason in judged if reason)


def goodput_search(
    probe: Callable[[int], tuple[Judgement, str]], *, max_concurrency: int
) -> Search:
    """Double the load from 1 while it meets the bounds (up to ``max_concurrency``), then
    bisect between the last that met and the first that missed."""
    search = Search()

    def tried(concurrency: int) -> Judgement:
        judgement, reason = probe(concurrency)
        search.probes.append(Probe(concurrency, judgement, reason))
        return judgement

    concurrency = 1
    while True:
        judgement = tried(concurrency)
        if judgement == "indeterminate":
            search.unresolved = concurrency
            return search
        if judgement == "misses":
            search.below = concurrency
            break
        search.found = concurrency
        if concurrency >= max_concurrency:
            return search
        concurrency = min(concurrency * 2, max_concurrency)
    while search.below is not None and search.below - search.found > 1:
        middle = (search.found + search.below) // 2
        judgement = tried(middle)
        if judgement == "meets":
            search.found = middle
        elif judgement == "misses":
            search.below = middle
        else:
            search.unresolved = middle  # the answer lies in [found, below); this cannot tell
            return search
    return search
