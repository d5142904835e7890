"""The client's own lateness, and the rule the verdict holds it to.

In an open loop a request's *lag* is its issue time less its scheduled arrival; in closed
loops a request's *delay* is its issue time less the moment its stream's previous request was
done: the time the stream held nothing in flight through the client's fault. Both are kept
per timed request; a result gives their p50, p99 and max (``ClientLag``).

The rule (``judge_lag``) asks two things of the client, each with a floor of
``LAG_FLOOR_NS`` (below it, a thread's wake-up jitter is all it is):

- **Not late as a rule.** Every request's TTFT counts from its scheduled time, so a
  lateness most requests share is in every TTFT: the median lag must stay within
  ``MAX_LAG_FRACTION`` of the median TTFT. In closed loops, the median delay within that
  fraction of the median E2E, or the streams idled and the server was offered fewer than
  their load.
- **On schedule in the tail.** A late tail changes the arrival process the server is offered
  only as far as it moves arrivals against the gaps between them, and a Poisson schedule's
  own gaps vary by as much as their mean: the p99 lag must stay within the larger of that
  TTFT share and ``MAX_LAG_GAP_FRACTION`` of the mean gap between arrivals. So a well-kept
  schedule against a fast server is not condemned for a tail the schedule itself dwarfs (at
  50 requests/s, a 20 ms mean gap, a p99 of 2.9 ms is within its 5 ms), while a client that
  falls behind its arrivals is.
"""

from __future__ import annotations

import numpy as np

from shared.messages import (
    ClientCost,
    ClientLag,
    GenerationRecord,
    GenerationSummary,
    MachineWindow,
    Reason,
    ReasonCode,
)
from shared.messages.verdicts import Severity

__all__ = [
    "LAG_FLOOR_NS",
    "MAX_LAG_FRACTION",
    "MAX_LAG_GAP_FRACTION",
    "SATURATED_CORES",
    "client_cost",
    "client_lag",
    "judge_client",
    "judge_lag",
]

LAG_FLOOR_NS = 1_000_000
# A served model's client issues and reads every request from one event loop, on one thread:
# that thread busy this share of a core or more over the timed phase had no time left to be
# on time, and what limited the run may have been the client rather than the server.
SATURATED_CORES = 0.9
MAX_LAG_FRACTION = 0.05
MAX_LAG_GAP_FRACTION = 0.25

_OPEN = "issue time - scheduled time, per timed request (the client's own lag)"
_CLOSED = (
    "issue time - when the stream's previous request was done, per timed request after a "
    "stream's first (the client's own delay between two requests of a stream)"
)


def client_lag(record: GenerationRecord, issue_delays_ns: tuple[int, ...] = ()) -> ClientLag | None:
    """The client's lag (an open loop: the served record's, else ``issue_delays_ns``, the
    timed phase's) or delay (closed loops) over ``record``'s timed requests; None where the
    run kept none."""
    if record.load == "closed":
        return _summary(record.client_delay_ns, "closed", None, _CLOSED)
    served = record.served
    lags = served.client_lag_ns if served is not None and served.client_lag_ns else issue_delays_ns
    return _summary(lags, "open", _mean_gap_ms(record), _OPEN)


def client_cost(record: GenerationRecord, window: MachineWindow | None) -> ClientCost | None:
    """A served model's client's own CPU over the timed phase: its event loop's thread, which
    issued and read every timed request (``window.thread_cpu_s``; the process's figure would
    count a local server's too); None for a model run in process, whose thread is the
    model's, or where the phase kept no such window."""
    if record.served is None or window is None or window.duration_ns <= 0:
        return None
    if (cpu_s := window.thread_cpu_s) is None:
        return None
    offered = record.request_count + sum(record.served.failures.values())
    cores = cpu_s / window.duration_s
    return ClientCost(
        cpu_s=cpu_s,
        cores=cores,
        cpu_per_request_ms=cpu_s * 1e3 / offered,
        saturated=cores >= SATURATED_CORES,
    )


