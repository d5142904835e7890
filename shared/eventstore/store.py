"""The event store: appends envelopes to the log and answers questions about it.

One implementation over SQLAlchemy Core for PostgreSQL and SQLite. The tables must exist
(``shared.eventstore.migrate.upgrade``); the store never creates them itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self, cast

import orjson
from sqlalchemy import DateTime, Integer, Text, Uuid, bindparam, delete, func, insert, select, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from shared.errors import ConfigurationError, StoreUnavailable
from shared.eventstore import schema
from shared.eventstore.engine import WRITE, create_engine, describe
from shared.eventstore.projections import project
from shared.eventstore.sql import lock_writers, one_of
from shared.eventstore.views import (
    EVALUATION_STATUSES,
    EXPERIMENT_STATUSES,
    AgentView,
    ArtifactView,
    EvaluationView,
    ExperimentView,
    StoredEvent,
)
from shared.messages import Envelope, EnvelopeFields, Payload, TypedEnvelope
from shared.telemetry import trace_id_of

__all__ = ["EventStore", "LogEntry", "log_entry"]

# Writers take turns (sql.lock_writers), so a collision with another writer (same stream
# version, same event id) should not happen; should one that bypasses the lock cause one, the
# batch is tried again from the start, re-reading what that writer stored.
_APPEND_ATTEMPTS = 5
_REBUILD_CHUNK = 1000
# Positions per statement when quarantining: within SQLite's limit on bound parameters.
_QUARANTINE_CHUNK = 500

_events = schema.events
_evaluations = schema.evaluations
_agents = schema.agents
_artifacts = schema.artifacts
_experiments = schema.experiments
_quarantined = schema.quarantined_events


class EventStore:
    """Append-only log of envelopes plus the projections derived from it."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._where = describe(engine.url)

    @classmethod
    def from_url(cls, url: str) -> Self:
        """A store on ``postgresql+asyncpg://…`` or ``sqlite+aiosqlite:///path``."""
        return cls(create_engine(url))

    async def close(self) -> None:
        await self._engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def ping(self) -> None:
        """Raise ``StoreUnavailable`` unless the database answers."""
        with self._errors():
            async with self._engine.connect() as connection:
                await connection.execute(text("SELECT 1"))

    # --- writing ------------------------------------------------------------------------------

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
        prepares each as it arrives keeps that work out of the transaction."""
        batch = list(entries)
        if not batch:
            return []
        for attempt in range(1, _APPEND_ATTEMPTS + 1):
            try:
                with self._errors():
                    async with self._transaction(write=True) as connection:
                        return await _append(connection, batch)
            except sa_exc.DBAPIError as exc:
                if not _is_conflict(exc):
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
                return await _rebuild(connection)

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
        moved = 0
        with self._errors():
            async with self._transaction(write=True) as connection:
                dialect = connection.dialect.name
                positions = sorted(reasons)
                for start in range(0, len(positions), _QUARANTINE_CHUNK):
                    chosen = one_of(
                        dialect, _events.c.position, positions[start : start + _QUARANTINE_CHUNK]
                    )
                    rows = (await connection.execute(select(_events).where(chosen))).mappings()
                    kept = [
                        {
                            **row,
                            "reason": reasons[row["position"]],
                            "quarantined_at": quarantined_at,
                        }
                        for row in rows
                    ]
                    if kept:
                        await connection.execute(insert(_quarantined), kept)
                        await connection.execute(delete(_events).where(chosen))
                        moved += len(kept)
                if moved:
                    await _rebuild(connection)
        return moved

    async def count_quarantined(self) -> int:
        """How many events ``quarantine`` has moved out of the log so far."""
        with self._errors():
            async with self._engine.connect() as connection:
                count = await connection.scalar(select(func.count()).select_from(_quarantined))
        return int(count or 0)

    # --- reading ------------------------------------------------------------------------------

    async def get_evaluation(self, evaluation_id: uuid.UUID) -> EvaluationView | None:
        query = select(_evaluations).where(_evaluations.c.evaluation_id == evaluation_id)
        with self._errors():
            async with self._engine.connect() as connection:
                row = (await connection.execute(query)).mappings().first()
        return None if row is None else EvaluationView.from_row(row)

    async def list_evaluations(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        status: str | None = None,
        model: str | None = None,
        framework: str | None = None,
        hardware: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[EvaluationView]:
        """Evaluations, most recently requested first; only those in ``status``, of
        ``model``, ``framework`` and ``hardware``, requested in [``since``, ``until``), for
        those given."""
        if status is not None and status not in EVALUATION_STATUSES:
            raise ValueError(f"unknown status {status!r}; one of {', '.join(EVALUATION_STATUSES)}")
        if limit < 0 or offset < 0:
            raise ValueError("limit and offset must not be negative")
        query = (
            select(_evaluations)
            .order_by(_evaluations.c.requested_at.desc(), _evaluations.c.evaluation_id.desc())
            .limit(limit)
            .offset(offset)
        )
        for column, value in (
            (_evaluations.c.status, status),
            (_evaluations.c.model, model),
            (_evaluations.c.framework, framework),
            (_evaluations.c.hardware, hardware),
        ):
            if value is not None:
                query = query.where(column == value)
        if since is not None:
            query = query.where(_evaluations.c.requested_at >= since)
        if until is not None:
            query = query.where(_evaluations.c.requested_at < until)
        with self._errors():
            async with self._engine.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [EvaluationView.from_row(row) for row in rows]

    async def get_evaluations(self, evaluation_ids: Sequence[uuid.UUID]) -> list[EvaluationView]:
        """The evaluations among ``evaluation_ids`` that have a row, in no particular order."""
        if not evaluation_ids:
            return []
        with self._errors():
            async with self._engine.connect() as connection:
                column = _evaluations.c.evaluation_id
                query = select(_evaluations).where(
                    one_of(connection.dialect.name, column, set(evaluation_ids))
                )
                rows = (await connection.execute(query)).mappings().all()
        return [EvaluationView.from_row(row) for row in rows]

    async def get_experiment(self, experiment_id: uuid.UUID) -> ExperimentView | None:
        query = select(_experiments).where(_experiments.c.experiment_id == experiment_id)
        with self._errors():
            async with self._engine.connect() as connection:
                row = (await connection.execute(query)).mappings().first()
        return None if row is None else ExperimentView.from_row(row)

    async def list_experiments(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        status: str | None = None,
        model: str | None = None,
    ) -> list[ExperimentView]:
        """Experiments, most recently requested first; only those in ``status`` and of the
        reference ``model``, if given."""
        if status is not None and status not in EXPERIMENT_STATUSES:
            raise ValueError(f"unknown status {status!r}; one of {', '.join(EXPERIMENT_STATUSES)}")
        if limit < 0 or offset < 0:
            raise ValueError("limit and offset must not be negative")
        query = (
            select(_experiments)
            .order_by(_experiments.c.requested_at.desc(), _experiments.c.experiment_id.desc())
            .limit(limit)
            .offset(offset)
        )
        if status is not None:
            query = query.where(_experiments.c.status == status)
        if model is not None:
            query = query.where(_experiments.c.model == model)
        with self._errors():
            async with self._engine.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [ExperimentView.from_row(row) for row in rows]

    async def list_agents(self) -> list[AgentView]:
        query = select(_agents).order_by(_agents.c.agent_id)
        with self._errors():
            async with self._engine.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [AgentView.from_row(row) for row in rows]

    async def jobs_by_agent(self) -> dict[str, dict[str, int]]:
        """How many evaluations each agent holds, by status: ``running`` (running there now),
        ``completed`` and ``failed`` (run there: the latest attempt's agent), ``scheduled``
        (pinned to it, not started yet)."""
        query = (
            select(_evaluations.c.agent_id, _evaluations.c.status, func.count())
            .where(_evaluations.c.agent_id.is_not(None))
            .group_by(_evaluations.c.agent_id, _evaluations.c.status)
        )
        with self._errors():
            async with self._engine.connect() as connection:
                rows = (await connection.execute(query)).all()
        counts: dict[str, dict[str, int]] = {}
        for agent_id, status, count in rows:
            counts.setdefault(agent_id, {})[status] = int(count)
        return counts

    async def list_artifacts(
        self,
        *,
        kind: str | None = None,
        name: str | None = None,
        framework: str | None = None,
        task: str | None = None,
        include_deprecated: bool = False,
    ) -> list[ArtifactView]:
        """Registered manifest versions, by kind and name, oldest version first."""
        query = select(_artifacts).order_by(
            _artifacts.c.kind, _artifacts.c.name, _artifacts.c.registered_at
        )
        for column, value in (
            (_artifacts.c.kind, kind),
            (_artifacts.c.name, name),
            (_artifacts.c.framework, framework),
            (_artifacts.c.task, task),
        ):
            if value is not None:
                query = query.where(column == value)
        if not include_deprecated:
            query = query.where(_artifacts.c.deprecated.is_(False))
        # A deprecation that overtook its registration leaves a row without a manifest.
        query = query.where(_artifacts.c.digest != "")
        with self._errors():
            async with self._engine.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [ArtifactView.from_row(row) for row in rows]

    async def stream_events(self, stream_id: str) -> list[StoredEvent]:
        """One stream's events in version order (1, 2, 3, …)."""
        query = select(_events).where(_events.c.stream_id == stream_id).order_by(_events.c.version)
        with self._errors():
            async with self._engine.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [StoredEvent.from_row(row) for row in rows]

    async def read_streams(self, stream_ids: Collection[str]) -> list[StoredEvent]:
        """The events of several streams (e.g. an experiment and its members'), in position
        order: the order they were recorded in."""
        if not stream_ids:
            return []
        with self._errors():
            async with self._engine.connect() as connection:
                column = _events.c.stream_id
                query = (
                    select(_events)
                    .where(one_of(connection.dialect.name, column, set(stream_ids)))
                    .order_by(_events.c.position)
                )
                rows = (await connection.execute(query)).mappings().all()
        return [StoredEvent.from_row(row) for row in rows]

    async def read_all(self, *, after: int = 0, limit: int = 1000) -> list[StoredEvent]:
        """Up to ``limit`` events with a position greater than ``after``, in position order."""
        with self._errors():
            async with self._engine.connect() as connection:
                return await _read_events(connection, after, limit)

    async def count_events(self) -> int:
        with self._errors():
            async with self._engine.connect() as connection:
                count = await connection.scalar(select(func.count()).select_from(_events))
        return int(count or 0)

    # --- plumbing -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _transaction(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        async with self._engine.connect() as connection:
            if write:
                await connection.execution_options(**WRITE)
            async with connection.begin():
                if write:
                    # Appends (and a rebuild) take turns; reads go on meanwhile.
                    await lock_writers(connection)
                yield connection

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Translate the database's errors into dlscope's (see ``shared.errors``)."""
        try:
            yield
        except sa_exc.DBAPIError as exc:
            if _is_conflict(exc):
                raise  # for append to try again
            if _is_missing_table(exc):
                raise ConfigurationError(
                    f"the event store at {self._where} has no tables yet: run the migrations "
                    "(shared.eventstore.migrate.upgrade) first"
                ) from exc
            if is_unavailable(exc):
                raise self._unavailable(exc) from exc
            raise
        except (OSError, sa_exc.TimeoutError) as exc:
            # Refused or timed-out connections surface as OSError, before any DBAPI wrapping.
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(f"the event store at {self._where} is unavailable: {exc}")


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One event made ready for the log, all but what its transaction gives it (its stream
    version, its position, the time it was recorded): its payload as stored (as its contract
    writes it back, where it was read, ``checked``) as JSON text, and its metadata."""

    envelope: EnvelopeFields
    checked: Payload | None
    payload_json: str
    metadata: dict[str, Any]
    metadata_json: str
    # As stored: in UTC, so projections see the same value now and when rebuilt.
    occurred_at: datetime

    @property
    def payload(self) -> dict[str, Any]:
        """The payload as stored, read back from its text when asked (SQLite's insert): events
        waiting for their transaction hold one string each, not a tree of objects for the
        cycle collector to walk again and again (issue 24)."""
        return cast(dict[str, Any], orjson.loads(self.payload_json))


def log_entry(
    envelope: Envelope | TypedEnvelope[Payload], checked: Payload | None = None
) -> LogEntry:
    """``envelope`` ready for the log; ``checked``, its payload as its contract read it (a
    ``TypedEnvelope``'s payload is)."""
    if isinstance(envelope, TypedEnvelope):
        checked = envelope.payload
    if checked is None:
        assert isinstance(envelope, Envelope), "a TypedEnvelope's payload is checked"
        return _log_entry(envelope, None, orjson.dumps(envelope.payload).decode())
    # Its contract writes it as JSON text at once, with no documents made on the way.
    return _log_entry(envelope, checked, checked.__pydantic_serializer__.to_json(checked).decode())


def _log_entry(envelope: EnvelopeFields, checked: Payload | None, payload_json: str) -> LogEntry:
    # The ids as UUIDs: orjson writes them as their text, as it does for SQLite's column.
    metadata = {
        "trace_id": trace_id_of(envelope.traceparent, envelope.correlation_id),
        "correlation_id": envelope.correlation_id,
        "causation_id": envelope.causation_id,
        "producer": envelope.producer,
        "traceparent": envelope.traceparent,
        "tracestate": envelope.tracestate,
    }
    return LogEntry(
        envelope=envelope,
        checked=checked,
        payload_json=payload_json,
        metadata=metadata,
        metadata_json=orjson.dumps(metadata).decode(),
        occurred_at=schema.as_utc(envelope.occurred_at),
    )


async def _append(connection: AsyncConnection, batch: Sequence[LogEntry]) -> list[bool]:
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


async def _rebuild(connection: AsyncConnection) -> int:
    await connection.execute(delete(_evaluations))
    await connection.execute(delete(_agents))
    await connection.execute(delete(_artifacts))
    await connection.execute(delete(_experiments))
    replayed, after = 0, 0
    while chunk := await _read_events(connection, after, _REBUILD_CHUNK):
        await project(connection, chunk)
        replayed += len(chunk)
        after = chunk[-1].position
    return replayed


async def _read_events(connection: AsyncConnection, after: int, limit: int) -> list[StoredEvent]:
    query = (
        select(_events).where(_events.c.position > after).order_by(_events.c.position).limit(limit)
    )
    rows = (await connection.execute(query)).mappings().all()
    return [StoredEvent.from_row(row) for row in rows]


# SQLSTATE classes meaning "the database cannot serve us now": connection exceptions,
# rejected credentials, a missing database, too many connections, a shutting-down server.
_UNAVAILABLE_SQLSTATES = ("08", "28", "3D", "53", "57P")


def is_unavailable(exc: sa_exc.DBAPIError) -> bool:
    if exc.connection_invalidated:
        return True
    # SQLite's OperationalError is "database is locked", "unable to open database file", …
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        return True
    sqlstate = getattr(exc.orig, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate.startswith(_UNAVAILABLE_SQLSTATES)


def _is_conflict(exc: sa_exc.DBAPIError) -> bool:
    """A collision with a concurrent writer, which trying again resolves."""
    # A unique violation (the same stream version or event id, stored by the other writer),
    # or PostgreSQL's serialization failure or deadlock. Other integrity errors are bugs.
    if getattr(exc.orig, "sqlstate", None) in ("23505", "40001", "40P01"):
        return True
    return isinstance(exc, sa_exc.IntegrityError) and "UNIQUE constraint failed" in str(exc.orig)


def _is_missing_table(exc: sa_exc.DBAPIError) -> bool:
    # PostgreSQL: SQLSTATE 42P01 (undefined_table); SQLite: "no such table".
    return getattr(exc.orig, "sqlstate", None) == "42P01" or "no such table" in str(exc.orig)
