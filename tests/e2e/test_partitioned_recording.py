"""Two recorder processes, each owning the streams RabbitMQ's consistent-hash exchange sends to
its partition, store every event once and every stream in publication order."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import aio_pika
import pytest

from bench.recorder_throughput import evaluation_events
from harness.deployment import Deployment, purge_namespace, throwaway_deployment
from harness.waiting import eventually
from shared.config import Settings
from shared.eventstore import EventStore
from shared.messages import Envelope, Topology, encode
from shared.messaging import Bus
from shared.messaging.amqp import AmqpBroker
from shared.telemetry import Telemetry
from tests.conftest import POSTGRES_ADMIN_DSN

pytestmark = [pytest.mark.e2e, pytest.mark.rabbitmq, pytest.mark.postgres]

PARTITIONS = 2


@pytest.fixture
async def deployment(rabbitmq_url: str) -> AsyncIterator[Deployment]:
    async with throwaway_deployment(
        rabbitmq_url, POSTGRES_ADMIN_DSN, prefix="part", recorders=PARTITIONS
    ) as deployed:
        try:
            yield deployed
        finally:
            deployed.stop_all()
            await purge_namespace(rabbitmq_url, deployed.namespace, recorder_partitions=PARTITIONS)


async def _queue_states(deployment: Deployment) -> list[tuple[int, int]] | None:
    """(ready messages, consumers) of each partition's queue, or None while one is missing."""
    topology = Topology(deployment.namespace)
    async with await aio_pika.connect(deployment.broker_url) as connection:
        states = []
        for partition in range(PARTITIONS):
            channel = await connection.channel()
            try:
                declared = await channel.declare_queue(
                    topology.recorder_queue(partition, PARTITIONS), passive=True
                )
            except aio_pika.exceptions.ChannelClosed:
                return None
            result = declared.declaration_result
            states.append((int(result.message_count or 0), int(result.consumer_count or 0)))
            await channel.close()
        return states


async def _publish_with_the_bus(deployment: Deployment, streams: list[list[Envelope]]) -> None:
    telemetry = Telemetry.create(Settings(), "test")
    broker = AmqpBroker(deployment.broker_url)
    bus = Bus(broker, topology=Topology(deployment.namespace), telemetry=telemetry, service="test")
    await bus.start()
    try:
        # Interleaved across streams, each stream in its own order, each publish confirmed.
        for step in range(max(len(events) for events in streams)):
            for events in streams:
                if step < len(events):
                    await bus.publish(events[step])
    finally:
        await bus.stop()
        await broker.close()
        telemetry.shutdown()


async def _publish_without_the_header(deployment: Deployment, events: list[Envelope]) -> None:
    async with await aio_pika.connect(deployment.broker_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(Topology(deployment.namespace).events)
        for event in events:
            await exchange.publish(
                aio_pika.Message(encode(event), delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key=event.type,
            )


async def test_two_recorders_store_every_event_once_and_every_stream_in_order(
    deployment: Deployment,
) -> None:
    # Given both recorders up (each declares every partition), then stopped,
    deployment.start("recorder")

    async def consumed() -> bool:
        states = await _queue_states(deployment)
        return states is not None and all(consumers == 1 for _, consumers in states)

    await eventually(consumed, timeout=60)
    deployment.stop_all()

    # when events of many streams are published through the bus, and some straight to
    # RabbitMQ without the stream header,
    rng = random.Random(0)
    streams = [evaluation_events(rng) for _ in range(40)]
    raw = [e for _ in range(3) for e in evaluation_events(rng)]
    await _publish_with_the_bus(deployment, streams)
    await _publish_without_the_header(deployment, raw)
    states = await _queue_states(deployment)
    assert states is not None
    published = sum(len(events) for events in streams) + len(raw)
    assert sum(ready for ready, _ in states) == published, "nothing lost on the way"
    assert all(ready > 0 for ready, _ in states), f"a partition got no event: {states}"

    # then the recorders store each event once, each stream versioned in publication order.
    deployment.start("recorder")
    async with EventStore.from_url(deployment.database_url) as store:

        async def all_stored() -> bool:
            return await store.count_events() >= published

        await eventually(all_stored, timeout=60)

        async def drained() -> bool:
            states = await _queue_states(deployment)
            return states is not None and all(ready == 0 for ready, _ in states)

        await eventually(drained, timeout=60)
        assert await store.count_events() == published
        for events in [*streams, raw[0:5], raw[5:10], raw[10:15]]:
            stored = await store.stream_events(events[0].stream_id)
            assert [e.event_id for e in stored] == [e.event_id for e in events]
            assert [e.version for e in stored] == list(range(1, len(events) + 1))
