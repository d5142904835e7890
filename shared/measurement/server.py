"""The server scenario: Poisson arrivals, issued on schedule, run one at a time.

The schedule is drawn up front from a seeded generator (exponential gaps at the target
rate), as LoadGen does, so a seed reproduces it. The worker (the caller's thread) runs the
queries in arrival order. A query's latency runs from its *scheduled* arrival to its
completion, so queueing behind slower queries counts, and so does any lateness in issuing
it: a late generator can make the result pessimistic, never flattering. How late each query
was issued is recorded so the verdict can say when the offered load was not the one asked for.

Two issuers (``Server.issuer``):

- ``thread``: LoadGen's shape. An issuing thread hands each query to the worker through a
  queue at its scheduled time. Each query then costs a thread wake-up and a GIL hand-over;
  on a loaded machine those wait for a CPU, and the issuing thread falls milliseconds behind.
- ``inline`` (default): the worker itself waits for each arrival when idle. With one worker
  running queries in order, this is exactly what a perfect issuing thread would produce (a
  query starts at the later of its arrival and the previous query's end), without the
  hand-over: on two busy cores it stays on schedule past 250 000 QPS where the thread falls
  behind somewhere between 4 000 and 16 000 (bench/server_capacity.py). A query counts as
  issued late only when the worker, idle, woke after its arrival; one arriving while the
  worker is busy is queued on time.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable

import numpy as np

from shared.measurement.overhead import HarnessOverhead, server_dispatch_ns
from shared.measurement.progress import OnStep, ignore_steps, timed_queries, warming_up
from shared.measurement.queries import RunQuery, timed
from shared.measurement.results import TimedPhase
from shared.measurement.scenarios import Server
from shared.measurement.warmup import warm_up
from shared.measurement.window import WindowWatch

__all__ = ["poisson_arrivals_ns", "run_server"]

# The first arrival is scheduled this long after the schedule is fixed, so that setting up
# (and starting the issuing thread) does not make the first queries late.
_LEAD_NS = 2_000_000


def poisson_arrivals_ns(
    target_qps: float, *, seed: int, min_count: int, min_duration_ns: int
) -> np.ndarray:
    """Arrival times (ns from the start) of a Poisson process at ``target_qps``: the first
    ``n`` arrivals, with ``n`` the smallest count that is at least ``min_count`` and spans
    ``min_duration_ns``."""
    rng = np.random.default_rng(seed)
    mean_gap_ns = 1e9 / target_qps
    expected = max(min_count, math.ceil(min_duration_ns / mean_gap_ns))
    arrivals = np.cumsum(rng.exponential(mean_gap_ns, size=expected + 16))
    while arrivals[-1] < min_duration_ns:
        more = np.cumsum(rng.exponential(mean_gap_ns, size=expected // 8 + 16))
        arrivals = np.concatenate([arrivals, arrivals[-1] + more])
    spanning = int(np.searchsorted(arrivals, min_duration_ns)) + 1
    count = max(min_count, spanning)
    return np.round(arrivals[:count]).astype(np.int64)


def run_server(
    scenario: Server,
    run_query: RunQuery,
    next_samples: Callable[[], list[int]],
    floor_ns: float,
    *,
    on_step: OnStep = ignore_steps,
    watch: WindowWatch | None = None,
) -> TimedPhase:
    clock = time.perf_counter_ns
    timed_query = timed(run_query, next_samples)
    on_step(warming_up(scenario))
    first_ns = timed_query()
    # Warm-up back to back: its purpose is to settle the model, not to rehearse the arrivals.
    warmup = warm_up(timed_query, scenario.warmup)

    arrivals = poisson_arrivals_ns(
        scenario.target_qps,
        seed=scenario.seed,
        min_count=scenario.min_query_count,
        min_duration_ns=int(scenario.min_duration_s * 1e9),
    )
    # The schedule fixes the duration: the last arrival, plus the queries still waiting.
    last_s = float(arrivals[-1]) / 1e9 if len(arrivals) else 0.0
    on_step(timed_queries(scenario, "", min(last_s, scenario.max_duration_s)))
    end_window = watch() if watch is not None else None
    origin = clock() + _LEAD_NS
    log = _Log(
        (arrivals + origin).tolist(), deadline_ns=origin + int(scenario.max_duration_s * 1e9)
    )
    if scenario.issuer == "thread":
        _run_with_issuing_thread(log, run_query, next_samples)
    else:
        _run_inline(log, run_query, next_samples)
    window = end_window() if end_window is not None else None

    done = log.done
    return TimedPhase(
        samples_per_query=1,
        first_query_ns=first_ns,
        warmup=warmup,
        latencies_ns=tuple(log.completed[i] - log.scheduled[i] for i in range(done)),
        duration_ns=(log.completed[done - 1] if done else clock()) - origin,
        overhead=HarnessOverhead(
            per_query_ns=server_dispatch_ns(
                log.issued[:done], log.started[:done], log.completed[:done]
            ),
            timer_floor_ns=floor_ns,
            method="mean delay from a query being ready (issued, worker free) to its call",
        ),
        stopped_by="max_duration" if done < len(log.scheduled) else "schedule",
        issue_delays_ns=tuple(log.issued[i] - log.scheduled[i] for i in range(done)),
        unfinished_queries=len(log.scheduled) - done,
        window=window,
    )


class _Log:
    """Per query: scheduled arrival, issue, call start and completion (perf_counter ns)."""

    def __init__(self, scheduled: list[int], *, deadline_ns: int) -> None:
        self.scheduled = scheduled
        self.deadline_ns = deadline_ns
        self.issued = [0] * len(scheduled)
        self.started = [0] * len(scheduled)
        self.completed = [0] * len(scheduled)
        self.done = 0


def _run_inline(log: _Log, run_query: RunQuery, next_samples: Callable[[], list[int]]) -> None:
    clock = time.perf_counter_ns
    sleep = time.sleep
    scheduled, issued, started, completed = log.scheduled, log.issued, log.started, log.completed
    for i, due in enumerate(scheduled):
        now = clock()
        if now < due:
            sleep((due - now) / 1e9)  # idle until the arrival; the OS wakes us a little late
            issued[i] = clock()
        else:
            issued[i] = due  # arrived while the previous query ran: queued on time
        query = next_samples()
        start = clock()
        run_query(query)
        end = clock()
        started[i] = start
        completed[i] = end
        log.done = i + 1
        if end >= log.deadline_ns:
            break


def _run_with_issuing_thread(
    log: _Log, run_query: RunQuery, next_samples: Callable[[], list[int]]
) -> None:
    clock = time.perf_counter_ns
    scheduled, issued, started, completed = log.scheduled, log.issued, log.started, log.completed
    pending: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    stop = threading.Event()

    def issue() -> None:
        sleep = time.sleep
        put = pending.put
        for i, due in enumerate(scheduled):
            now = clock()
            if now < due:
                # Sleeping, not spinning: a spinning thread would hold the GIL the worker
                # needs. The OS wakes a sleeper some tens of microseconds late; later arrivals
                # that fell due meanwhile go out at once.
                sleep((due - now) / 1e9)
                now = clock()
            if stop.is_set():
                break
            issued[i] = now
            put(i)
        put(None)

    issuer = threading.Thread(target=issue, name="dlscope-server-issuer", daemon=True)
    issuer.start()
    try:
        get = pending.get
        while (i := get()) is not None:
            query = next_samples()
            start = clock()
            run_query(query)
            end = clock()
            started[i] = start
            completed[i] = end
            log.done = i + 1
            if end >= log.deadline_ns:
                break
    finally:
        stop.set()
        issuer.join()
