"""Time from the database's return to a drained backlog, through the recorder.

A recorder runs (in this process) on RabbitMQ and a throwaway PostgreSQL cluster of its own
(never the shared one). The database is stopped, ``events`` events (five per evaluation, as
workers report them) are published meanwhile, the recorder pauses its consumption; then the
database is started again and the clock runs until every event is stored and the recorder's
queue is empty; the first event stored marks the end of the recorder's wait for its next
probe of the database (its backoff grew through the outage), the rest is the drain proper.
Then the store is checked: every event stored once, streams gap-free.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import RABBITMQ_URL
from bench.recorder_throughput import evaluation_events
from harness.deployment import purge_namespace
from harness.postgres import private_postgres, private_postgres_missing
from harness.waiting import eventually
from services.recorder import RecorderService
from shared.config import Settings
from shared.eventstore import EventStore
from shared.messaging import create_broker, paused_consumers
from shared.runtime import Runtime, running
from shared.telemetry import Telemetry

__all__ = ["run"]


async def run(evaluations: int = 2000) -> dict[str, Any]:
    missing = private_postgres_missing()
    if missing is not None:
        return {"skipped": missing}
    rng = random.Random(0)
    envelopes = [e for _ in range(evaluations) for e in evaluation_events(rng)]
    namespace = f"bench{uuid.uuid4().hex[:8]}"
    with private_postgres() as postgres, tempfile.TemporaryDirectory() as home:
        settings = Settings(
            home=Path(home),
            namespace=namespace,
            broker_url=RABBITMQ_URL,
            database_url=postgres.url,
        )
        runtime = Runtime(
            settings, Telemetry.create(settings, "bench"), create_broker(RABBITMQ_URL)
        )
        queue = runtime.topology.recorder_queue(0, 1)
        store = EventStore.from_url(postgres.url)
        try:
            async with running([RecorderService(runtime)]):
                publisher = runtime.bus("bench")
                await publisher.start()
                await asyncio.to_thread(postgres.stop)
                for start in range(0, len(envelopes), 500):
                    await asyncio.gather(
                        *(publisher.publish(e) for e in envelopes[start : start + 500])
                    )
                await eventually(lambda: _paused(runtime), timeout=120)
                backlog = await runtime.broker.queue_depth(queue)

                await asyncio.to_thread(postgres.start)
                back = time.perf_counter()

                first_stored_s: float | None = None

                async def stored_all() -> bool:
                    nonlocal first_stored_s
                    try:
                        count = await store.count_events()
                    except Exception:
                        return False
                    if count and first_stored_s is None:
                        # The recorder's next probe of the database, after its backoff.
                        first_stored_s = time.perf_counter() - back
                    return count >= len(envelopes)

                await eventually(stored_all, timeout=600)
                stored_s = time.perf_counter() - back
                first_s = stored_s if first_stored_s is None else first_stored_s
                await eventually(lambda: _drained(runtime, queue), timeout=120)
                drained_s = time.perf_counter() - back
                dead_letters = await runtime.broker.queue_depth(runtime.topology.dead_letters)
                await publisher.stop()
            checks = await _verify(store, len(envelopes))
        finally:
            await store.close()
            await runtime.close()
            await purge_namespace(RABBITMQ_URL, namespace)
    return {
        "events": len(envelopes),
        "backlog_in_queue_when_db_returned": backlog,
        "seconds_from_db_return_to_all_stored": round(stored_s, 2),
        "seconds_from_db_return_to_drained_queue": round(drained_s, 2),
        "seconds_from_db_return_to_first_stored": round(first_s, 2),
        "events_per_s_while_draining": round(len(envelopes) / stored_s),
        "events_per_s_from_first_stored": round(len(envelopes) / (stored_s - first_s)),
        "dead_letters": dead_letters,
        **checks,
    }


async def _paused(runtime: Runtime) -> bool:
    return bool(paused_consumers(runtime.broker))


async def _drained(runtime: Runtime, queue: str) -> bool:
    return await runtime.broker.queue_depth(queue) == 0 and not paused_consumers(runtime.broker)


async def _verify(store: EventStore, expected: int) -> dict[str, Any]:
    stored, after = 0, 0
    ids: set[uuid.UUID] = set()
    versions: dict[str, list[int]] = {}
    while chunk := await store.read_all(after=after, limit=5000):
        for event in chunk:
            stored += 1
            ids.add(event.event_id)
            versions.setdefault(event.stream_id, []).append(event.version)
        after = chunk[-1].position
    gaps = sum(1 for v in versions.values() if sorted(v) != list(range(1, len(v) + 1)))
    return {
        "stored": stored,
        "lost": expected - len(ids),
        "duplicated": stored - len(ids),
        "streams_with_version_gaps": gaps,
    }
