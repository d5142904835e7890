"""The goodput search: the highest load whose TTFT and TPOT meet their bounds, over
concurrent streams (``goodput_search``) or over a Poisson arrival rate (``rate_search``),
found by doubling, then bisecting between the last load that met them and the first that
did not. Streams are whole numbers, so their search ends exact; a rate is bisected until the
bracket is within a stated ``resolution`` (a fraction of the rate found).

Each probe is judged at the bounds' percentile with its confidence interval, never on the
point value alone: it **meets** when the interval's upper end is within every bound, it
**misses** when a lower end is beyond one (or when the percentile, from too few requests to
be estimated, is already beyond: the true one is at least that), and it is **indeterminate**
otherwise: the interval straddles a bound, or too few requests make the percentile a bound
that is within it. The search stops at an indeterminate probe rather than guess, and says
where the answer lies.

A probe whose run was INVALID for anything but the bounds it is judged on (other processes
on the CPUs, a late client, failed or truncated requests, too few requests: ``disturbance``)
is **disturbed**: its figures are not the load's, so the search never decides on it
silently. It measures that load once more; if the second run is disturbed too, the search
stops there as at an indeterminate probe, and the answer is uncertain, with why
(``Search.disturbed``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from shared.messages import GenerationSummary, LatencyStatistics, Reason, ReasonCode, Verdict

__all__ = [
    "Judgement",
    "Outcome",
    "Probe",
    "Search",
    "disturbance",
    "disturbing",
    "goodput_search",
    "judge_probe",
    "rate_search",
]

Judgement = Literal["meets", "misses", "indeterminate"]
# What a probe returns: its judgement and why; and why its run was disturbed, where it was.
Outcome = tuple[Judgement, str] | tuple[Judgement, str, str | None]

# The errors that judge a probe's load against its bounds, rather than disturb it.
_BOUNDS = frozenset(
    {ReasonCode.TTFT_BOUND_MISSED, ReasonCode.TPOT_BOUND_MISSED, ReasonCode.E2E_BOUND_MISSED}
)


@dataclass(frozen=True)
class Probe:
    load: float  # concurrent streams, or requests per second
    judgement: Judgement
    reason: str
    # Why its run was INVALID beyond the bounds (None: it was not), and whether it is the
    # second measurement of a load whose first was disturbed.
    disturbed: str | None = None
    remeasured: bool = False


def disturbing(verdict: Verdict | None) -> list[Reason]:
    """The errors that made a probe's run INVALID for anything but its bounds."""
    return [] if verdict is None else [r for r in verdict.errors if r.code not in _BOUNDS]


def disturbance(verdict: Verdict | None) -> str | None:
    """Why a probe's run was INVALID for anything but its bounds (the errors' codes and
    messages), or None when it was not."""
    return "; ".join(f"{r.code}: {r.message}" for r in disturbing(verdict)) or None


@dataclass
class Search:
    """Where the search ended: ``found``, the highest load shown to meet every bound (0: not
    even the smallest tried); ``below``, the lowest shown to miss one (None: none did, up to
    the largest tried); ``unresolved``, the load whose probe could not tell, where the search
    stopped. Over streams, the highest load that meets the bounds is ``found`` exactly when
    ``below`` is ``found + 1``; over a rate, ``found`` is the answer to within
    ``resolution`` when ``below`` is at most that fraction above it. Otherwise it lies in
    [found, below)."""

    found: float = 0
    below: float | None = None
    unresolved: float | None = None
    probes: list[Probe] = field(default_factory=list)
    resolution: float | None = None  # None: loads are whole streams

    @property
    def disturbed(self) -> list[Probe]:
        """The probes disturbed both times they were measured: the search stopped at the
        first, and the answer is uncertain for it."""
        return [p for p in self.probes if p.disturbed is not None and p.remeasured]

    @property
    def exact(self) -> bool:
        if self.below is None:
            return False
        if self.resolution is None:
            return self.below == self.found + 1
        return self.found > 0 and self.below <= self.found * (1 + self.resolution)


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
    e2e_bound_ms: float | None = None,
) -> tuple[Judgement, str]:
    """One load's verdict against the bounds, and why."""
    judged = [
        _judge_metric("TTFT", summary.ttft, ttft_bound_ms, percentile),
        _judge_metric("TPOT", summary.tpot, tpot_bound_ms, percentile),
        _judge_metric("E2E", summary.e2e, e2e_bound_ms, percentile),
    ]
    for outcome in ("misses", "indeterminate"):
        reasons = [reason for judgement, reason in judged if judgement == outcome]
        if reasons:
            return outcome, "; ".join(reasons)
    return "meets", "; ".join(reason for _, reason in judged if reason)


