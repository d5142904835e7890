"""A job whose device another measurement holds waits for it, says so, and never forever:
every service in this process, embedded and on RabbitMQ + PostgreSQL, while the test holds
the CPU's lease as another worker of this host would."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.waiting import evaluation_outcome
from services.workers.devices import cpu_device
from services.workers.leases import DeviceLeases
from tests.integration.conftest import STACKS, Stack, stack_settings, started_stack

HOLDER_AGENT = "agent-elsewhere"
# Long enough for the scheduler's deadline to lie clearly after the worker's own (it gives
# up a tenth of the timeout earlier), short enough for a test.
TIMEOUT_S = 10.0


@pytest.fixture(params=STACKS)
async def stack(
    request: pytest.FixtureRequest, tmp_path: Path, namespace: str
) -> AsyncIterator[Stack]:
    settings = stack_settings(
        request,
        tmp_path,
        namespace,
        lease_dir=tmp_path / "leases",
        evaluation_timeout_s=TIMEOUT_S,
    )
    async with started_stack(settings, embedded=request.param == "embedded") as started:
        yield started


@contextlib.asynccontextmanager
async def holding_the_cpu(stack: Stack, evaluation_id: uuid.UUID) -> AsyncIterator[None]:
    """The lease on every core this process (and so its workers) may run on."""
    leases = DeviceLeases(stack.runtime.settings.resolved_lease_dir, host="here")
    async with leases.hold(
        cpu_device(os.sched_getaffinity(0)), evaluation_id=evaluation_id, agent_id=HOLDER_AGENT
    ):
        yield


async def submit(stack: Stack, **scenario: Any) -> str:
    response = await stack.http.post(
        "/v1/evaluations",
        json={
            "model": "squeezenet",
            "framework": "onnxruntime",
            "scenario": {"iterations": 3, "min_duration_s": 0, "warmup": 0, **scenario},
        },
    )
    assert response.status_code == 202, response.text
    evaluation_id: str = response.json()["id"]
    return evaluation_id


async def test_a_job_waits_for_its_device_and_progress_names_the_holder(stack: Stack) -> None:
    device = cpu_device(os.sched_getaffinity(0)).name
    other = uuid.uuid4()
    waiting: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    received: list[str] = []

    async def follow(evaluation_id: str) -> None:
        url = f"/v1/evaluations/{evaluation_id}/events"
        async with stack.http.stream(
            "GET", url, headers={"accept": "text/event-stream"}, timeout=60
        ) as response:
            kind = ""
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                    received.append(kind)
                elif line.startswith("data: ") and kind == "evaluation.progress":
                    step = orjson.loads(line.removeprefix("data: "))
                    if step["phase"] == "waiting for the device" and not waiting.done():
                        waiting.set_result(step)

    async with holding_the_cpu(stack, other):
        evaluation_id = await submit(stack)
        following = asyncio.create_task(follow(evaluation_id))
        step = await asyncio.wait_for(asyncio.shield(waiting), 30)
        released_at = datetime.now(UTC)
    # The worker said what it waits for, and for whom, with how long it may wait.
    assert step["part"] == (
        f"waiting for the device {device}, held by evaluation {str(other)[:8]} "
        f"on agent {HOLDER_AGENT}"
    )
    assert 0 < step["limit_s"] <= TIMEOUT_S
    await asyncio.wait_for(following, 60)
    assert received[-1] == "evaluation.completed"

    events = (await stack.http.get(f"/v1/evaluations/{evaluation_id}/events")).json()
    (measured,) = [e["payload"] for e in events if e["type"] == "evaluation.measured"]
    lease = measured["lease"]
    assert (lease["device"], lease["held"]) == (device, True)
    assert lease["locks"] == [f"cpu{core}" for core in sorted(os.sched_getaffinity(0))]
    assert lease["waited_s"] > 0
    # Its measurement began once the other holder had given the device back.
    assert datetime.fromisoformat(lease["acquired_at"]) >= released_at
    assert lease["acquired_at"] <= lease["released_at"]


# Slow: it waits out the evaluation's timeout (ten seconds), by design.
@pytest.mark.slow
async def test_a_job_whose_device_never_comes_fails_in_time_saying_what_it_waited_for(
    stack: Stack,
) -> None:
    device = cpu_device(os.sched_getaffinity(0)).name
    other = uuid.uuid4()
    async with holding_the_cpu(stack, other):
        evaluation_id = await submit(stack)
        evaluation = await evaluation_outcome(stack.http, evaluation_id, timeout=TIMEOUT_S + 20)
    assert evaluation["status"] == "failed"
    error = evaluation["error"]
    # The worker's failure, before the scheduler's own deadline: it names the device and
    # who held it, rather than "no outcome within 10 s".
    waited = re.match(rf"timeout: waited ([0-9.]+) s for device {re.escape(device)}, ", error)
    assert waited is not None, error
    assert 0.5 * TIMEOUT_S < float(waited[1]) <= 0.9 * TIMEOUT_S
    assert f"held by evaluation {other} on agent {HOLDER_AGENT} (pid {os.getpid()}" in error
    events = (await stack.http.get(f"/v1/evaluations/{evaluation_id}/events")).json()
    assert "evaluation.measured" not in {e["type"] for e in events}


async def test_a_concurrent_evaluation_takes_no_lease_is_labelled_and_told_so(
    stack: Stack,
) -> None:
    other = uuid.uuid4()
    async with holding_the_cpu(stack, other):  # it does not wait for the holder
        response = await stack.http.post(
            "/v1/evaluations",
            json={
                "model": "squeezenet",
                "framework": "onnxruntime",
                "scenario": {"iterations": 3, "min_duration_s": 0, "warmup": 0},
                "concurrent": True,
            },
        )
        assert response.status_code == 202, response.text
        accepted = response.json()
        # One evaluation has no members to run beside: the answer says what the flag does.
        (warning,) = accepted["warnings"]
        assert "only skips the device lease" in warning
        evaluation = await evaluation_outcome(stack.http, accepted["id"])
    assert evaluation["status"] == "completed", evaluation["error"]
    reasons = {r["code"]: r for r in evaluation["result"]["verdict"]["reasons"]}
    assert reasons["measured_under_contention"]["severity"] == "warning"
    events = (await stack.http.get(f"/v1/evaluations/{accepted['id']}/events")).json()
    (measured,) = [e["payload"] for e in events if e["type"] == "evaluation.measured"]
    assert (measured["lease"]["held"], measured["lease"]["waited_s"]) == (False, 0)
    assert measured["conditions"]["concurrent"] is True
    # The look back at other busy processes is taken as the run starts, not when the job
    # was accepted: in the measurement's conditions, not in the started event's environment.
    assert "heavy_processes" in measured["conditions"]
    (started,) = [e["payload"] for e in events if e["type"] == "evaluation.started"]
    assert "heavy_processes" not in started["environment"]


@pytest.mark.parametrize("path", ["/v1/evaluations", "/v1/experiments"])
async def test_concurrent_is_a_boolean(stack: Stack, path: str) -> None:
    body = {"model": "squeezenet", "concurrent": "yes"}
    if path == "/v1/evaluations":
        body["framework"] = "onnxruntime"
    response = await stack.http.post(path, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][-1] == "concurrent"
