"""Appending to the log inside one write transaction: which events are new (storing is
idempotent by ``event_id``), their stream versions, one insert, and the projections updated
with them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Integer, Text, Uuid, bindparam, func, insert, select, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.eventstore import schema
from shared.eventstore.entries import LogEntry
from shared.eventstore.projections import project
from shared.eventstore.sql import one_of
from shared.eventstore.views import StoredEvent

__all__ = ["append"]

_events = schema.events


async def append(connection: AsyncConnection, batch: Sequence[LogEntry]) -> list[bool]:
    """Store ``batch`` in the transaction of ``connection``; for each entry, True if it was
    stored, False if its ``event_id`` was already (also one earlier in the batch)."""
    # Round trips per batch, not per event: which ids exist, the streams' heads, one insert.
    dialect = connection.dialect.name
    ids = {item.envelope.event_id for item in batch}
    existing = set(
        await connection.scalars(
            select(_events.c.event_id).where(one_of(dialect, _events.c.event_id, ids))
        )
    )
    stored_flags: list[bool] = []
    fresh: list[LogEntry] = []
    for item in batch:
        is_new = item.envelope.event_id not in existing
        stored_flags.append(is_new)
        if is_new:
            existing.add(item.envelope.event_id)
            fresh.append(item)
    if not fresh:
        return stored_flags

    heads_query = (
        select(_events.c.stream_id, func.max(_events.c.version))
        .where(one_of(dialect, _events.c.stream_id, {e.envelope.stream_id for e in fresh}))
        .group_by(_events.c.stream_id)
    )
    heads: dict[str, int] = {
        stream: version for stream, version in await connection.execute(heads_query)
    }
    recorded_at = datetime.now(UTC)
    versions: list[int] = []
    for item in fresh:
        stream = item.envelope.stream_id
        heads[stream] = version = heads.get(stream, 0) + 1
        versions.append(version)

    positions = await _insert_events(connection, fresh, versions, recorded_at)
    await project(
        connection,
        [
            _stored(item, version, position, recorded_at)
            for item, version, position in zip(fresh, versions, positions, strict=True)
        ],
    )
    return stored_flags


def _stored(item: LogEntry, version: int, position: int, recorded_at: datetime) -> StoredEvent:
    """The event as ``StoredEvent.from_row`` reads its row back, from what wrote the row."""
    envelope = item.envelope
    return StoredEvent(
        position=position,
        stream_id=envelope.stream_id,
        version=version,
        event_id=envelope.event_id,
        type=envelope.type,
        schema_version=envelope.schema_version,
        occurred_at=item.occurred_at,
        recorded_at=recorded_at,
        trace_id=item.metadata["trace_id"],
        correlation_id=envelope.correlation_id,
        causation_id=envelope.causation_id,
        traceparent=envelope.traceparent,
        tracestate=envelope.tracestate,
        producer=envelope.producer,
        stored_payload=item.payload_json,
        checked=item.checked,
    )


# On PostgreSQL the batch goes in as one array per column: one statement text for every
# batch size (asyncpg prepares it once per connection), no per-row rendering, each JSON
# document encoded once by orjson. WITH ORDINALITY ... ORDER BY feeds the rows in batch
# order, so the sequence hands out positions in that order.
_UNNEST_INSERT = text(
    "INSERT INTO events (stream_id, version, event_id, type, schema_version, payload, "
    "metadata, correlation_id, occurred_at, recorded_at) "
    "SELECT s, v, e, t, sv, p::json, m::json, c, o, r FROM unnest("
    "CAST(:stream_id AS text[]), CAST(:version AS integer[]), CAST(:event_id AS uuid[]), "
    "CAST(:type AS text[]), CAST(:schema_version AS integer[]), CAST(:payload AS text[]), "
    "CAST(:metadata AS text[]), CAST(:correlation_id AS uuid[]), "
    "CAST(:occurred_at AS timestamptz[]), CAST(:recorded_at AS timestamptz[])"
    ") WITH ORDINALITY AS batch(s, v, e, t, sv, p, m, c, o, r, n) ORDER BY n "
    "RETURNING position"
).bindparams(
    bindparam("stream_id", type_=postgresql.ARRAY(Text)),
    bindparam("version", type_=postgresql.ARRAY(Integer)),
    bindparam("event_id", type_=postgresql.ARRAY(Uuid)),
    bindparam("type", type_=postgresql.ARRAY(Text)),
    bindparam("schema_version", type_=postgresql.ARRAY(Integer)),
    bindparam("payload", type_=postgresql.ARRAY(Text)),
    bindparam("metadata", type_=postgresql.ARRAY(Text)),
    bindparam("correlation_id", type_=postgresql.ARRAY(Uuid)),
    bindparam("occurred_at", type_=postgresql.ARRAY(DateTime(timezone=True))),
    bindparam("recorded_at", type_=postgresql.ARRAY(DateTime(timezone=True))),
)


async def _insert_events(
    connection: AsyncConnection,
    fresh: Sequence[LogEntry],
    versions: list[int],
    recorded_at: datetime,
) -> list[int]:
    """Insert ``fresh`` into the log at ``versions``; their positions, in their order."""
    postgresql = connection.dialect.name == "postgresql"
    envelopes = [item.envelope for item in fresh]
    columns: dict[str, list[Any]] = {
        "stream_id": [e.stream_id for e in envelopes],
        "version": versions,
        "event_id": [e.event_id for e in envelopes],
        "type": [e.type for e in envelopes],
        "schema_version": [e.schema_version for e in envelopes],
        # PostgreSQL takes the JSON text made when the event arrived; SQLAlchemy's JSON type
        # encodes the documents for SQLite.
        "payload": [item.payload_json if postgresql else item.payload for item in fresh],
        "metadata": [item.metadata_json if postgresql else item.metadata for item in fresh],
        "correlation_id": [e.correlation_id for e in envelopes],
        "occurred_at": [item.occurred_at for item in fresh],
        "recorded_at": [recorded_at] * len(fresh),
    }
    if not postgresql:
        rows = [
            dict(zip(columns, values, strict=True))
            for values in zip(*columns.values(), strict=True)
        ]
        # sort_by_parameter_order: positions come back in the rows' order.
        statement = insert(_events).returning(_events.c.position, sort_by_parameter_order=True)
        return list((await connection.execute(statement, rows)).scalars().all())
    positions = (await connection.execute(_UNNEST_INSERT, columns)).scalars().all()
    # Handed out in the rows' order (ORDER BY n); RETURNING's own order is not promised.
    return sorted(positions)
