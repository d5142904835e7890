"""What ``Bus.publish_batch`` puts on the wire: one message per run of one type, and, where
the recorders are partitioned by stream, never two streams in one message (each partition
must see all of its streams' events, in order)."""

from __future__ import annotations

import asyncio
import uuid

import orjson

from shared.config import Settings
from shared.messages import Envelope, Topology
from shared.messaging import Binding, Bus, Delivery, MemoryBroker, Outcome, Settlement
from shared.telemetry import Telemetry


def event(type_: str, stream: str) -> Envelope:
    return Envelope(type=type_, stream_id=stream, correlation_id=uuid.uuid4(), payload={})


async def sent_as(events: list[Envelope], *, partitions: int) -> list[list[str]]:
    """The stream of each event of each message ``publish_batch`` sends, in order."""
    broker, topology = MemoryBroker(), Topology("t")
    telemetry = Telemetry.create(Settings(), "test")
    bus = Bus(
        broker,
        topology=topology,
        telemetry=telemetry,
        service="producer",
        event_log_partitions=partitions,
    )
    await bus.start()
    got: list[list[str]] = []

    async def keep(delivery: Delivery) -> Settlement:
        data = orjson.loads(delivery.body)
        got.append([e["stream_id"] for e in (data if isinstance(data, list) else [data])])
        return Settlement(Outcome.ACK)

    await broker.consume(
        "t.watch", [Binding(topology.events, "#")], keep, prefetch=1, dead_letter_exchange=""
    )
    await bus.publish_batch(events)
    await broker.drained()
    await bus.stop()
    await broker.close()
    telemetry.shutdown()
    return got


def test_one_message_per_run_of_a_type_and_one_stream_per_message_when_partitioned() -> None:
    events = [event("a.x", "s1"), event("a.x", "s2"), event("a.x", "s2"), event("a.y", "s2")]

    assert asyncio.run(sent_as(events, partitions=1)) == [["s1", "s2", "s2"], ["s2"]]
    assert asyncio.run(sent_as(events, partitions=2)) == [["s1"], ["s2", "s2"], ["s2"]]
