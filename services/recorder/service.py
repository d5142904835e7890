"""The recorder: the only writer of the event store.

It consumes every event (``#``) from a durable queue, so events published while it is down
wait for it, and acknowledges each only after the transaction that stores it commits.
"""

from __future__ import annotations

import logging

from services.recorder.batching import BatchWriter
from shared.eventstore import EventStore
from shared.eventstore.migrate import upgrade
from shared.messages import Envelope
from shared.messaging import Binding
from shared.runtime import Runtime

__all__ = ["RecorderService"]

log = logging.getLogger(__name__)


class RecorderService:
    name = "recorder"

    def __init__(self, runtime: Runtime) -> None:
        self._settings = runtime.settings
        self._bus = runtime.bus(self.name, prefetch=1000)
        self._store: EventStore | None = None
        self._writer: BatchWriter | None = None

    async def start(self) -> None:
        url = self._settings.resolved_database_url
        await upgrade(url)
        self._store = EventStore.from_url(url)
        self._writer = BatchWriter(self._store.append)
        await self._bus.start()
        await self._bus.subscribe(
            self._bus.topology.queue(self.name),
            [Binding(self._bus.topology.events, "#")],
            self._record,
        )

    async def stop(self) -> None:
        await self._bus.stop()
        if self._writer is not None:
            await self._writer.close()
        if self._store is not None:
            await self._store.close()

    async def _record(self, envelope: Envelope) -> None:
        assert self._writer is not None, "started before consuming"
        if not await self._writer.submit(envelope):
            log.debug("event %s was already stored; skipping the duplicate", envelope.event_id)
