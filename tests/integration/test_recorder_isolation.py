"""One event the store cannot hold costs nobody else's, on RabbitMQ + PostgreSQL: published
among 200 innocent events (each its own stream, all arriving together so that they share the
recorder's transactions), an event whose number no column holds is dead-lettered by its
contract, one that PostgreSQL itself refuses is dead-lettered alone with the database's
reason, and all 200 innocents are stored."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import orjson
import pytest

from harness.deployment import purge_namespace
from harness.waiting import eventually
from services.recorder import RecorderService
from shared.config import Settings
from shared.eventstore import EventStore
from shared.messages import AgentOffline, Envelope, encode
from shared.runtime import Runtime, running
from tests.conftest import _execute

pytestmark = [pytest.mark.rabbitmq, pytest.mark.postgres]

# What the database refuses, as a column it cannot hold would: a data exception (SQLSTATE
# class 22), raised for the one event whose reason says so. The contracts admit this event.
REFUSED = "the database refuses this one"
TRIGGER = f"""
CREATE FUNCTION refuse_one() RETURNS trigger AS $$
BEGIN
  IF NEW.payload->>'reason' = '{REFUSED}' THEN
    RAISE EXCEPTION 'value out of range for this column' USING ERRCODE = '22003';
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER refuse_one BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse_one();
"""


@pytest.fixture
async def recorder(
    tmp_path: Path, namespace: str, rabbitmq_url: str, postgres_url: str
) -> AsyncIterator[Runtime]:
    settings = Settings(
        home=tmp_path, namespace=namespace, broker_url=rabbitmq_url, database_url=postgres_url
    )
    runtime = Runtime.create(settings, "test")
    try:
        async with running([RecorderService(runtime)]):  # migrates the store first
            _execute(postgres_url.replace("postgresql+asyncpg://", "postgresql://"), TRIGGER)
            yield runtime
    finally:
        await runtime.close()
        await purge_namespace(rabbitmq_url, namespace)


def offline(agent: str, reason: str) -> Envelope:
    return Envelope.wrap(
        AgentOffline(agent_id=agent, reason=reason),
        stream_id=f"agent-{agent}",
        correlation_id=uuid.uuid4(),
    )


async def test_a_poison_among_200_innocent_events_leaves_all_200_stored(
    recorder: Runtime, rabbitmq_url: str
) -> None:
    innocents = [offline(f"agent-{n}", "stopped") for n in range(200)]
    out_of_range = offline("agent-big", "stopped").model_dump(mode="json")
    out_of_range["schema_version"] = 2**31  # the store's column holds 2^31 - 1
    refused = offline("agent-refused", REFUSED)
    bodies = [encode(e) for e in innocents]
    bodies.insert(67, orjson.dumps(out_of_range))
    bodies.insert(133, encode(refused))

    # Straight onto the broker, as any client of it could, all at once.
    topology = recorder.topology
    async with await aio_pika.connect(rabbitmq_url) as connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(topology.events)
        await asyncio.gather(
            *(
                exchange.publish(aio_pika.Message(body), routing_key=AgentOffline.TYPE)
                for body in bodies
            )
        )

        # Then both poisons are dead-lettered, each with its reason
        dead_letters = await channel.declare_queue(topology.dead_letters, passive=True)
        reasons: dict[str, str] = {}

        async def both_dead_lettered() -> bool:
            while (message := await dead_letters.get(no_ack=True, fail=False)) is not None:
                body = orjson.loads(message.body)
                reasons[body["stream_id"]] = str((message.headers or {})["x-dlscope-reason"])
            return len(reasons) >= 2

        await eventually(both_dead_lettered)
    assert set(reasons) == {"agent-agent-big", "agent-agent-refused"}
    assert "schema_version" in reasons["agent-agent-big"]
    assert "less than or equal to 2147483647" in reasons["agent-agent-big"]
    # Refused by the database: dead-lettered at once, not after being tried again.
    assert reasons["agent-agent-refused"].startswith("StoreRefused: ")
    assert "value out of range for this column" in reasons["agent-agent-refused"]

    # and every innocent event is stored, nothing else
    async with EventStore.from_url(recorder.settings.resolved_database_url) as store:

        async def stored() -> list[str]:
            events, after = [], 0
            while page := await store.read_all(after=after, limit=1000):
                events.extend(page)
                after = page[-1].position
            return sorted(str(e.event_id) for e in events)

        async def all_innocents_stored() -> bool:
            return len(await stored()) >= len(innocents)

        await eventually(all_innocents_stored)
        assert await stored() == sorted(str(e.event_id) for e in innocents)
