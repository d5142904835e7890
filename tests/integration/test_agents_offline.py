"""A worker that stops heartbeating is declared offline by the scheduler, once, and is online
again when it heartbeats again; an evaluation it was running fails promptly, naming it,
unless another worker takes the job up again (a second attempt): embedded and on RabbitMQ +
PostgreSQL. The workers are played by this test, which publishes what they would."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from dlscope.embedded import all_services
from harness.deployment import purge_namespace
from harness.payloads import single_stream_run
from harness.waiting import evaluation_outcome, eventually
from services.scheduler import SchedulerService
from shared.config import Settings
from shared.eventstore import EvaluationView, EventStore, StoredEvent
from shared.messages import (
    AgentHeartbeat,
    AgentOnline,
    Envelope,
    EvaluationMeasured,
    EvaluationRequested,
    EvaluationStarted,
    Payload,
    agent_stream,
    attempt_key,
    evaluation_stream,
)
from shared.messaging import Bus, create_broker
from shared.runtime import Runtime, running
from shared.telemetry import Telemetry
from tests.integration.conftest import STACKS, stack_settings

HEARTBEAT_S = 0.2


@dataclass
class Stack:
    http: httpx.AsyncClient
    bus: Bus
    scheduler: SchedulerService
    settings: Settings

    async def say(self, payload: AgentOnline | AgentHeartbeat) -> None:
        await self.bus.publish(
            Envelope.wrap(payload, stream_id=agent_stream("ghost"), correlation_id=uuid.uuid4())
        )

    async def status(self) -> str | None:
        agents = (await self.http.get("/v1/agents")).json()
        return next((a["status"] for a in agents if a["agent_id"] == "ghost"), None)

    async def stored(self) -> list[tuple[str, dict[str, Any]]]:
        async with EventStore.from_url(self.settings.resolved_database_url) as store:
            events = await store.stream_events(agent_stream("ghost"))
        return [(e.type, e.payload) for e in events]


@pytest.fixture(params=STACKS)
async def stack(
    request: pytest.FixtureRequest, tmp_path: Path, namespace: str
) -> AsyncIterator[Stack]:
    """The services without workers, heartbeats every 0.2 s: 3 missed is 0.6 s of silence."""
    settings = stack_settings(request, tmp_path, namespace, heartbeat_interval_s=HEARTBEAT_S)
    runtime = Runtime(
        settings, Telemetry.create(settings, "test"), create_broker(settings.broker_url)
    )
    services = all_services(runtime, [], gateway=("127.0.0.1", 0))
    scheduler = next(s for s in services if isinstance(s, SchedulerService))
    try:
        async with running(services):
            port = services[-1].port  # type: ignore[attr-defined]
            bus = runtime.bus("ghost")
            await bus.start()
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
                yield Stack(http, bus, scheduler, settings)
            await bus.stop()
    finally:
        await runtime.close()
        if request.param != "embedded":
            await purge_namespace(settings.broker_url, namespace)


async def test_a_silent_agent_is_declared_offline_once_and_comes_back_with_a_heartbeat(
    stack: Stack,
) -> None:
    # Given an agent that announced itself and then fell silent
    await stack.say(
        AgentOnline(
            agent_id="ghost",
            host="gone",
            framework="onnxruntime",
            framework_version="1.31.1",
            hardware="cpu",
            heartbeat_interval_s=HEARTBEAT_S,
        )
    )
    # Then the scheduler declares it offline, and the read model shows it
    assert await eventually(lambda: _is(stack, "offline"))
    # Several sweeps later it has still been declared only once (nothing to await: the
    # point is that nothing more happens).
    await asyncio.sleep(5 * HEARTBEAT_S)
    stored = await stack.stored()
    assert [t for t, _ in stored] == ["agent.online", "agent.offline"]
    assert stored[1][1]["reason"] == "missed 3 heartbeats (one every 0.2 s)"
    assert "ghost" not in {a.agent_id for a in stack.scheduler.agents.online(time.monotonic())}

    # When it heartbeats again, it is online again, for the read model and the scheduler
    async def beat() -> None:
        while True:
            await stack.say(AgentHeartbeat(agent_id="ghost", busy=False))
            await asyncio.sleep(HEARTBEAT_S)

    beating = asyncio.create_task(beat())
    try:
        assert await eventually(lambda: _is(stack, "online"))
        assert await eventually(lambda: _schedulable(stack))
    finally:
        beating.cancel()
    # And silent again, offline again
    assert await eventually(lambda: _is(stack, "offline"))
    types = [t for t, _ in await stack.stored()]
    # (A heartbeat more than 0.6 s late on a loaded machine is a lapse too: at least two.)
    assert types[-1] == "agent.offline"
    assert types.count("agent.offline") >= 2


async def _schedulable(stack: Stack) -> bool:
    online = stack.scheduler.agents.online(time.monotonic())
    return "ghost" in {a.agent_id for a in online}


async def _is(stack: Stack, status: str) -> bool:
    return await stack.status() == status


# --- an agent lost mid-evaluation ------------------------------------------------------------


@dataclass
class Worker:
    """A worker as the test plays it: it announces itself, heartbeats, takes jobs."""

    stack: Stack
    agent_id: str
    host: str
    beating: asyncio.Task[None] | None = None

    async def say(self, payload: Payload) -> None:
        await self.stack.bus.publish(
            Envelope.wrap(
                payload, stream_id=agent_stream(self.agent_id), correlation_id=uuid.uuid4()
            )
        )

    async def come_online(self) -> None:
        await self.say(
            AgentOnline(
                agent_id=self.agent_id,
                host=self.host,
                framework="onnxruntime",
                framework_version="1.31.1",
                hardware="cpu",
                heartbeat_interval_s=HEARTBEAT_S,
            )
        )

        async def beat() -> None:
            # Four times as often as announced: an agent the test keeps alive stays online
            # through a moment of the loaded machine's (0.6 s of silence is a lapse), so the
            # only agent that goes offline is the one the test kills.
            while True:
                await asyncio.sleep(HEARTBEAT_S / 4)
                await self.say(AgentHeartbeat(agent_id=self.agent_id, busy=False))

        self.beating = asyncio.create_task(beat())
        await eventually(lambda: _online(self.stack, self.agent_id))

    def die(self) -> None:
        """kill -9: not another word from it."""
        assert self.beating is not None
        self.beating.cancel()

    async def start(self, job: Envelope, evaluation_id: uuid.UUID, attempt: int) -> None:
        # As the worker does: each attempt's events get ids of their own.
        started = EvaluationStarted(
            evaluation_id=evaluation_id,
            agent_id=self.agent_id,
            host=self.host,
            environment={"host": self.host, "cpu": f"the CPU of {self.host}"},
            attempt=attempt,
        )
        key = attempt_key(attempt)
        await self.stack.bus.publish(job.caused(started, producer="worker", key=key))

    async def measure(self, job: Envelope, evaluation_id: uuid.UUID, attempt: int) -> None:
        measured = EvaluationMeasured(
            evaluation_id=evaluation_id,
            agent_id=self.agent_id,
            attempt=attempt,
            load_ns=1_000_000,
            run=single_stream_run(),
        )
        key = attempt_key(attempt)
        await self.stack.bus.publish(job.caused(measured, producer="worker", key=key))


@pytest.fixture
async def workers(stack: Stack) -> AsyncIterator[list[Worker]]:
    """Two workers of one kind, online; the model they run is registered."""
    await eventually(lambda: _listed(stack, "squeezenet"))
    found = [Worker(stack, "ghost", "gone"), Worker(stack, "twin", "alive")]
    for worker in found:
        await worker.come_online()
    yield found
    for worker in found:
        if worker.beating is not None:
            worker.beating.cancel()


async def submit(stack: Stack, **extra: Any) -> tuple[uuid.UUID, Envelope]:
    """An evaluation, scheduled; and the job as the worker's events would derive from it."""
    response = await stack.http.post(
        "/v1/evaluations",
        json={"model": "squeezenet", "framework": "onnxruntime", **extra},
    )
    assert response.status_code == 202, response.text
    evaluation_id = uuid.UUID(response.json()["id"])
    await eventually(lambda: _known_to_scheduler(stack, evaluation_id))
    # Not published: the message the worker's events are caused by (the real job carries
    # the whole manifest, which does not matter here).
    job = Envelope.wrap(
        EvaluationRequested(
            evaluation_id=evaluation_id, model="squeezenet", framework="onnxruntime"
        ),
        stream_id=evaluation_stream(evaluation_id),
        correlation_id=evaluation_id,
    )
    return evaluation_id, job


