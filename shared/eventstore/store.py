"""The event store: appends envelopes to the log and answers questions about it.

One implementation over SQLAlchemy Core for PostgreSQL and SQLite. The tables must exist
(``shared.eventstore.migrate.upgrade``); the store never creates them itself. ``EventStore``
writes (here: the transactions, idempotent appends tried again on a collision); what it
answers is in ``reading``, its database and errors in ``database``, and the statements each
write runs in ``appending`` and ``replay``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from sqlalchemy import exc as sa_exc

from shared.errors import StoreRefused, StoreUnavailable
from shared.eventstore import appending, replay
from shared.eventstore.entries import LogEntry, log_entry
from shared.eventstore.failures import is_conflict, is_refused
from shared.eventstore.reading import StoreReader
from shared.messages import Envelope, Payload

__all__ = ["EventStore"]

# Writers take turns (sql.lock_writers), so a collision with another writer (same stream
# version, same event id) should not happen; should one that bypasses the lock cause one, the
# batch is tried again from the start, re-reading what that writer stored.
_APPEND_ATTEMPTS = 5


class EventStore(StoreReader):
    """Append-only log of envelopes plus the projections derived from it."""

    async def append(
        self, envelopes: Sequence[Envelope], *, checked: Sequence[Payload] | None = None
    ) -> list[bool]:
        """Store ``envelopes`` in one transaction and update the projections with them.

        ``checked``, where the caller has them (the recorder validated each on the way in),
        are the envelopes' payloads as their contracts read them: what is stored is each one
        as its contract writes it back (bounded as the contract bounds it, e.g. a failure
        reason cut to 8 KiB), and projecting does not validate them again. Returns, for each
        envelope, True if it was stored and False if its ``event_id`` was already (a
        redelivery, also one within this batch): storing is idempotent.
        """
        batch = list(envelopes)
        payloads: list[Payload | None] = list(checked) if checked else [None] * len(batch)
        if len(payloads) != len(batch):
            raise ValueError(f"{len(batch)} envelopes but {len(payloads)} checked payloads")
        return await self.append_entries(
            [
                log_entry(envelope, payload)
                for envelope, payload in zip(batch, payloads, strict=True)
            ]
        )

    async def append_entries(self, entries: Sequence[LogEntry]) -> list[bool]:
        """``append``, of events already made ready for the log (``log_entry``): a writer that
        prepares each as it arrives keeps that work out of the transaction. Data the
        database refuses raises ``StoreRefused``, for the batch as a whole: which of its
        events is at fault, only storing them apart can tell."""
        batch = list(entries)
        if not batch:
            return []
        for attempt in range(1, _APPEND_ATTEMPTS + 1):
            try:
                with self._errors():
                    async with self._transaction(write=True) as connection:
                        return await appending.append(connection, batch)
            except sa_exc.DBAPIError as exc:
                if is_refused(exc):
                    raise StoreRefused(
                        f"the event store at {self._where} cannot hold this: {exc.orig}"
                    ) from exc
                if not is_conflict(exc):
                    raise
                if attempt == _APPEND_ATTEMPTS:
                    raise StoreUnavailable(
                        f"the event store at {self._where} rejected a batch {attempt} times "
                        f"as concurrent writers kept claiming the same stream versions: {exc}"
                    ) from exc
                # Jittered, so two writers that collided do not collide again in lockstep.
                await asyncio.sleep(random.uniform(0.005, 0.02) * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def rebuild_projections(self) -> int:
        """Derive the projections again from the whole log; the number of events replayed.

        One transaction, during which appends wait: readers see the old projections until
        the new ones are complete, and no event is missed or applied twice.
        """
        with self._errors():
            async with self._transaction(write=True) as connection:
                return await replay.rebuild(connection)

    async def quarantine(self, reasons: Mapping[int, str]) -> int:
        """Move the events at these positions out of the log into ``quarantined_events``,
        each with its reason, and derive the projections again without them; the number
        moved (a position no longer in the log is skipped).

        One transaction, as ``rebuild_projections``: readers never see the projections of a
        log that has lost some events but not yet their effects.
        """
        if not reasons:
            return 0
        quarantined_at = datetime.now(UTC)
        with self._errors():
            async with self._transaction(write=True) as connection:
                return await replay.quarantine(connection, reasons, quarantined_at)
