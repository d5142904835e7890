"""Endpoint: what dlscope's HTTP client costs a request, and whether its open loop keeps its
schedule, against llama.cpp's real server (built by ``make test`` into .venv-llama) serving
SmolLM2-135M-Instruct.

1. Client cost. dlscope's ``Endpoint.stream`` (a clock read and a list append per chunk with
   content, the SSE parsed by its JSON) against a bare loop a user would write with httpx on
   the same pooled connection: the same request, one clock read at the first content and one
   at the end. The two alternate request by request (A B A B ...) on the same prompt, greedy,
   the length pinned, so drift on the shared machine hits both alike. Figures: each side's
   TTFT and E2E medians, and the median over rounds of dlscope's E2E / bare E2E with its 95 %
   bootstrap interval (the goal: under 1 %).
2. The open loop (``shared.measurement.paced``, a served model's server scenario) at
   several Poisson rates, past what the server can answer: every request issued at its
   arrival from one event loop. Figures per rate: the client's lag (issue - scheduled time)
   p50, p99 and max, the most requests in flight, and what the verdict rule makes of the lag.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import uvloop

from bench.common import median_ci95, percentiles
from harness.llama_server import KEY, NOT_BUILT, SERVED, SERVER_PYTHON, llama_server
from services.workers.framework.endpoint import Endpoint, Sampling
from services.workers.framework.endpoint.load import LoadClient
from services.workers.framework.endpoint.wire import Streamed, request_body
from shared.measurement.generation import LAG_FLOOR_NS, MAX_LAG_FRACTION
from shared.measurement.paced import open_loop
from shared.messages import Server, WarmupSettings

__all__ = ["run"]

TARGET_RATIO = 1.01
TOKENS = 16
ROUNDS = 40
RATES = (2.0, 8.0, 32.0)
OPEN_LOOP_REQUESTS = 48
PROMPT = "The sea is"
EOS = (0, 1, 2)


async def run(
    scale: float = 1.0, *, rates: tuple[float, ...] = RATES, url: str | None = None
) -> dict[str, Any]:
    """``scale`` multiplies the rounds and requests (0.2 for a quick look); the open loop
    runs at each of ``rates``; ``url``: the API root of a llama.cpp server already serving
    SmolLM2 to ``KEY`` as ``harness.llama_server`` starts it (one is started otherwise)."""
    return await asyncio.to_thread(_run, scale, rates, url)


def _run(scale: float, rates: tuple[float, ...], url: str | None) -> dict[str, Any]:
    if url is None and not SERVER_PYTHON.exists():
        return {"skipped": NOT_BUILT}
    load_before = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        if url is None:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="dlscope-endpoint-"))
            url, _ = stack.enter_context(llama_server(Path(folder) / "server.log"))
        client = _client_cost(url, max(4, round(ROUNDS * scale)))
        loops = {
            f"{rate:g}/s": _open_loop_lag(url, rate, max(8, round(OPEN_LOOP_REQUESTS * scale)))
            for rate in rates
        }
    return {
        "server": "llama-cpp-python 0.3.36 server, SmolLM2-135M-Instruct Q4_1, 2 threads",
        "tokens_per_request": TOKENS,
        "client_cost": client,
        "open_loop": loops,
        "target_ratio": TARGET_RATIO,
        "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]},
    }


def _client_cost(url: str, rounds: int) -> dict[str, Any]:
    sampling = Sampling(TOKENS, ignore_eos=True, eos_token_ids=EOS)
    with Endpoint(url, SERVED, api="completions", api_key=KEY) as endpoint:
        body = orjson.dumps(request_body(endpoint.model, endpoint.api, PROMPT, sampling)[1])
        bare = httpx.Client(
            base_url=endpoint.url,
            headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
            timeout=60,
        )

        def ours() -> tuple[int, int]:
            streamed = endpoint.stream(PROMPT, sampling)
            assert streamed.ok, streamed.cause
            return (
                streamed.chunk_ns[0] - streamed.issued_ns,
                streamed.chunk_ns[-1] - streamed.issued_ns,
            )

        def theirs() -> tuple[int, int]:
            start = time.perf_counter_ns()
            first = last = 0
            with bare.stream("POST", "/completions", content=body) as response:
                for line in response.iter_lines():
                    if not line.startswith("data:") or line.endswith("[DONE]"):
                        continue
                    if orjson.loads(line[5:])["choices"][0].get("text"):
                        last = time.perf_counter_ns()
                        first = first or last
            return first - start, last - start

        for _ in range(3):  # warm both paths and the connection pool
            ours()
            theirs()
        pairs = [(ours(), theirs()) for _ in range(rounds)]
        bare.close()
    ratios = [a[1] / b[1] for a, b in pairs]
    ratio = statistics.median(ratios)
    low, high = median_ci95(ratios)
    return {
        "rounds": rounds,
        "dlscope": {
            "ttft": percentiles([a[0] / 1e6 for a, _ in pairs]),
            "e2e": percentiles([a[1] / 1e6 for a, _ in pairs]),
        },
        "bare": {
            "ttft": percentiles([b[0] / 1e6 for _, b in pairs]),
            "e2e": percentiles([b[1] / 1e6 for _, b in pairs]),
        },
        "e2e_ratio_median": ratio,
        "e2e_ratio_ci95": [low, high],
        "meets_target": high <= TARGET_RATIO,
    }


def _open_loop_lag(url: str, rate: float, requests: int) -> dict[str, Any]:
    sampling = Sampling(4, ignore_eos=True, eos_token_ids=EOS)
    plan = Server(
        target_qps=rate,
        min_query_count=requests,
        min_duration_s=0,
        max_duration_s=300,
        warmup=WarmupSettings(max_windows=0),
    )
    in_flight = [0, 0]  # now, most

    async def main() -> tuple[Any, list[Streamed], list[Streamed], list[int]]:
        async with LoadClient(url, SERVED, api="completions", api_key=KEY) as client:
            request = client.prepare(PROMPT, sampling)

            async def generate(i: int) -> Streamed:
                in_flight[0] += 1
                in_flight[1] = max(in_flight)
                try:
                    return await client.stream(request)
                finally:
                    in_flight[0] -= 1

            return await open_loop(
                plan, generate, 1, load_ns=0, on_step=lambda step: None, watch=None
            )

    result, timed, failed, lags = uvloop.run(main())
    ttft_ms = sorted(
        (g.chunk_ns[0] - (g.issued_ns - lag)) / 1e6 for g, lag in zip(timed, lags, strict=True)
    )
    median_ttft_ms = ttft_ms[len(ttft_ms) // 2]
    lag = percentiles([x / 1e6 for x in lags])
    limit_ms = max(LAG_FLOOR_NS / 1e6, MAX_LAG_FRACTION * median_ttft_ms)
    return {
        "requests": len(timed),
        "failed": len(failed),
        "lag": lag,
        "most_in_flight": in_flight[1],
        "ttft_p50_ms": median_ttft_ms,
        "lag_limit_ms": limit_ms,
        "lag_within_limit": lag["p99_ms"] <= limit_ms,
        "duration_s": result.phases[0].duration_ns / 1e9,
    }
