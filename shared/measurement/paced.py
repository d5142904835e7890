"""The load shapes of a served model's requests, in one event loop: each request a coroutine
(``generate(i)``, an asynchronous HTTP request), so thousands are in flight from one thread
at the cost of their bytes, where a thread each cost a stack and a scheduler's turn.

- **Closed loops** (``closed_loops``): ``streams`` streams, each issuing its next request the
  moment its previous one completes (``vllm bench serve --max-concurrency``, GuideLLM's
  concurrent profile), up to ``MAX_STREAMS``. Each timed request after a stream's first
  keeps the client's delay before it (its issue - its stream's previous request done), as
  the threaded streams do (``streams``).
- **The open loop** (``open_loop``): Poisson arrivals at the target rate, each request
  issued at its time whatever is in flight, so the server sees the offered load; its lag
  (issue - scheduled time) measured for every request. The issuer waits on a timer file
  descriptor (``pacing``), tens of microseconds late rather than the loop's milliseconds.
  At most ``MAX_IN_FLIGHT`` are in flight: beyond, a request waits for one to end and its
  lag says so (the client's queue time is in it).

The cold first request and the warm-up come first, one at a time; the phase ends as the
threaded shapes' do (``streams``, ``requests``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from shared.measurement.overhead import null_query_floor_ns
from shared.measurement.pacing import Pacer, no_full_collections
from shared.measurement.progress import OnStep, timed_queries, warming_up
from shared.measurement.readings import MachineWatch
from shared.measurement.requests import FAILURE_STREAK, R, every_request_failed, untimed_ns
from shared.measurement.server import poisson_arrivals_ns
from shared.measurement.streams import Tally
from shared.measurement.warmup import warm_up_async
from shared.messages import (
    HarnessOverhead,
    MachineWindow,
    ScenarioResult,
    Server,
    SingleStream,
    TimedPhase,
    WarmupReport,
)

__all__ = [
    "MAX_IN_FLIGHT",
    "MAX_STREAMS",
    "Generate",
    "closed_loops",
    "open_loop",
    "open_loop_phase",
]

Generate = Callable[[int], Awaitable[R]]

MAX_STREAMS = 4096
MAX_IN_FLIGHT = 4096
# The first arrival comes this long after the schedule is fixed.
_LEAD_NS = 5_000_000


async def closed_loops(
    plan: SingleStream,
    streams: int,
    generate: Generate[R],
    prompts: int,
    *,
    load_ns: int,
    on_step: OnStep,
    watch: MachineWatch | None,
) -> tuple[ScenarioResult, list[R], list[R]]:
    """``streams`` closed loops of ``generate(prompt number)``: the scenario's result, the
    timed requests in completion order, and those that failed (``streams.run_streams``)."""
    clock = time.perf_counter_ns
    floor_ns = null_query_floor_ns()
    taken = itertools.count()

    async def one() -> int:
        return untimed_ns(await generate(next(taken) % prompts))

    on_step(warming_up(plan, f" ({streams} streams)"))
    first_ns = await one()
    warmup = await warm_up_async(one, plan.warmup)
    on_step(timed_queries(plan, f" ({streams} streams)", plan.min_duration_s))
    stop = False
    end_window = watch() if watch is not None else None
    tally: Tally[R] = Tally(plan, clock())

    async def stream() -> None:
        nonlocal stop
        previous: int | None = None  # when this stream's previous request was done
        while not stop:
            generated = await generate(next(taken) % prompts)
            stop = tally.took(generated, previous) or stop
            previous = generated.finished_ns

    with no_full_collections():
        await asyncio.gather(*(stream() for _ in range(streams)))
    window = end_window() if end_window is not None else None
    phase = tally.phase(streams, first_ns=first_ns, warmup=warmup, floor_ns=floor_ns, window=window)
    result = ScenarioResult(scenario=plan, sample_count=prompts, load_ns=load_ns, phases=(phase,))
    return result, tally.done, tally.failed


async def open_loop(
    plan: Server,
    generate: Generate[R],
    prompts: int,
    *,
    load_ns: int,
    on_step: OnStep,
    watch: MachineWatch | None,
    max_in_flight: int = MAX_IN_FLIGHT,
    arrivals_ns: Sequence[int] | None = None,
) -> tuple[ScenarioResult, list[R], list[R], list[int]]:
    """Poisson arrivals at ``plan.target_qps`` (or ``arrivals_ns``, a replayed trace's, each
    timed request ``i`` taking prompt ``i``), each request issued at its time (at most
    ``max_in_flight`` at once); the result (latency from the scheduled time to the last
    chunk), the timed requests in completion order, those that failed, and each timed
    request's lag (its issue - its scheduled time)."""
    clock = time.perf_counter_ns
    floor_ns = null_query_floor_ns()
    counter = itertools.count(1)

    async def one(i: int) -> int:
        return untimed_ns(await generate(i % prompts))

    on_step(warming_up(plan))
    first_ns = await one(0)
    warmup = await warm_up_async(lambda: one(next(counter)), plan.warmup)
    arrivals = (
        poisson_arrivals_ns(
            plan.target_qps,
            seed=plan.seed,
            min_count=plan.min_query_count,
            min_duration_ns=int(plan.min_duration_s * 1e9),
        )
        if arrivals_ns is None
        else np.asarray(arrivals_ns, dtype=np.int64)
    )
    on_step(timed_queries(plan, "", min(float(arrivals[-1]) / 1e9, plan.max_duration_s)))
    done: list[tuple[R, int]] = []
    failed: list[R] = []
    streak = 0
    slots = asyncio.Semaphore(max_in_flight)
    in_flight: set[asyncio.Task[None]] = set()

    async def request(i: int, scheduled: int) -> None:
        nonlocal streak
        try:
            generated = await generate(i % prompts)
        finally:
            slots.release()
        if generated.failure is None:
            done.append((generated, generated.issued_ns - scheduled))
            streak = 0
        else:
            failed.append(generated)
            streak += 1

    end_window = watch() if watch is not None else None
    origin = clock() + _LEAD_NS
    deadline = origin + int(plan.max_duration_s * 1e9)
    issued = 0
    with Pacer() as pacer, no_full_collections():
        for i, at in enumerate((arrivals + origin).tolist()):
            if at > deadline or streak >= FAILURE_STREAK:
                break
            await pacer.until(at)
            await slots.acquire()  # at the cap: the request waits, and its lag says so
            task = asyncio.create_task(request(i, at))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            issued += 1
        await asyncio.gather(*in_flight)
    window = end_window() if end_window is not None else None
    if not done:
        raise every_request_failed(failed)
    phase, timed, lags = open_loop_phase(
        done,
        scheduled=len(arrivals),
        issued=issued,
        origin_ns=origin,
        first_ns=first_ns,
        warmup=warmup,
        floor_ns=floor_ns,
        window=window,
    )
    result = ScenarioResult(scenario=plan, sample_count=prompts, load_ns=load_ns, phases=(phase,))
    return result, timed, failed, lags


