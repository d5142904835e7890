"""The open loop as dlscope ran it before its requests moved to one event loop
(``shared.measurement.paced``): each request at its time on a thread of its own, through the
blocking client. Kept as the baseline the benchmarks measure the new client against
(``bench/load_generator.py``, ``bench/endpoint.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from shared.measurement.overhead import null_query_floor_ns
from shared.measurement.paced import open_loop_phase
from shared.measurement.progress import OnStep, timed_queries, warming_up
from shared.measurement.readings import MachineWatch
from shared.measurement.requests import FAILURE_STREAK, R, every_request_failed, untimed_ns
from shared.measurement.server import poisson_arrivals_ns
from shared.measurement.warmup import warm_up
from shared.messages import ScenarioResult, Server

__all__ = ["MAX_IN_FLIGHT", "run_open_loop"]

# The most requests the open loop keeps in flight: beyond, a request waits for a thread and
# its lag says so.
MAX_IN_FLIGHT = 256
# The first arrival comes this long after the schedule is fixed (threads to start).
_LEAD_NS = 5_000_000
# A request goes to its thread this long before its arrival, and the thread waits, its last
# _SPIN_NS awake.
_HANDOVER_NS = 2_000_000
_SPIN_NS = 200_000


def _until(at_ns: int) -> None:
    """Sleep until ``at_ns`` (``perf_counter_ns``), the last ``_SPIN_NS`` awake: the OS wakes
    a sleeper some tens of microseconds late."""
    clock = time.perf_counter_ns
    if (left := at_ns - clock() - _SPIN_NS) > 0:
        time.sleep(left / 1e9)
    while clock() < at_ns:
        pass


def run_open_loop(
    plan: Server,
    generate: Callable[[int], R],
    prompts_count: int,
    *,
    load_ns: int,
    on_step: OnStep,
    watch: MachineWatch | None,
) -> tuple[ScenarioResult, list[R], list[R], list[int]]:
    """Poisson arrivals at ``plan.target_qps``, each request issued at its time on a thread of
    its own (at most ``MAX_IN_FLIGHT`` at once); the result (latency from the scheduled time
    to the last chunk), the timed requests in completion order, those that failed, and each
    timed request's lag (its issue - its scheduled time)."""
    clock = time.perf_counter_ns
    floor_ns = null_query_floor_ns()

    def one(i: int) -> int:
        return untimed_ns(generate(i % prompts_count))

    on_step(warming_up(plan))
    first_ns = one(0)
    counter = iter(range(1, 1 << 62))
    warmup = warm_up(lambda: one(next(counter)), plan.warmup)
    arrivals = poisson_arrivals_ns(
        plan.target_qps,
        seed=plan.seed,
        min_count=plan.min_query_count,
        min_duration_ns=int(plan.min_duration_s * 1e9),
    )
    on_step(timed_queries(plan, "", min(float(arrivals[-1]) / 1e9, plan.max_duration_s)))
    end_window = watch() if watch is not None else None
    origin = clock() + _LEAD_NS
    deadline = origin + int(plan.max_duration_s * 1e9)
    lock = threading.Lock()
    done: list[tuple[R, int]] = []
    failed: list[R] = []
    streak = [0]

    def request(i: int, scheduled: int) -> None:
        _until(scheduled)
        generated = generate(i % prompts_count)
        with lock:
            if generated.failure is None:
                done.append((generated, generated.issued_ns - scheduled))
                streak[0] = 0
            else:
                failed.append(generated)
                streak[0] += 1

    issued = 0
    with ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix="dlscope-request") as pool:
        for i, at in enumerate((arrivals + origin).tolist()):
            now = clock()
            if at > deadline or streak[0] >= FAILURE_STREAK:
                break
            # Handed to its thread ahead of its time, which waits for it there: the lag is
            # then that thread's own wake-up, not the issuer's and a hand-over besides.
            if at - _HANDOVER_NS > now:
                time.sleep((at - _HANDOVER_NS - now) / 1e9)
            pool.submit(request, i, at)
            issued += 1
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
    result = ScenarioResult(
        scenario=plan, sample_count=prompts_count, load_ns=load_ns, phases=(phase,)
    )
    return result, timed, failed, lags
