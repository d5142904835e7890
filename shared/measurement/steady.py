"""The steady-state window of a run of requests: where the client held its full load, and
what the run measured there.

A run's first requests meet an idle server and its last ones a server emptying: figures over
the whole timed phase mix that ramp-up and drain into the load named. So, as the Rust
``vllm-bench`` does, throughput and token latencies are also given over the window where the
client held its load, the ramp-up and the drain left out:

- **closed loops** of N streams: from the first moment N requests are in flight to the last
  (one stream: the whole phase);
- **an open loop**: from one median E2E after the first arrival (by Little's law the
  requests in flight reach their steady number after about one request's lifetime) to the
  last arrival (after it, the client offers nothing and the server drains).

Inside it: output tokens that came in the window over its length (a served request's
chunks weigh its tokens evenly), requests completed in it over its length, and the TTFT and
TPOT of the requests wholly inside it. A window under ``MIN_STEADY_SHARE`` of the timed phase,
or holding fewer than ``MIN_STEADY_REQUESTS`` requests and fewer than that share of the run's,
is short: the figures stand on little, and a warning says so. The whole run's figures stay
beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from shared.messages import (
    GeneratedRequest,
    GenerationRecord,
    GenerationSummary,
    LatencyStatistics,
    Reason,
    ReasonCode,
    SteadyWindow,
)
from shared.messages.verdicts import Severity

__all__ = ["MIN_STEADY_REQUESTS", "MIN_STEADY_SHARE", "judge_steady", "steady_window"]

MIN_STEADY_SHARE = 0.5
MIN_STEADY_REQUESTS = 16

Summarize = Callable[[list[float]], LatencyStatistics]


def steady_window(record: GenerationRecord, summarize: Summarize) -> SteadyWindow | None:
    """``record``'s steady-state window and its figures (``summarize`` makes the statistics
    of a list of ns); None where no load shape of requests offered them."""
    requests = record.requests
    if record.load is None or not requests:
        return None
    ends = [r.token_ns[-1] for r in requests]
    starts, begin, end, held = _window(record, ends)
    length_s = (end - begin) / 1e9
    inside = [
        r
        for r, start, stop in zip(requests, starts, ends, strict=True)
        if length_s and begin <= start and stop <= end
    ]
    share = (end - begin) / record.duration_ns
    short = share < MIN_STEADY_SHARE or len(inside) < min(
        MIN_STEADY_REQUESTS, MIN_STEADY_SHARE * len(requests)
    )
    ttft = [float(r.token_ns[0] - r.scheduled_ns) for r in inside]
    tpot = [
        (r.token_ns[-1] - r.token_ns[0]) / (r.output_tokens - 1)
        for r in inside
        if r.output_tokens > 1
    ]
    return SteadyWindow(
        start_ns=begin,
        end_ns=end,
        share=share,
        held=held,
        requests=len(inside),
        output_tokens_per_s=_tokens_in(requests, begin, end) / length_s if length_s else 0.0,
        requests_per_s=sum(begin <= e <= end for e in ends) / length_s if length_s else 0.0,
        ttft=summarize(ttft) if ttft else None,
        tpot=summarize(tpot) if tpot else None,
        short=short,
    )


def _window(record: GenerationRecord, ends: list[int]) -> tuple[list[int], int, int, str]:
    """When each request began as its load shape offered it (issued in a closed loop,
    scheduled in an open one), the window's start and end (both 0 where the client never
    held its load), and what it held, in words."""
    requests = record.requests
    if record.load == "closed":
        streams = record.streams or 1
        starts = [r.issued_ns for r in requests]
        span = _full(starts, ends, streams)
        held = f"{streams} stream{'s' * (streams != 1)} with a request in flight"
    else:
        starts = [r.scheduled_ns for r in requests]
        e2e = float(np.median([end - start for start, end in zip(starts, ends, strict=True)]))
        span = (min(starts) + int(e2e), max(starts))
        held = "arrivals on schedule, past one median E2E of ramp-up"
    if span is None or span[1] <= span[0]:
        return starts, 0, 0, held
    return starts, span[0], span[1], held


def _full(starts: Sequence[int], ends: Sequence[int], streams: int) -> tuple[int, int] | None:
    """From the first moment ``streams`` requests were in flight to the last, or None."""
    # At one instant an end is counted before a start: a stream's next request is not in
    # flight beside the one it follows.
    events = sorted([(t, 1) for t in starts] + [(t, -1) for t in ends], key=lambda e: (e[0], e[1]))
    in_flight = 0
    first: int | None = None
    last: int | None = None
    for at, change in events:
        if change < 0 and in_flight >= streams:
            last = at
        in_flight += change
        if in_flight >= streams and first is None:
            first = at
    return None if first is None or last is None else (first, last)


def _tokens_in(requests: Sequence[GeneratedRequest], begin: int, end: int) -> float:
    """The output tokens that came in [begin, end]: each request's tokens spread evenly over
    its timed chunks (one token each where every token is timed)."""
    total = 0.0
    for r in requests:
        times = np.asarray(r.token_ns, dtype=np.int64)
        within = int(np.count_nonzero((times >= begin) & (times <= end)))
        total += within * r.output_tokens / times.size
    return total


def judge_steady(summary: GenerationSummary) -> Reason | None:
    """A warning when the steady-state window is too short to stand for the load."""
    window = summary.steady
    if window is None or not window.short:
        return None
    return Reason(
        code=ReasonCode.STEADY_WINDOW_SHORT,
        severity=Severity.WARNING,
        message=f"the client held its full load ({window.held}) for "
        f"{(window.end_ns - window.start_ns) / 1e9:.2f} s, {window.share:.0%} of the timed "
        f"phase, with {window.requests} requests wholly inside (at least "
        f"{MIN_STEADY_SHARE:.0%} of the phase, and {MIN_STEADY_REQUESTS} requests or half the "
        "run's, asked for): the steady-state figures stand on little; run longer (-n, "
        "--min-duration)",
        measured=window.share,
        limit=MIN_STEADY_SHARE,
    )
