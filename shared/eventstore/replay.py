"""Deriving the projections again from the whole log (``rebuild``), and taking events out of
the log into quarantine first (``quarantine``): each inside one write transaction, so
readers see the old projections until the new ones are complete."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.eventstore import schema
from shared.eventstore.projections import project
from shared.eventstore.reading import read_events
from shared.eventstore.sql import one_of

__all__ = ["quarantine", "rebuild"]

_REBUILD_CHUNK = 1000
# Positions per statement when quarantining: within SQLite's limit on bound parameters.
_QUARANTINE_CHUNK = 500

_events = schema.events
_quarantined = schema.quarantined_events


async def rebuild(connection: AsyncConnection) -> int:
    """Replay the log into emptied projections; the number of events replayed."""
    await connection.execute(delete(schema.evaluations))
    await connection.execute(delete(schema.agents))
    await connection.execute(delete(schema.artifacts))
    await connection.execute(delete(schema.experiments))
    replayed, after = 0, 0
    while chunk := await read_events(connection, after, _REBUILD_CHUNK):
        await project(connection, chunk)
        replayed += len(chunk)
        after = chunk[-1].position
    return replayed


async def quarantine(
    connection: AsyncConnection, reasons: Mapping[int, str], quarantined_at: datetime
) -> int:
    """Move the events at the positions of ``reasons`` into quarantine, each with its
    reason, and rebuild the projections without them; the number moved."""
    dialect = connection.dialect.name
    positions = sorted(reasons)
    moved = 0
    for start in range(0, len(positions), _QUARANTINE_CHUNK):
        chosen = one_of(dialect, _events.c.position, positions[start : start + _QUARANTINE_CHUNK])
        rows = (await connection.execute(select(_events).where(chosen))).mappings()
        kept = [
            {**row, "reason": reasons[row["position"]], "quarantined_at": quarantined_at}
            for row in rows
        ]
        if kept:
            await connection.execute(insert(_quarantined), kept)
            await connection.execute(delete(_events).where(chosen))
            moved += len(kept)
    if moved:
        await rebuild(connection)
    return moved
