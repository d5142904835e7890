"""Load generator: how much load dlscope's client offers a served model from one machine, and
how true its timing stays, against the ground-truth stub (``harness.openai_stub``, its own
process) sharing the cores. The new client (aiohttp in one uvloop event loop,
``shared.measurement.paced``) and the old (a thread a request or stream, the blocking httpx
client, ``bench/threaded_open_loop.py``, ``shared.measurement.streams``) alternate round by
round on the same stub, with ``vllm bench serve`` (from .venv-vllm, which ``make test``
builds) at each rate; each measurement runs in a fresh process of its own, so its peak memory
is its own.

1. Poisson rates (open loop; the stub answers 2 tokens, the first after 1 ms): the rate held,
   counted where the requests land (the stub's arrivals over their span, against the
   schedule's own), the client's lag (issue - scheduled) p50 / p99 / max, its CPU time a
   request, its peak memory.
2. Streams (closed loops): 64 streams of 64 tokens at 10 ms (ideal 100 requests/s: the rate
   reached, as a share of it), 256 streams against 80 ms to the first token then 20 ms a
   token (the client's TTFT and TPOT medians over the stub's own), and 1 024 and 4 096 streams
   held open on a token every 0.5 s (every token timed; peak memory). The old client's
   threads stop at 256 streams.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import percentiles
from harness.openai_stub import MODEL, StubTiming, openai_stub, stub_stats
from harness.vllm_server import CHECKPOINT, PLATFORM, VLLM

__all__ = ["run"]

RATES = (50.0, 200.0, 500.0, 1000.0, 2000.0, 3000.0)
RATE_SECONDS = 6.0
STREAMS = {
    # streams: (time to first token ms, ms a token, tokens a request)
    64: (10.0, 10.0, 64),
    256: (80.0, 20.0, 16),
    1024: (500.0, 500.0, 3),
    4096: (500.0, 500.0, 3),
}
CLIENTS = ("event loop", "threads")
VLLM_BENCH = "vllm bench serve"
THREAD_STREAMS = 256


async def run(
    scale: float = 1.0,
    *,
    rates: tuple[float, ...] = RATES,
    streams: tuple[int, ...] = tuple(STREAMS),
    rounds: int = 2,
    vllm_bench: bool = True,
) -> dict[str, Any]:
    """``scale`` multiplies each rate's duration (0.1 for a quick look); ``vllm_bench``: at
    each rate, ``vllm bench serve`` too, where ``make test`` has installed it."""
    return await asyncio.to_thread(_run, scale, rates, streams, rounds, vllm_bench)


def _run(
    scale: float,
    rates: tuple[float, ...],
    streams: tuple[int, ...],
    rounds: int,
    vllm_bench: bool,
) -> dict[str, Any]:
    seconds = max(RATE_SECONDS * scale, 0.5)
    by_rate: dict[str, Any] = {}
    clients = (*CLIENTS, VLLM_BENCH) if vllm_bench and VLLM.exists() else CLIENTS
    with openai_stub(StubTiming(ttft_ms=1.0), record_gaps=False) as (url, _):
        for rate in rates:
            runs: dict[str, list[dict[str, Any]]] = {client: [] for client in clients}
            for _ in range(rounds):
                for client in clients:
                    stub_stats(url, reset=True)
                    if client == VLLM_BENCH:
                        measured = _vllm_bench(url, rate, seconds)
                    else:
                        arguments = {"url": url, "client": client, "rate": rate, "s": seconds}
                        measured = _child(arguments)
                    measured["at_stub"] = _held(stub_stats(url)["arrivals_ns"], measured)
                    runs[client].append(measured)
            by_rate[f"{rate:g}/s"] = runs
    by_streams: dict[str, Any] = {}
    for count in streams:
        ttft, itl, tokens = STREAMS.get(count, (500.0, 500.0, 3))
        with openai_stub(StubTiming(ttft_ms=ttft, itl_ms=itl)) as (url, _):
            runs = {client: [] for client in CLIENTS}
            for _ in range(rounds):
                for client in CLIENTS:
                    if client == "threads" and count > THREAD_STREAMS:
                        continue
                    stub_stats(url, reset=True)
                    measured = _child(
                        {"url": url, "client": client, "streams": count, "tokens": tokens}
                    )
                    sent = stub_stats(url)
                    measured["stub"] = {
                        "ttft_median_ms": _median_ms(sent["ttft_ns"]),
                        "gap_median_ms": _median_ms(sent["gaps_ns"]),
                        "most_open": sent["most_open"],
                    }
                    ideal = count / ((ttft + (tokens - 1) * itl) / 1e3)
                    measured["ideal_requests_per_s"] = ideal
                    measured["share_of_ideal"] = measured["requests_per_s"] / ideal
                    for figure, truth in (("ttft", "ttft_median_ms"), ("tpot", "gap_median_ms")):
                        if measured["stub"][truth]:
                            measured[f"{figure}_over_stub"] = (
                                measured[f"{figure}_median_ms"] / measured["stub"][truth]
                            )
                    runs[client].append(measured)
            by_streams[f"{count} streams"] = {k: v for k, v in runs.items() if v}
    return {
        "stub": "harness.openai_stub (uvloop, its own process, sharing the cores)",
        "rates": by_rate,
        "streams": by_streams,
        "rounds": rounds,
    }


def _child(arguments: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.load_generator", json.dumps(arguments)],
        capture_output=True,
        check=True,
        timeout=600,
    )
    result: dict[str, Any] = json.loads(done.stdout.decode().splitlines()[-1])
    return result


def _vllm_bench(url: str, rate: float, seconds: float) -> dict[str, Any]:
    """``vllm bench serve`` at ``rate`` (Poisson) on the stub, 4 random tokens in, 2 out."""
    requests = max(int(rate * seconds), 8)
    with tempfile.TemporaryDirectory(prefix="dlscope-vllm-bench-") as folder:
        subprocess.run(
            [
                str(VLLM),
                *("bench", "serve", "--backend", "openai", "--endpoint", "/v1/completions"),
                *("--base-url", url.removesuffix("/v1"), "--model", MODEL),
                *("--tokenizer", str(CHECKPOINT), "--dataset-name", "random"),
                *("--random-input-len", "4", "--random-output-len", "2", "--ignore-eos"),
                *("--num-prompts", str(requests), "--request-rate", str(rate)),
                *("--save-result", "--result-dir", folder, "--result-filename", "r.json"),
            ],
            env={**os.environ, **PLATFORM},
            check=True,
            capture_output=True,
            timeout=900,
        )
        document = json.loads((Path(folder) / "r.json").read_text())
    return {
        "client": VLLM_BENCH,
        "requests": requests,
        "failed": requests - int(document["completed"]),
        "requests_per_s": float(document["request_throughput"]),
        # Its Poisson schedule is its own: judged against the rate asked.
        "scheduled": requests,
        "scheduled_rate_per_s": rate,
    }


def _held(arrivals: list[int], measured: dict[str, Any]) -> dict[str, Any]:
    """The rate the stub saw over the timed requests' span, against the rate the schedule
    itself asked over its own span (a Poisson schedule's realized rate is not its target)."""
    landed = sorted(arrivals)[-measured["scheduled"] :]
    span_s = (landed[-1] - landed[0]) / 1e9 if len(landed) > 1 else 0.0
    rate = (len(landed) - 1) / span_s if span_s else 0.0
    asked = measured["scheduled_rate_per_s"]
    return {"requests": len(landed), "rate_per_s": rate, "held": rate / asked if asked else 0.0}


def _median_ms(values: list[int]) -> float | None:
    return statistics.median(values) / 1e6 if values else None


# One measurement, in a process of its own.


def _measure(arguments: dict[str, Any]) -> dict[str, Any]:
    from services.workers.framework.endpoint.wire import Sampling

    rate = arguments.get("rate")
    count = int(arguments.get("streams") or 1)
    tokens = 2 if rate else int(arguments["tokens"])
    plan = _plan(rate, count, arguments.get("s", 0.0))
    cpu_before = time.process_time()
    shape = _threads if arguments["client"] == "threads" else _event_loop
    result, timed, failed, lags = shape(
        arguments["url"], plan, count, Sampling(max_tokens=tokens), 4096 if rate else count
    )
    cpu_s = time.process_time() - cpu_before
    phase = result.phases[0]
    requests = len(timed) + len(failed)
    measured: dict[str, Any] = {
        "client": arguments["client"],
        "requests": requests,
        "failed": len(failed),
        "requests_per_s": len(timed) / (phase.duration_ns / 1e9),
        "cpu_ms_per_request": cpu_s * 1e3 / max(requests, 1),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "lag" if rate else "delay": percentiles([lag / 1e6 for lag in lags] or [0.0]),
        "every_token_timed": all(len(t.chunk_ns) == tokens for t in timed),
    }
    if rate:
        scheduled = sorted(t.issued_ns - lag for t, lag in zip(timed, lags, strict=True))
        measured["scheduled"] = len(scheduled)
        span_s = (scheduled[-1] - scheduled[0]) / 1e9
        measured["scheduled_rate_per_s"] = (len(scheduled) - 1) / span_s if span_s else 0.0
    else:
        measured["ttft_median_ms"] = float(
            np.median([t.chunk_ns[0] - t.issued_ns for t in timed]) / 1e6
        )
        gaps = [b - a for t in timed for a, b in itertools.pairwise(t.chunk_ns)]
        measured["tpot_median_ms"] = float(np.median(gaps) / 1e6) if gaps else 0.0
    return measured


def _plan(rate: float | None, streams: int, seconds: float) -> Any:
    from shared.messages import Server, SingleStream, WarmupSettings

    warmup = WarmupSettings(window_queries=2, min_windows=2, max_windows=2)
    if rate:
        return Server(
            target_qps=rate,
            min_query_count=int(rate * seconds),
            min_duration_s=seconds,
            max_duration_s=seconds * 4,
            warmup=warmup,
        )
    return SingleStream(
        min_query_count=streams * 2,
        min_duration_s=0,
        max_duration_s=120,
        warmup=warmup if streams <= THREAD_STREAMS else WarmupSettings(max_windows=0),
    )


_COMMON: dict[str, Any] = {"load_ns": 0, "on_step": lambda step: None, "watch": None}


def _threads(url: str, plan: Any, streams: int, sampling: Any, connections: int) -> Any:
    """The old client: a thread a request (open loop) or a stream (closed loops)."""
    from bench.threaded_open_loop import run_open_loop
    from services.workers.framework.endpoint.client import Endpoint
    from services.workers.framework.endpoint.wire import Streamed
    from shared.measurement.streams import run_streams
    from shared.messages import Server

    with Endpoint(url, MODEL, api="completions", max_connections=min(connections, 256)) as e:

        def blocking(index: int) -> Streamed:
            return e.stream("Hello", sampling)

        if isinstance(plan, Server):
            return run_open_loop(plan, blocking, 1, **_COMMON)
        result, timed, failed = run_streams(plan, streams, blocking, 1, **_COMMON)
        return result, timed, failed, list(result.phases[0].issue_delays_ns)


def _event_loop(url: str, plan: Any, streams: int, sampling: Any, connections: int) -> Any:
    """The new client: every request a coroutine of one uvloop event loop."""
    import uvloop

    from services.workers.framework.endpoint.load import LoadClient
    from services.workers.framework.endpoint.wire import Streamed
    from shared.measurement.paced import closed_loops, open_loop
    from shared.messages import Server

    async def main() -> Any:
        async with LoadClient(url, MODEL, api="completions", max_connections=connections) as c:
            prepared = c.prepare("Hello", sampling)

            async def generate(index: int) -> Streamed:
                return await c.stream(prepared)

            if isinstance(plan, Server):
                return await open_loop(plan, generate, 1, **_COMMON)
            result, timed, failed = await closed_loops(plan, streams, generate, 1, **_COMMON)
            return result, timed, failed, list(result.phases[0].issue_delays_ns)

    return uvloop.run(main())


if __name__ == "__main__":
    print(json.dumps(_measure(json.loads(sys.argv[1]))))
