"""The recorder: the only writer of the event store.

It consumes every event (``#``) from a durable queue, so events published while it is down
wait for it, and acknowledges each only after the transaction that stores it commits.

Partitioned (``recorder_partitions`` N > 1), N recorders share the work, recorder ``i``
consuming queue ``<ns>.recorder.p<i>``: a consistent-hash exchange on the stream id sends
every event of one stream to the same queue, so each stream is still appended in publication
order by one recorder. Every recorder declares all N queues, so the hash ring is whole
before the first event, whichever starts first. An event published without the stream header
(a client publishing straight to RabbitMQ) lands in the one queue RabbitMQ hashes a missing
header to: it is recorded, but in order with the bus's events of its stream only if that
queue is also its stream's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from services.recorder.batching import BatchWriter
from shared.errors import ConfigurationError, StoreUnavailable
from shared.eventstore import EventStore
from shared.eventstore.migrate import upgrade
from shared.messages import Payload, TypedEnvelope
from shared.messaging import Binding
from shared.messaging.pause import when_available
from shared.runtime import Runtime

__all__ = ["RecorderService"]

log = logging.getLogger(__name__)

# How long the first event after a quiet spell waits for those produced with it. A dispatch's
# requested, scheduled and started arrive within ~10 ms: stored in one transaction, not three,
# they cost the recorder about 8 ms less CPU (a transaction is ~4 ms of it on a 2-core Xeon,
# whatever it holds), none of it while the evaluation is being dispatched (issue 24).
LINGER_S = 0.02


class RecorderService:
    name = "recorder"

    def __init__(self, runtime: Runtime, *, partition: int = 0) -> None:
        partitions = runtime.settings.recorder_partitions
        if not 0 <= partition < partitions:
            raise ConfigurationError(
                f"recorder partition {partition} does not exist: DLSCOPE_RECORDER_PARTITIONS is "
                f"{partitions}, so partitions are 0 to {partitions - 1}"
            )
        self.partition = partition
        self._settings = runtime.settings
        # Messages in hand at once. Enough for transactions of hundreds of single events; not
        # so many that a backlog of batches is read whole before the first is stored: every
        # event read and not yet stored is more for the cycle collector to walk, and a drain
        # ran 3-8 % faster with 200 than with 1 000 (issue 24, BENCHMARKS.md).
        self._bus = runtime.bus(self.name, prefetch=200)
        self._store: EventStore | None = None
        self._writer: BatchWriter | None = None

    async def start(self) -> None:
        url = self._settings.resolved_database_url
        # A recorder started while PostgreSQL is down (or still starting) waits for it instead
        # of exiting; the events wait in its queue meanwhile.
        await when_available(
            lambda: upgrade(url),
            unavailable=StoreUnavailable,
            what=f"{self.name}: migrating the event store",
        )
        self._store = EventStore.from_url(url)
        self._writer = BatchWriter(self._store.append_entries, linger_s=LINGER_S)
        await self._bus.start()  # declares every partition's queue (the runtime's bus does)
        topology, partitions = self._bus.topology, self._settings.recorder_partitions
        queue = topology.recorder_queue(self.partition, partitions)
        if partitions == 1:
            binding = Binding(topology.events, "#")
        else:  # the key is the weight
            binding = Binding(topology.recorder_partitions, "1")
        # Every registered type, each opened as the class its type names (an unknown type or
        # a payload its contract refuses is dead-lettered, alone if it came in a batch).
        await self._bus.handle_together(queue, [binding], self._record)

    async def stop(self) -> None:
        await self._bus.stop()
        if self._writer is not None:
            await self._writer.close()
        if self._store is not None:
            await self._store.close()

    async def _record(self, events: Sequence[TypedEnvelope[Payload]]) -> None:
        """Store one delivery's events (one, or a batch's) as their wire contracts shaped
        them. Admission is the bus's: only known types with payloads their contract accepts
        reach here, anything else is dead-lettered with the reason, as every other service
        does with the same message. The checked payload is stored, not the one that came:
        the contract bounds what it keeps (a failure reason is cut to 8 KiB), and a client
        publishing straight to RabbitMQ must not store more than it admits."""
        assert self._writer is not None, "started before consuming"
        # The store keeps each checked payload as its contract writes it back.
        stored = await self._writer.submit(events)
        for event, new in zip(events, stored, strict=True):
            if not new:
                log.debug("event %s was already stored; skipping the duplicate", event.event_id)