def open_loop_phase(
    done: list[tuple[R, int]],
    *,
    scheduled: int,
    issued: int,
    origin_ns: int,
    first_ns: int,
    warmup: WarmupReport,
    floor_ns: float,
    window: MachineWindow | None,
) -> tuple[TimedPhase, list[R], list[int]]:
    """The timed phase of an open loop whose schedule began at ``origin_ns``, ``issued`` of
    its ``scheduled`` requests sent, and the ones ``done`` with their lags; with them in
    completion order, and their lags in the same order."""
    done.sort(key=lambda d: d[0].ended_ns)
    timed = [g for g, _ in done]
    lags = [lag for _, lag in done]
    phase = TimedPhase(
        samples_per_query=1,
        first_query_ns=first_ns,
        warmup=warmup,
        latencies_ns=tuple(g.ended_ns - (g.issued_ns - lag) for g, lag in done),
        duration_ns=timed[-1].ended_ns - origin_ns,
        overhead=HarnessOverhead(
            per_query_ns=float(np.mean(lags)),
            timer_floor_ns=floor_ns,
            method="the client's mean lag: a request's issue time - its scheduled arrival",
        ),
        stopped_by="schedule" if issued == scheduled else "max_duration",
        issue_delays_ns=tuple(lags),
        unfinished_queries=scheduled - issued,
        window=window,
    )
    return phase, timed, lags
