"""The recorder through a database outage, on RabbitMQ and a PostgreSQL of the test's own
(stopped and started here; the shared one is never touched): nothing is dead-lettered, the
subscription shows as paused meanwhile, and once the database is back every event is stored
exactly once, every stream in order."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from bench.recorder_throughput import evaluation_events
from harness.postgres import PrivatePostgres, private_postgres, private_postgres_missing
from harness.waiting import eventually
from services.recorder import RecorderService
from shared.config import Settings
from shared.eventstore import EventStore
from shared.eventstore.engine import create_engine
from shared.messages import Envelope
from shared.messaging import create_broker, paused_consumers
from shared.runtime import Runtime, running
from shared.telemetry import Telemetry

pytestmark = [
    pytest.mark.rabbitmq,
    pytest.mark.skipif(
        private_postgres_missing() is not None, reason=str(private_postgres_missing())
    ),
]

WAIT = 60.0


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    with private_postgres() as cluster:
        yield cluster


@pytest.fixture
async def runtime(
    tmp_path: Path, namespace: str, rabbitmq_url: str, postgres: PrivatePostgres
) -> AsyncIterator[Runtime]:
    settings = Settings(
        home=tmp_path, namespace=namespace, broker_url=rabbitmq_url, database_url=postgres.url
    )
    runtime = Runtime(settings, Telemetry.create(settings, "test"), create_broker(rabbitmq_url))
    try:
        yield runtime
    finally:
        await runtime.close()
        from harness.deployment import purge_namespace

        await purge_namespace(rabbitmq_url, namespace)


async def test_recorder_waits_out_a_database_outage_and_stores_every_event_once(
    runtime: Runtime, postgres: PrivatePostgres
) -> None:
    rng = random.Random(1)
    before = [e for _ in range(5) for e in evaluation_events(rng)]
    during = [e for _ in range(10) for e in evaluation_events(rng)]
    # A redelivering broker hands some events over twice.
    duplicates = rng.sample(during, 5)
    publisher = runtime.bus("test")
    await publisher.start()
    recorder = RecorderService(runtime)
    store = EventStore.from_url(postgres.url)

    async def stored(count: int) -> bool:
        try:
            return await store.count_events() >= count
        except Exception:
            return False

    async def publish(envelopes: list[Envelope]) -> None:
        for envelope in envelopes:
            await publisher.publish(envelope)

    try:
        async with running([recorder]):
            await publish(before)
            await eventually(lambda: stored(len(before)), timeout=WAIT)

            # When the database goes away while events keep coming
            await asyncio.to_thread(postgres.stop)
            await publish([*during, *duplicates])

            # Then the recorder pauses instead of dead-lettering them
            await eventually(lambda: _paused(runtime), timeout=WAIT)
            queue = runtime.topology.recorder_queue(0, 1)
            assert queue in next(iter(paused_consumers(runtime.broker))), paused_consumers(
                runtime.broker
            )
            dead_letters = runtime.topology.dead_letters
            assert await runtime.broker.queue_depth(dead_letters) == 0

            # And once it is back, everything is stored, exactly once, in order
            await asyncio.to_thread(postgres.start)
            await eventually(lambda: stored(len(before) + len(during)), timeout=WAIT)
            await eventually(lambda: _resumed(runtime), timeout=WAIT)
            await eventually(lambda: _drained(runtime, queue), timeout=WAIT)
            assert await runtime.broker.queue_depth(dead_letters) == 0
    finally:
        await publisher.stop()
        await store.close()

    await _check_log(postgres.url, [*before, *during])


async def _paused(runtime: Runtime) -> bool:
    return bool(paused_consumers(runtime.broker))


async def _resumed(runtime: Runtime) -> bool:
    return not paused_consumers(runtime.broker)


async def _drained(runtime: Runtime, queue: str) -> bool:
    return await runtime.broker.queue_depth(queue) == 0


async def _check_log(url: str, envelopes: list[Envelope]) -> None:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            stored, distinct = (
                await connection.execute(
                    sa.text("SELECT count(*), count(DISTINCT event_id) FROM events")
                )
            ).one()
            ids = set((await connection.execute(sa.text("SELECT event_id FROM events"))).scalars())
            out_of_order = (
                await connection.execute(
                    sa.text(
                        "SELECT count(*) FROM (SELECT stream_id, max(version) AS v, count(*) AS n "
                        "FROM events GROUP BY stream_id) s WHERE v <> n"
                    )
                )
            ).scalar_one()
            # Each evaluation's five events were published in order: stored in that order.
            types = (
                await connection.execute(
                    sa.text("SELECT stream_id, type FROM events ORDER BY stream_id, version")
                )
            ).all()
    finally:
        await engine.dispose()
    assert (stored, distinct) == (len(envelopes), len(envelopes))
    assert ids == {e.event_id for e in envelopes}
    assert out_of_order == 0
    by_stream: dict[str, list[str]] = {}
    for stream, type_ in types:
        by_stream.setdefault(stream, []).append(type_)
    expected: dict[str, list[str]] = {}
    for envelope in envelopes:
        expected.setdefault(envelope.stream_id, []).append(envelope.type)
    assert by_stream == expected


async def test_a_recorder_started_while_the_database_is_down_waits_for_it(
    runtime: Runtime, postgres: PrivatePostgres
) -> None:
    rng = random.Random(2)
    events = [e for _ in range(3) for e in evaluation_events(rng)]
    publisher = runtime.bus("test")
    await publisher.start()
    queue = runtime.topology.recorder_queue(0, 1)
    try:
        async with running([RecorderService(runtime)]):  # its queue exists from a first run
            pass
        await asyncio.to_thread(postgres.stop)
        # Given a recorder (re)started while PostgreSQL is down, and events published meanwhile
        restarted = RecorderService(runtime)
        starting = asyncio.create_task(restarted.start())
        for envelope in events:
            await publisher.publish(envelope)
        assert not starting.done(), "the recorder gave up instead of waiting"
        assert await runtime.broker.queue_depth(queue) == len(events)
        # When the database is back, the recorder starts and stores them all
        await asyncio.to_thread(postgres.start)
        async with asyncio.timeout(WAIT):
            await starting
        try:
            await eventually(lambda: _drained(runtime, queue), timeout=WAIT)
        finally:
            await restarted.stop()
        assert await runtime.broker.queue_depth(runtime.topology.dead_letters) == 0
    finally:
        await publisher.stop()
    await _check_log(postgres.url, events)