async def test_an_agent_lost_mid_evaluation_fails_it_at_once_when_no_other_can_take_it(
    stack: Stack, workers: list[Worker]
) -> None:
    ghost, twin = workers
    # Given the only other worker of the kind has gone, and the ghost runs an evaluation
    twin.die()
    await eventually(lambda: _offline(stack, "twin"))
    evaluation_id, job = await submit(stack)
    await ghost.start(job, evaluation_id, attempt=1)
    await eventually(lambda: _running_on(stack, evaluation_id, "ghost"))

    # When the ghost is killed
    ghost.die()

    # Then the evaluation fails as soon as the ghost is declared offline, naming it and why
    view = await evaluation_outcome(stack.http, evaluation_id)
    assert view["status"] == "failed"
    assert view["error"] == (
        "agent: agent ghost on host gone went offline (missed 3 heartbeats (one every 0.2 s)) "
        "while running this evaluation; no other agent of onnxruntime on cpu is online to "
        "take it up"
    )
    types = [e.type for e in await _events(stack, evaluation_id)]
    assert types.count("evaluation.failed") == 1


async def test_an_evaluation_pinned_to_a_lost_agent_fails_at_once(
    stack: Stack, workers: list[Worker]
) -> None:
    ghost, _ = workers
    # Given an evaluation pinned to the ghost, while the twin is alive
    evaluation_id, job = await submit(stack, agent_id="ghost")
    await ghost.start(job, evaluation_id, attempt=1)
    await eventually(lambda: _running_on(stack, evaluation_id, "ghost"))

    # When the ghost is killed, then no other agent may take the job: failed at once
    ghost.die()
    view = await evaluation_outcome(stack.http, evaluation_id)
    assert view["status"] == "failed"
    assert view["error"].startswith("agent: agent ghost on host gone went offline (missed 3")
    assert view["error"].endswith("the job was pinned to ghost, so no other agent can take it up")


