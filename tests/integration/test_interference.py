"""Fair numbers on the real worker, on the embedded stack and on RabbitMQ + PostgreSQL: a
quiet run is VALID and says what it cost; a run with CPU hogs started during its timed
window is not VALID, and its reason names the cores they took."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any

import orjson
import pytest

from harness.quiet import wait_until_quiet
from harness.waiting import evaluation_outcome
from tests.integration.conftest import Stack

# 64 queries of squeezenet (~5 ms each here) back a p90; the window lasts the minimum duration.
QUIET = {"iterations": 64, "min_duration_s": 2, "max_duration_s": 30}
HOGGED = {"iterations": 64, "min_duration_s": 4, "max_duration_s": 30}
HOG = "while True: pass"
# What a run's surroundings, not the run, are judged for.
SURROUNDINGS = {"other_processes_used_cpu", "noise_probe_shifted"}


def codes(result: dict[str, Any]) -> set[str]:
    return {reason["code"] for reason in result["verdict"]["reasons"]}


# Slow: it waits (up to two minutes) for a machine quiet enough to start a quiet run on.
@pytest.mark.slow
# Alone: on two cores, a second test worker is the very contention this run must not see.
@pytest.mark.alone
async def test_a_quiet_run_is_valid_and_says_what_it_cost(any_stack: Stack) -> None:
    # A quiet run starts on a quiet machine: the tests before this one leave the database and
    # the broker housekeeping to finish (e.g. a vacuum, deleted queues), which the verdict
    # rightly counts against the run. Housekeeping can also start inside the window (it is
    # not ours to schedule), or the shared VM's host can change its speed between the two
    # noise probes: a run judged disturbed by its surroundings alone is run once more, from
    # a quiet machine again, and that one must be VALID.
    seen = []
    for _ in range(2):
        busy = await asyncio.to_thread(wait_until_quiet, patience_s=120)
        evaluation = await quiet_run(any_stack)
        result = evaluation["result"]
        seen.append((busy, result["verdict"]["reasons"]))
        if result["verdict"]["status"] == "VALID" or not codes(result) <= SURROUNDINGS:
            break
    assert result["verdict"]["status"] == "VALID", seen
    machine = result["machine"]
    cost = machine["cost"]
    assert cost["queries"] == result["count"]
    assert 0 < cost["cpu_s_per_query"] < 1
    assert cost["peak_memory"]["bytes"] > 20 * 2**20  # the model and the framework
    assert cost["peak_memory"]["scope"] == "job"  # reset as the job began
    if cost["energy_j_per_query"] is None:  # no RAPL counter readable here: said, not guessed
        assert cost["not_measured"]["energy"].startswith("not measured: ")
    (window,) = machine["windows"]
    assert window["cpus"] == len(os.sched_getaffinity(0))
    # Nothing else kept a tenth of the cores busy, within /proc/stat's ticks: the same rule
    # the verdict applies, so the figures shown agree with the VALID beside them.
    seconds = window["duration_ns"] / 1e9
    other = max(window["busy_cpu_s"] - window["own_cpu_s"], 0) / seconds
    assert other - window["resolution_s"] / seconds <= 0.1 * window["cpus"]
    assert window["duration_ns"] >= 2e9
    # The window's wall-clock times are the timed queries': after the request, before now.
    assert window["ended_at_ns"] - window["started_at_ns"] >= 2e9
    requested = evaluation["requested_at"]
    assert window["started_at_ns"] / 1e9 > _epoch(requested)
    assert machine["noise"]["before_ns"] > 0


async def quiet_run(stack: Stack) -> dict[str, Any]:
    """One quiet run of squeezenet, as the gateway shows it once completed (it must)."""
    accepted = await stack.http.post(
        "/v1/evaluations",
        json={"model": "squeezenet", "framework": "onnxruntime", "scenario": QUIET},
    )
    assert accepted.status_code == 202, accepted.text
    # Asked for seldom: each answer costs the gateway, the store and PostgreSQL, all on these
    # cores; ten a second (the tests' usual pace) took 0.06-0.08 cores of the timed window
    # on an AMD EPYC here, once a second 0.02-0.03.
    evaluation = await evaluation_outcome(stack.http, accepted.json()["id"], every_s=1.0)
    assert evaluation["status"] == "completed", evaluation["error"]
    return evaluation


def _epoch(when: str) -> float:
    return datetime.fromisoformat(when).timestamp()


@contextlib.asynccontextmanager
async def hogs() -> AsyncIterator[Callable[[int], Awaitable[None]]]:
    """Start busy-looping processes when told how many; each ended whatever happens."""
    started: list[asyncio.subprocess.Process] = []

    async def start(count: int) -> None:
        for _ in range(count):
            started.append(await asyncio.create_subprocess_exec(sys.executable, "-c", HOG))

    try:
        yield start
    finally:
        for process in started:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        for process in started:
            await process.wait()


async def timed_queries_began(stack: Stack, evaluation_id: str) -> None:
    """Return once the worker says its timed queries have begun (server-sent events)."""
    url = f"/v1/evaluations/{evaluation_id}/events"
    async with stack.http.stream("GET", url, headers={"accept": "text/event-stream"}) as response:
        event_type = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event_type = line.removeprefix("event: ")
            elif (
                line.startswith("data: ")
                and event_type == "evaluation.progress"
                and orjson.loads(line.removeprefix("data: "))["part"] == "timed queries"
            ):
                return
    raise AssertionError("the stream ended before the timed queries began")


async def test_cpu_hogs_started_in_the_timed_window_make_the_run_invalid(
    any_stack: Stack,
) -> None:
    accepted = await any_stack.http.post(
        "/v1/evaluations",
        json={"model": "squeezenet", "framework": "onnxruntime", "scenario": HOGGED},
    )
    assert accepted.status_code == 202, accepted.text
    evaluation_id = accepted.json()["id"]
    cpus = len(os.sched_getaffinity(0))
    async with hogs() as start:
        async with asyncio.timeout(60):
            await timed_queries_began(any_stack, evaluation_id)
        await asyncio.sleep(1.0)  # a second into the window: the run began quiet
        await start(cpus)  # one per core
        evaluation = await evaluation_outcome(any_stack.http, evaluation_id)
    assert evaluation["status"] == "completed", evaluation["error"]
    result = evaluation["result"]
    assert result["verdict"]["status"] == "INVALID"
    assert "other_processes_used_cpu" in codes(result)
    reason = next(
        r for r in result["verdict"]["reasons"] if r["code"] == "other_processes_used_cpu"
    )
    said = re.search(
        r"other processes used (\d+\.\d\d) of (\d+) cores during the timed window",
        reason["message"],
    )
    assert said, reason["message"]
    assert int(said.group(2)) == cpus
    assert float(said.group(1)) == pytest.approx(reason["measured"], abs=0.006)  # 2 places, 3
    assert reason["measured"] > reason["limit"]
    assert reason["severity"] == "error"
