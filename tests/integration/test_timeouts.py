"""An evaluation never waits forever: if its worker stops answering, the scheduler fails it
when DLSCOPE_EVALUATION_TIMEOUT_S has passed since it was scheduled."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from dlscope.embedded import all_services
from harness.waiting import evaluation_outcome
from services.scheduler import SchedulerService
from shared.config import Settings
from shared.messages import (
    AgentOnline,
    Envelope,
    EvaluationStarted,
    agent_stream,
    evaluation_stream,
)
from shared.messaging import MemoryBroker
from shared.runtime import Runtime, running
from shared.telemetry import Telemetry


@dataclass
class Stack:
    runtime: Runtime
    http: httpx.AsyncClient
    scheduler: SchedulerService
    broker: MemoryBroker


@pytest.fixture
def timeout_s() -> float:
    return 0.5


@pytest.fixture
async def stack(tmp_path: Path, namespace: str, timeout_s: float) -> AsyncIterator[Stack]:
    """Every service in this process (memory broker, SQLite), with a short evaluation timeout."""
    settings = Settings(home=tmp_path, namespace=namespace, evaluation_timeout_s=timeout_s)
    broker = MemoryBroker()
    runtime = Runtime(settings, Telemetry.create(settings, "test"), broker)
    services = all_services(runtime, [("onnxruntime", "cpu")], gateway=("127.0.0.1", 0))
    scheduler = next(s for s in services if isinstance(s, SchedulerService))
    try:
        async with running(services):
            port = services[-1].port  # type: ignore[attr-defined]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
                yield Stack(runtime, http, scheduler, broker)
    finally:
        await runtime.close()


async def test_an_evaluation_whose_worker_never_answers_fails_with_a_timeout(
    stack: Stack,
) -> None:
    await announce_ghost(stack)
    online = {a.agent_id for a in stack.scheduler.agents.online(time.monotonic())}
    assert "ghost" in online

    accepted = (
        await stack.http.post(
            "/v1/evaluations",
            json={"model": "squeezenet", "framework": "onnxruntime", "hardware": "gpu"},
        )
    ).json()
    evaluation = await evaluation_outcome(stack.http, accepted["id"])
    assert evaluation["status"] == "failed"
    assert evaluation["error"].startswith("timeout: no outcome within 0.5 s of being scheduled")


# Time enough to complete on a loaded machine: this test is about the deadline going away.
@pytest.mark.parametrize("timeout_s", [120.0])
async def test_an_evaluation_that_completes_is_no_longer_watched(stack: Stack) -> None:
    accepted = (
        await stack.http.post(
            "/v1/evaluations",
            json={
                "model": "squeezenet",
                "framework": "onnxruntime",
                "scenario": {"iterations": 2, "min_duration_s": 0},
            },
        )
    ).json()
    evaluation = await evaluation_outcome(stack.http, accepted["id"])
    assert evaluation["status"] == "completed", evaluation["error"]
    await stack.broker.drained()  # the scheduler has seen the completion too
    assert uuid.UUID(accepted["id"]) not in stack.scheduler.watched


async def announce_ghost(stack: Stack) -> None:
    """A worker that announced itself for a GPU, then went silent: jobs reach nobody."""
    bus = stack.runtime.bus("test")
    await bus.start()
    await bus.publish(
        Envelope.wrap(
            AgentOnline(
                agent_id="ghost",
                host="gone",
                framework="onnxruntime",
                framework_version="1.31.1",
                hardware="gpu",
                heartbeat_interval_s=60,
            ),
            stream_id=agent_stream("ghost"),
            correlation_id=uuid.uuid4(),
        )
    )
    await stack.broker.drained()


async def status_is(http: httpx.AsyncClient, evaluation_id: str, status: str) -> None:
    async with asyncio.timeout(30):
        # 404 until the recorder has stored the request.
        while (await http.get(f"/v1/evaluations/{evaluation_id}")).json().get("status") != status:
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("timeout_s", [3.0])
async def test_a_restarted_scheduler_still_fails_what_its_predecessor_scheduled(
    stack: Stack,
) -> None:
    await announce_ghost(stack)
    accepted = (
        await stack.http.post(
            "/v1/evaluations",
            json={"model": "squeezenet", "framework": "onnxruntime", "hardware": "gpu"},
        )
    ).json()
    await status_is(stack.http, accepted["id"], "scheduled")  # stored, job sent to the ghost

    # The scheduler restarts: the new one knows only what the event store says.
    await stack.scheduler.stop()
    successor = SchedulerService(stack.runtime)
    await successor.start()
    try:
        await successor.recovered.wait()
        assert uuid.UUID(accepted["id"]) in successor.watched
        evaluation = await evaluation_outcome(stack.http, accepted["id"])
    finally:
        await successor.stop()
    assert evaluation["status"] == "failed"
    assert evaluation["error"].startswith("timeout: no outcome within 3 s of being scheduled")


@pytest.mark.parametrize("timeout_s", [2.0])
async def test_each_attempt_has_the_whole_timeout(stack: Stack) -> None:
    await announce_ghost(stack)
    accepted = (
        await stack.http.post(
            "/v1/evaluations",
            json={"model": "squeezenet", "framework": "onnxruntime", "hardware": "gpu"},
        )
    ).json()
    await status_is(stack.http, accepted["id"], "scheduled")
    # The ghost starts a second attempt (the first one's agent was lost, say), then falls
    # silent: the deadline counts from that start, and says so.
    bus = stack.runtime.bus("test")
    await bus.start()
    await bus.publish(
        Envelope.wrap(
            EvaluationStarted(
                evaluation_id=uuid.UUID(accepted["id"]),
                agent_id="ghost",
                host="gone",
                environment={},
                attempt=2,
            ),
            stream_id=evaluation_stream(uuid.UUID(accepted["id"])),
            correlation_id=uuid.UUID(accepted["id"]),
        )
    )
    evaluation = await evaluation_outcome(stack.http, accepted["id"])
    assert evaluation["status"] == "failed"
    assert evaluation["error"].startswith("timeout: no outcome within 2 s of attempt 2 starting")