def goodput_search(probe: Callable[[int], Outcome], *, max_concurrency: int) -> Search:
    """Double the load from 1 while it meets the bounds (up to ``max_concurrency``), then
    bisect between the last that met and the first that missed."""
    search = Search()
    tried = _trying(search, lambda load: probe(int(load)))
    if _double(tried, 1, max_concurrency) == "misses":
        _bisect(
            search, tried, lambda found, below: (found + below) // 2 if below - found > 1 else None
        )
    return search


# A rate search halves the start rate at most this many times looking for one that meets.
RATE_HALVINGS = 6


def rate_search(
    probe: Callable[[float], Outcome],
    *,
    start: float,
    max_rate: float,
    resolution: float = 0.1,
) -> Search:
    """Double the Poisson rate from ``start`` while it meets the bounds (up to ``max_rate``),
    or halve it while it misses (at most ``RATE_HALVINGS`` times); then bisect between the
    last rate that met and the first that missed until they are within ``resolution`` of
    each other."""
    search = Search(resolution=resolution)
    tried = _trying(search, probe)
    if _double(tried, start, max_rate) != "misses":
        return search
    for _ in range(RATE_HALVINGS):
        if search.found > 0 or search.below is None:
            break
        if tried(search.below / 2) == "indeterminate":
            return search
    if search.found > 0:
        _bisect(
            search,
            tried,
            lambda found, below: (found + below) / 2 if below > found * (1 + resolution) else None,
        )
    return search


def _trying(search: Search, probe: Callable[[float], Outcome]) -> Callable[[float], Judgement]:
    """``probe``, each load's judgement kept in ``search``: a load that meets the bounds is
    the highest found so far, one that misses the lowest above it, one that cannot tell
    (or disturbed twice: measured again once first) where the search stops."""

    def tried(load: float) -> Judgement:
        judgement, reason, disturbed = _outcome(probe(load))
        if disturbed is not None:  # set aside, and measured once more
            search.probes.append(Probe(load, judgement, reason, disturbed))
            judgement, reason, disturbed = _outcome(probe(load))
            search.probes.append(Probe(load, judgement, reason, disturbed, remeasured=True))
        else:
            search.probes.append(Probe(load, judgement, reason))
        if disturbed is not None:
            search.unresolved = load
            return "indeterminate"
        if judgement == "meets":
            search.found = load
        elif judgement == "misses":
            search.below = load
        else:
            search.unresolved = load
        return judgement

    return tried


def _outcome(outcome: Outcome) -> tuple[Judgement, str, str | None]:
    if len(outcome) == 2:
        judgement, reason = outcome
        return judgement, reason, None
    return outcome


def _double(tried: Callable[[float], Judgement], start: float, largest: float) -> Judgement:
    """Double the load from ``start`` while it meets the bounds, up to ``largest``; the last
    judgement."""
    load = start
    while (judgement := tried(load)) == "meets" and load < largest:
        load = min(load * 2, largest)
    return judgement


def _bisect(
    search: Search,
    tried: Callable[[float], Judgement],
    middle: Callable[[float, float], float | None],
) -> None:
    """Bisect [found, below) while ``middle`` gives a load between them, until a probe cannot
    tell (the answer lies in [found, below))."""
    while search.below is not None:
        load = middle(search.found, search.below)
        if load is None or tried(load) == "indeterminate":
            return