def judge_client(summary: GenerationSummary) -> Reason | None:
    """A warning where the client's own loop was saturated (``SATURATED_CORES``): whatever
    the lag rule says, the run measured as much of the client as of the server."""
    cost = summary.client
    if cost is None or not cost.saturated:
        return None
    return Reason(
        code=ReasonCode.CLIENT_SATURATED,
        severity=Severity.WARNING,
        message=f"the client, not the server, was the limit: it used {cost.cores:.2f} of a "
        f"core over the timed phase ({cost.cpu_per_request_ms:.2f} ms per request) from an "
        f"event loop on one thread, at least {SATURATED_CORES:.0%} of it busy, so the "
        "server was offered what the client could issue: ask a lighter load or run the "
        "client on a machine of its own",
        measured=cost.cores,
        limit=SATURATED_CORES,
    )


def _summary(
    values: list[int] | tuple[int, ...], loop: str, gap_ms: float | None, definition: str
) -> ClientLag | None:
    if not values:
        return None
    ms = np.asarray(values, dtype=np.float64) / 1e6
    return ClientLag(
        loop="closed" if loop == "closed" else "open",
        count=int(ms.size),
        p50_ms=float(np.percentile(ms, 50)),
        p99_ms=float(np.percentile(ms, 99)),
        max_ms=float(ms.max()),
        mean_gap_ms=gap_ms,
        definition=definition,
    )


def _mean_gap_ms(record: GenerationRecord) -> float | None:
    """The schedule's mean gap between arrivals over the timed phase: its span over the
    timed requests, those that failed among them."""
    scheduled = [r.scheduled_ns for r in record.requests]
    failed = sum(record.served.failures.values()) if record.served is not None else 0
    offered = record.request_count + failed
    if offered < 2 or max(scheduled) <= min(scheduled):
        return None
    return (max(scheduled) - min(scheduled)) / (offered - 1) / 1e6


def judge_lag(summary: GenerationSummary) -> Reason | None:
    """The error a late client makes of the run (the module's rule), or None."""
    lag = summary.client_lag
    if lag is None:
        return None
    floor_ms = LAG_FLOOR_NS / 1e6
    if lag.loop == "closed":
        e2e_ms = summary.e2e.percentile(0.5).value_ns / 1e6
        limit_ms = max(floor_ms, MAX_LAG_FRACTION * e2e_ms)
        if lag.p50_ms <= limit_ms:
            return None
        return _late(
            f"the streams idled between requests: p50 delay {lag.p50_ms:.2f} ms from a request "
            f"done to its stream's next, above {limit_ms:.2f} ms ({MAX_LAG_FRACTION:.0%} of the "
            "median E2E, at least 1 ms): the server was offered less than the streams' load",
            lag.p50_ms,
            limit_ms,
        )
    ttft_ms = summary.ttft.percentile(0.5).value_ns / 1e6
    systematic_ms = max(floor_ms, MAX_LAG_FRACTION * ttft_ms)
    if lag.p50_ms > systematic_ms:
        return _late(
            f"the client issued requests late: p50 lag {lag.p50_ms:.2f} ms past their scheduled "
            f"times, above {systematic_ms:.2f} ms ({MAX_LAG_FRACTION:.0%} of the median TTFT, "
            "at least 1 ms): every TTFT carries it",
            lag.p50_ms,
            systematic_ms,
        )
    gap_ms = lag.mean_gap_ms or 0.0
    tail_ms = max(systematic_ms, MAX_LAG_GAP_FRACTION * gap_ms)
    if lag.p99_ms <= tail_ms:
        return None
    return _late(
        f"the client issued requests late: p99 lag {lag.p99_ms:.2f} ms past their scheduled "
        f"times, above {tail_ms:.2f} ms (the larger of {MAX_LAG_FRACTION:.0%} of the median "
        f"TTFT, {MAX_LAG_GAP_FRACTION:.0%} of the mean gap between arrivals, "
        f"{gap_ms:.2f} ms, and 1 ms): the server was offered less than the scenario's load",
        lag.p99_ms,
        tail_ms,
    )


def _late(message: str, measured: float, limit: float) -> Reason:
    return Reason(
        code=ReasonCode.LOAD_GENERATOR_LATE,
        severity=Severity.ERROR,
        message=message,
        measured=measured,
        limit=limit,
    )
