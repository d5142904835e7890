"""The harness's own limits, measured with a null model (a framework call that does nothing).

Harness overhead: single-stream, the time per query spent outside the framework call (the
loop's wall time minus the timed pairs, per query) plus the timer floor (what a null call
measures inside the pair, so part of every latency). Server capacity: the highest Poisson
arrival rate one process sustains while the run stays VALID (p99 within the 10 ms bound, no
more than 1% of queries issued over 1 ms late, every query finished). The search doubles the
rate from 2 000 QPS until a rate is INVALID, then bisects between the last valid rate and it.
A rate counts as sustained if one of up to three runs at it is VALID: on a shared machine a
neighbour's burst can spoil one run, and it is the harness's capacity being measured, not the
neighbours'; every run is reported. Both issuers are measured (see shared/measurement/
server.py): inline, where the worker waits for each arrival itself, and thread, LoadGen's
shape, where an issuing thread hands each query over through a queue and a thread wake-up.
The machine's load (recorded with the result) shows in how late queries are issued.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from shared.measurement import Server, SingleStream, judge, run_scenario, summarize_result
from shared.measurement.contention import heavy_processes

__all__ = ["Search", "run"]

START_QPS = 2_000
MAX_QPS = 1_024_000
BISECT_STEPS = 3
ATTEMPTS = 3
TRIAL_S = 1.0


@dataclass(frozen=True)
class Search:
    """How far the capacity search goes, and how long each of its trials runs."""

    start_qps: int = START_QPS
    max_qps: int = MAX_QPS
    bisect_steps: int = BISECT_STEPS
    attempts: int = ATTEMPTS
    trial_s: float = TRIAL_S


async def run(
    search: Search | None = None, *, overhead_queries: int = 200_000, overhead_s: float = 2.0
) -> dict[str, Any]:
    """The null model's harness overhead over ``overhead_queries`` queries and at least
    ``overhead_s`` seconds, then the capacity ``search`` (``Search()``) of each issuer."""
    return await asyncio.to_thread(_measure, search or Search(), overhead_queries, overhead_s)


def _measure(search: Search, overhead_queries: int, overhead_s: float) -> dict[str, Any]:
    machine = {"load_average": os.getloadavg(), "heavy_processes": heavy_processes()}
    return {
        "machine_at_start": machine,
        "harness_overhead": _harness_overhead(overhead_queries, overhead_s),
        "server_capacity": {issuer: _capacity(issuer, search) for issuer in ("inline", "thread")},
        "targets": {"harness_overhead_ns_per_query": 10_000, "server_qps": 20_000},
    }


def _null(_: Sequence[int]) -> None:
    return None


def _harness_overhead(queries: int, seconds: float) -> dict[str, Any]:
    scenario = SingleStream(min_query_count=queries, min_duration_s=seconds)
    phase = run_scenario(scenario, _null).phases[0]
    outside = phase.overhead.per_query_ns
    return {
        "queries": len(phase.latencies_ns),
        "outside_call_ns_per_query": round(outside, 1),
        "timer_floor_ns": phase.overhead.timer_floor_ns,
        "total_ns_per_query": round(outside + phase.overhead.timer_floor_ns, 1),
    }


def _trial(qps: int, issuer: Literal["inline", "thread"], seconds: float) -> dict[str, Any]:
    scenario = Server(target_qps=qps, latency_bound_ms=10, min_duration_s=seconds, issuer=issuer)
    result = run_scenario(scenario, _null)
    verdict = judge(result)
    stats = summarize_result(result)[0]
    phase = result.phases[0]
    delays_ns = np.asarray(phase.issue_delays_ns)
    return {
        "target_qps": qps,
        "status": verdict.status,
        "errors": sorted(str(reason.code) for reason in verdict.errors),
        "queries": stats.count,
        "achieved_qps": round(stats.throughput.per_s),
        "p99_ms": round(stats.headline.value_ns / 1e6, 3),
        "issue_delay_p50_us": round(float(np.quantile(delays_ns, 0.5)) / 1e3, 1),
        "issue_delay_p99_us": round(float(np.quantile(delays_ns, 0.99)) / 1e3, 1),
        "late_share": round(float((delays_ns > 1_000_000).mean()), 4),
        "dispatch_ns_per_query": round(phase.overhead.per_query_ns),
    }


def _capacity(issuer: Literal["inline", "thread"], search: Search) -> dict[str, Any]:
    trials: list[dict[str, Any]] = []

    def sustained(qps: int) -> bool:
        for _ in range(search.attempts):
            trials.append(_trial(qps, issuer, search.trial_s))
            if trials[-1]["status"] == "VALID":
                return True
        return False

    highest_valid: int | None = None
    first_invalid: int | None = None
    qps = search.start_qps
    while qps <= search.max_qps:
        if not sustained(qps):
            first_invalid = qps
            break
        highest_valid = qps
        qps *= 2
    for _ in range(search.bisect_steps):
        if highest_valid is None or first_invalid is None:
            break
        middle = (highest_valid + first_invalid) // 2
        if sustained(middle):
            highest_valid = middle
        else:
            first_invalid = middle
    return {
        "highest_valid_qps": highest_valid,
        "first_invalid_qps": first_invalid,
        "trials": trials,
    }