async def test_a_second_attempt_on_another_agent_keeps_the_evaluation_alive(
    stack: Stack, workers: list[Worker]
) -> None:
    ghost, twin = workers
    # Given an evaluation the ghost started
    evaluation_id, job = await submit(stack)
    await ghost.start(job, evaluation_id, attempt=1)
    await eventually(lambda: _running_on(stack, evaluation_id, "ghost"))

    # When the ghost is killed, the scheduler waits for another agent to take the job up
    ghost.die()
    await eventually(lambda: _waiting(stack, evaluation_id))
    # and the broker's redelivery reaches the twin, which starts attempt 2 and measures
    await twin.start(job, evaluation_id, attempt=2)
    await eventually(lambda: _running_on(stack, evaluation_id, "twin"))
    assert evaluation_id not in stack.scheduler.waiting
    await twin.measure(job, evaluation_id, attempt=2)

    # Then the evaluation completes, on the twin, in its second attempt
    view = await evaluation_outcome(stack.http, evaluation_id)
    assert view["status"] == "completed", view["error"]
    stored = await eventually(lambda: _stored_view(stack, evaluation_id))
    assert (stored.attempts, stored.agent_id, stored.host) == (2, "twin", "alive")
    assert stored.environment == {"host": "alive", "cpu": "the CPU of alive"}
    # and both attempts are in its history, each with where it ran
    events = await _events(stack, evaluation_id)
    starts = [e.payload for e in events if e.type == "evaluation.started"]
    assert [(p["attempt"], p["agent_id"], p["environment"]["host"]) for p in starts] == [
        (1, "ghost", "gone"),
        (2, "twin", "alive"),
    ]
    assert "evaluation.failed" not in {e.type for e in events}


async def test_a_job_no_other_agent_takes_up_in_the_grace_period_fails_with_the_reason(
    stack: Stack, workers: list[Worker]
) -> None:
    ghost, _ = workers
    # Given an evaluation the ghost started, and the twin alive (and idle)
    evaluation_id, job = await submit(stack)
    await ghost.start(job, evaluation_id, attempt=1)
    await eventually(lambda: _running_on(stack, evaluation_id, "ghost"))

    # When the ghost is killed and no second attempt starts
    ghost.die()

    # Then, after the grace period (3 heartbeats), the evaluation fails with the reason
    view = await evaluation_outcome(stack.http, evaluation_id)
    assert view["status"] == "failed"
    assert view["error"].startswith(
        "agent: agent ghost on host gone went offline (missed 3 heartbeats (one every 0.2 s)) "
        "while running this evaluation; no other agent of onnxruntime on cpu took the job up "
        "within "
    )


async def _listed(stack: Stack, name: str) -> bool:
    response = await stack.http.get(f"/v1/models/{name}")
    return response.status_code == 200


async def _online(stack: Stack, agent_id: str) -> bool:
    return agent_id in {a.agent_id for a in stack.scheduler.agents.online(time.monotonic())}


async def _offline(stack: Stack, agent_id: str) -> bool:
    return not await _online(stack, agent_id)


async def _known_to_scheduler(stack: Stack, evaluation_id: uuid.UUID) -> bool:
    return stack.scheduler.jobs.get(evaluation_id) is not None


async def _running_on(stack: Stack, evaluation_id: uuid.UUID, agent_id: str) -> bool:
    job = stack.scheduler.jobs.get(evaluation_id)
    return job is not None and job.agent_id == agent_id


async def _waiting(stack: Stack, evaluation_id: uuid.UUID) -> bool:
    return evaluation_id in stack.scheduler.waiting


async def _stored_view(stack: Stack, evaluation_id: uuid.UUID) -> EvaluationView | None:
    async with EventStore.from_url(stack.settings.resolved_database_url) as store:
        view = await store.get_evaluation(evaluation_id)
    return view if view is not None and view.attempts == 2 and view.host else None


async def _events(stack: Stack, evaluation_id: uuid.UUID) -> list[StoredEvent]:
    async with EventStore.from_url(stack.settings.resolved_database_url) as store:
        return await store.stream_events(evaluation_stream(evaluation_id))
