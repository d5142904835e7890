"""Concurrent streams of requests: ``concurrency`` threads, each issuing its next request the
moment its previous one completes (a closed loop per stream, as ``vllm bench serve
--max-concurrency`` or GuideLLM's concurrent profile), over one open model or one server.

The frameworks run concurrent calls on one session (ONNX Runtime's ``run`` and a TorchScript
module are safe to call from several threads), so N streams measure what N users of one
model on this machine see: each request's TTFT and TPOT under the others' load, and the
throughput they reach together. A stream has no queue: it issues a request when it is free,
so a request's scheduled time is its issue time.

The phase ends when both minimums are met (requests, duration) or at the cap; the streams
then finish what they began, and those requests count too: a request cut short would bias
the tail. The cold first request and the warm-up run one at a time, before the streams.

A request can fail (``requests.Request.failure``, a served model's): see ``requests``.

The client's own delay is kept per timed request (the phase's ``issue_delays_ns``): from its
stream's previous request being done (``Request.finished_ns``) to its issue, the time a
stream held no request in flight through the client's fault (reading the answer's end,
counting its tokens, issuing the next). A stream's first timed request has none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from shared.measurement.overhead import null_query_floor_ns
from shared.measurement.progress import OnStep, timed_queries, warming_up
from shared.measurement.readings import MachineWatch
from shared.measurement.requests import FAILURE_STREAK, R, every_request_failed, untimed_ns
from shared.measurement.warmup import warm_up
from shared.messages import (
    HarnessOverhead,
    MachineWindow,
    ScenarioResult,
    SingleStream,
    TimedPhase,
    WarmupReport,
)

__all__ = ["closed_loops_phase", "run_streams"]


def run_streams(
    plan: SingleStream,
    streams: int,
    generate: Callable[[int], R],
    prompts: int,
    *,
    load_ns: int,
    on_step: OnStep,
    watch: MachineWatch | None,
) -> tuple[ScenarioResult, list[R], list[R]]:
    """Run ``streams`` closed loops of ``generate(prompt number)``; the scenario's result
    (each request's end-to-end latency, in completion order), the timed requests in the
    same order, and the timed requests that failed."""
    clock = time.perf_counter_ns
    floor_ns = null_query_floor_ns()
    taken = iter(range(1 << 62))
    lock = threading.Lock()

    def next_prompt() -> int:
        with lock:
            return next(taken) % prompts

    def one() -> int:
        return untimed_ns(generate(next_prompt()))

    on_step(warming_up(plan, f" ({streams} streams)"))
    first_ns = one()
    warmup = warm_up(one, plan.warmup)
    on_step(timed_queries(plan, f" ({streams} streams)", plan.min_duration_s))
    done: list[R] = []
    failed: list[R] = []
    delays: list[int] = []
    streak = [0]  # failures in a row, across the streams
    stop = threading.Event()
    begin = clock()
    min_ns, max_ns = int(plan.min_duration_s * 1e9), int(plan.max_duration_s * 1e9)

    def stream() -> None:
        previous: int | None = None  # when this stream's previous request was done
        while not stop.is_set():
            generated = generate(next_prompt())
            with lock:
                if previous is not None:
                    delays.append(generated.issued_ns - previous)
                previous = generated.finished_ns
                if generated.failure is None:
                    done.append(generated)
                    streak[0] = 0
                else:
                    failed.append(generated)
                    streak[0] += 1
                elapsed = clock() - begin
                enough = len(done) >= plan.min_query_count and elapsed >= min_ns
                if enough or elapsed >= max_ns or streak[0] >= FAILURE_STREAK:
                    stop.set()

    end_window = watch() if watch is not None else None
    threads = [threading.Thread(target=stream, name=f"stream-{i}") for i in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    window = end_window() if end_window is not None else None
    if not done:
        raise every_request_failed(failed)
    phase = closed_loops_phase(
        plan,
        streams,
        done,
        delays,
        begin_ns=begin,
        first_ns=first_ns,
        warmup=warmup,
        floor_ns=floor_ns,
        window=window,
    )
    result = ScenarioResult(scenario=plan, sample_count=prompts, load_ns=load_ns, phases=(phase,))
    return result, done, failed


def closed_loops_phase(
    plan: SingleStream,
    streams: int,
    done: list[R],
    delays: list[int],
    *,
    begin_ns: int,
    first_ns: int,
    warmup: WarmupReport,
    floor_ns: float,
    window: MachineWindow | None,
) -> TimedPhase:
    """The timed phase of ``streams`` closed loops that began at ``begin_ns`` and completed
    ``done`` (sorted here by completion), each request after a stream's first ``delays``
    after its stream's previous one."""
    done.sort(key=lambda g: g.ended_ns)
    duration = done[-1].ended_ns - begin_ns
    capped = duration >= int(plan.max_duration_s * 1e9) and len(done) < plan.min_query_count
    return TimedPhase(
        samples_per_query=1,
        first_query_ns=first_ns,
        warmup=warmup,
        latencies_ns=tuple(g.ended_ns - g.issued_ns for g in done),
        duration_ns=duration,
        overhead=HarnessOverhead(
            per_query_ns=0.0,
            timer_floor_ns=floor_ns,
            method=f"not separated with {streams} concurrent streams: the generation loop's "
            "own cost per token is measured single-stream (bench/generation.py)",
        ),
        stopped_by="max_duration" if capped else "minimums",
        issue_delays_ns=tuple(delays),
        window=window,
    )
