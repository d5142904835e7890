"""A worker that stops heartbeating is declared offline by the scheduler, once, and is online
again when it heartbeats again: embedded and on RabbitMQ + PostgreSQL."""

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
from dlscope.local import purge_namespace
from services.scheduler import SchedulerService
from shared.config import Settings
from shared.eventstore import EventStore
from shared.messages import AgentHeartbeat, AgentOnline, Envelope, agent_stream
from shared.messaging import Bus, create_broker
from shared.runtime import Runtime, running
from shared.telemetry import Telemetry

HEARTBEAT_S = 0.2


@dataclass
class Stack:
    http: httpx.AsyncClient
    bus: Bus
    scheduler: SchedulerService
    settings: Settings

    async def eventually(self, probe: Any) -> Any:
        async with asyncio.timeout(30):
            while not (value := await probe()):
                await asyncio.sleep(0.05)
            return value

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


@pytest.fixture(
    params=[
        "embedded",
        pytest.param("rabbitmq+postgres", marks=[pytest.mark.rabbitmq, pytest.mark.postgres]),
    ]
)
async def stack(
    request: pytest.FixtureRequest, tmp_path: Path, namespace: str
) -> AsyncIterator[Stack]:
    """The services without workers, heartbeats every 0.2 s: 3 missed is 0.6 s of silence."""
    settings = Settings(home=tmp_path, namespace=namespace, heartbeat_interval_s=HEARTBEAT_S)
    if request.param != "embedded":
        settings = settings.model_copy(
            update={
                "broker_url": request.getfixturevalue("rabbitmq_url"),
                "database_url": request.getfixturevalue("postgres_url"),
            }
        )
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
    assert await stack.eventually(lambda: _is(stack, "offline"))
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
        assert await stack.eventually(lambda: _is(stack, "online"))
        assert await stack.eventually(lambda: _schedulable(stack))
    finally:
        beating.cancel()
    # And silent again, offline again
    assert await stack.eventually(lambda: _is(stack, "offline"))
    types = [t for t, _ in await stack.stored()]
    # (A heartbeat more than 0.6 s late on a loaded machine is a lapse too: at least two.)
    assert types[-1] == "agent.offline"
    assert types.count("agent.offline") >= 2


async def _schedulable(stack: Stack) -> bool:
    online = stack.scheduler.agents.online(time.monotonic())
    return "ghost" in {a.agent_id for a in online}


async def _is(stack: Stack, status: str) -> bool:
    return await stack.status() == status
