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
from typing import Generic

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

__all__ = ["Tally", "closed_loops_phase", "run_streams"]


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
    stop = threading.Event()
    tally: Tally[R] = Tally(plan, clock())

    def stream() -> None:
        previous: int | None = None  # when this stream's previous request was done
        while not stop.is_set():
            generated = generate(next_prompt())
            with lock:
                if tally.took(generated, previous):
                    stop.set()
            previous = generated.finished_ns

    end_window = watch() if watch is not None else None
    threads = [threading.Thread(target=stream, name=f"stream-{i}") for i in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    window = end_window() if end_window is not None else None
    phase = tally.phase(streams, first_ns=first_ns, warmup=warmup, floor_ns=floor_ns, window=window)
    result = ScenarioResult(scenario=plan, sample_count=prompts, load_ns=load_ns, phases=(phase,))
    return result, tally.done, tally.failed


class Tally(Generic[R]):
    """What closed loops that began at ``begin_ns`` have come to: the timed requests done
    and failed, each one's delay after its stream's previous, and whether it is time to stop
    (both minimums met, the cap, or ``FAILURE_STREAK`` failures in a row across the streams)."""

    def __init__(self, plan: SingleStream, begin_ns: int) -> None:
        self.plan, self.begin_ns = plan, begin_ns
        self.done: list[R] = []
        self.failed: list[R] = []
        self.delays: list[int] = []
        self.streak = 0
        self._min_ns = int(plan.min_duration_s * 1e9)
        self._max_ns = int(plan.max_duration_s * 1e9)

    def took(self, generated: R, previous_ns: int | None) -> bool:
        """Count ``generated``, its stream's previous request done at ``previous_ns`` (None:
        its first); whether the loops are to stop."""
        if previous_ns is not None:
            self.delays.append(generated.issued_ns - previous_ns)
        if generated.failure is None:
            self.done.append(generated)
            self.streak = 0
        else:
            self.failed.append(generated)
            self.streak += 1
        elapsed = time.perf_counter_ns() - self.begin_ns
        enough = len(self.done) >= self.plan.min_query_count and elapsed >= self._min_ns
        return enough or elapsed >= self._max_ns or self.streak >= FAILURE_STREAK

    def phase(
        self,
        streams: int,
        *,
        first_ns: int,
        warmup: WarmupReport,
        floor_ns: float,
        window: MachineWindow | None,
    ) -> TimedPhase:
        """The timed phase of ``streams`` loops (``done`` sorted by completion); the run's
        failure when none of its requests succeeded."""
        if not self.done:
            raise every_request_failed(self.failed)
        return closed_loops_phase(
            self.plan,
            streams,
            self.done,
            self.delays,
            begin_ns=self.begin_ns,
            first_ns=first_ns,
            warmup=warmup,
            floor_ns=floor_ns,
            window=window,
        )


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
