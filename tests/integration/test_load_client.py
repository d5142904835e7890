"""The timed requests' client (``endpoint.load``) and the load shapes of one event loop
(``shared.measurement.paced``) against a real HTTP server whose timing is known: the
ground-truth stub (``harness.openai_stub``) in a process of its own.

What a user relies on: every chunk timed as the server sent it, every scheduled request sent
at its time and counted where it lands, a thousand streams held open from one thread, and
every way a request can fail kept as data with its kind."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import uvloop

from harness.llama_server import free_port
from harness.openai_stub import MODEL, StubTiming, openai_stub, stub_stats
from services.workers.framework.endpoint.load import LoadClient
from services.workers.framework.endpoint.wire import Sampling, Streamed
from shared.measurement.paced import closed_loops, open_loop
from shared.measurement.pacing import Pacer
from shared.measurement.progress import ignore_steps
from shared.messages import Server, SingleStream, WarmupSettings

T = TypeVar("T")
WARMUP = WarmupSettings(window_queries=2, min_windows=2, max_windows=2)


def paced(
    url: str,
    tokens: int,
    shape: Callable[[Callable[[int], Awaitable[Streamed]]], Awaitable[T]],
    *,
    connections: int = 64,
) -> T:
    """``shape`` over a load client of the stub at ``url``, each request asking ``tokens``."""

    async def main() -> T:
        async with LoadClient(url, MODEL, api="completions", max_connections=connections) as c:
            request = c.prepare("Hello", Sampling(max_tokens=tokens))

            async def generate(index: int) -> Streamed:
                return await c.stream(request)

            return await shape(generate)

    return uvloop.run(main())


def test_closed_loops_time_each_chunk_as_the_server_sent_it() -> None:
    streams, tokens = 16, 8
    with openai_stub(StubTiming(ttft_ms=40, itl_ms=10)) as (url, _):
        plan = SingleStream(
            min_query_count=3 * streams, min_duration_s=0.5, max_duration_s=60, warmup=WARMUP
        )
        result, timed, failed = paced(
            url,
            tokens,
            lambda generate: closed_loops(
                plan, streams, generate, 1, load_ns=0, on_step=ignore_steps, watch=None
            ),
        )
        sent = stub_stats(url)
    assert failed == []
    assert len(timed) >= 3 * streams
    assert all(len(t.chunk_ns) == tokens and t.finish_reason == "length" for t in timed)
    assert all(t.completion_tokens == tokens for t in timed)
    # What the client read agrees with what the stub sent: its time to first chunk (from the
    # request's arrival) and its gaps, within a tenth and what two shared cores add.
    ttft = statistics.median(t.chunk_ns[0] - t.issued_ns for t in timed)
    true_ttft = statistics.median(sent["ttft_ns"])
    assert true_ttft <= ttft <= 1.1 * true_ttft + 5e6, (ttft, true_ttft)
    gap = statistics.median(b - a for t in timed for a, b in itertools.pairwise(t.chunk_ns))
    true_gap = statistics.median(sent["gaps_ns"])
    assert abs(gap - true_gap) <= 0.1 * true_gap, (gap, true_gap)
    phase = result.phases[0]
    assert phase.latencies_ns == tuple(t.ended_ns - t.issued_ns for t in timed)
    assert all(delay >= 0 for delay in phase.issue_delays_ns)  # the client's own, per request
    assert len(phase.issue_delays_ns) == len(timed) - streams  # each stream's first has none


def test_the_open_loop_sends_every_request_at_its_time() -> None:
    with openai_stub(StubTiming(ttft_ms=1)) as (url, _):
        plan = Server(
            target_qps=200,
            min_query_count=300,
            min_duration_s=1.5,
            max_duration_s=30,
            warmup=WARMUP,
        )
        result, timed, failed, lags = paced(
            url,
            2,
            lambda generate: open_loop(
                plan, generate, 1, load_ns=0, on_step=ignore_steps, watch=None
            ),
        )
        arrivals = stub_stats(url)["arrivals_ns"]
    assert failed == []
    phase = result.phases[0]
    assert phase.stopped_by == "schedule"
    assert phase.unfinished_queries == 0
    assert len(timed) >= 300
    assert all(lag >= 0 for lag in lags)  # never sent before its time
    # Counted where they land: the stub saw every timed request, each after its scheduled
    # time and close to it (the same clock in both processes).
    scheduled = sorted(t.issued_ns - lag for t, lag in zip(timed, lags, strict=True))
    landed = sorted(arrivals)[-len(scheduled) :]
    assert len(landed) == len(scheduled)
    assert all(a >= s for a, s in zip(landed, scheduled, strict=True))
    assert statistics.median(a - s for a, s in zip(landed, scheduled, strict=True)) < 20e6
    assert phase.latencies_ns == tuple(
        t.ended_ns - (t.issued_ns - lag) for t, lag in zip(timed, lags, strict=True)
    )


def test_a_thousand_streams_are_held_open_at_once_from_one_thread() -> None:
    streams = 1024
    with openai_stub(StubTiming(ttft_ms=500, itl_ms=500), record_gaps=False) as (url, _):
        plan = SingleStream(
            min_query_count=streams,
            min_duration_s=0,
            max_duration_s=60,
            warmup=WarmupSettings(max_windows=0),
        )
        _, timed, failed = paced(
            url,
            3,
            lambda generate: closed_loops(
                plan, streams, generate, 1, load_ns=0, on_step=ignore_steps, watch=None
            ),
            connections=streams,
        )
        seen = stub_stats(url)
    assert failed == []
    assert seen["most_open"] == streams
    assert len(timed) >= streams
    assert all(len(t.chunk_ns) == 3 for t in timed)  # every stream's every chunk timed


def test_every_way_a_request_fails_is_kept_with_its_kind() -> None:
    def one(url: str, tokens: int = 4, **client: Any) -> Streamed:
        async def main() -> Streamed:
            async with LoadClient(url, MODEL, api="completions", **client) as c:
                return await c.stream(c.prepare("Hello", Sampling(max_tokens=tokens)))

        return uvloop.run(main())

    refused = one(f"http://127.0.0.1:{free_port()}/v1")
    assert refused.failure == "refused"
    assert refused.chunk_ns == []
    with openai_stub(StubTiming(ttft_ms=2000)) as (url, _):
        late = one(url, timeout_s=0.2)
        wrong = one(url + "/nowhere")
    assert late.failure == "timeout"
    assert wrong.failure == "http_error"
    assert wrong.cause is not None
    assert wrong.cause.startswith("HTTP 404")

    with openai_stub(StubTiming(itl_ms=100)) as (url, stub):

        def stop_at_the_second(count: int) -> None:
            if count == 2:
                stub.kill()

        async def cut_short() -> Streamed:
            async with LoadClient(url, MODEL, api="completions") as c:
                request = c.prepare("Hello", Sampling(max_tokens=100))
                return await c.stream(request, on_chunk=stop_at_the_second)

        streamed = uvloop.run(cut_short())
    assert streamed.failure == "disconnected", streamed
    assert 2 <= len(streamed.chunk_ns) < 100  # what came before is kept
    assert streamed.text.startswith("toktok")


def test_the_pacer_wakes_the_loop_at_the_time_and_never_before() -> None:
    async def late_by() -> list[int]:
        lags = []
        with Pacer() as pacer:
            for _ in range(50):
                at = time.perf_counter_ns() + 2_000_000
                await pacer.until(at)
                lags.append(time.perf_counter_ns() - at)
        return lags

    async def past() -> int:
        with Pacer() as pacer:
            began = time.perf_counter_ns()
            await pacer.until(began - 1)
            return time.perf_counter_ns() - began

    async def after_a_cancelled_wait() -> int:
        # A wait given up before its timer fires, the timer then expiring with no one
        # waiting: the next wait ends at its own time, never at the expiry left behind.
        with Pacer() as pacer:
            waiting = asyncio.ensure_future(pacer.until(time.perf_counter_ns() + 1_000_000))
            await asyncio.sleep(0)
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
            await asyncio.sleep(0.005)  # the first timer has expired, unread by a waiter
            at = time.perf_counter_ns() + 3_000_000
            await pacer.until(at)
            return time.perf_counter_ns() - at

    lags = uvloop.run(late_by())
    assert uvloop.run(after_a_cancelled_wait()) >= 0
    assert min(lags) >= 0
    assert statistics.median(lags) < 1e6  # within the millisecond a loop's timers round to
    assert uvloop.run(past()) < 1e6  # a time already gone: at once
