"""The event store's tables, in SQLAlchemy Core, for both PostgreSQL and SQLite.

``events`` is the log and the only source of truth. ``evaluations``, ``agents``,
``artifacts`` and ``experiments`` are projections: read models derived from the log, which
``EventStore.rebuild_projections`` can throw away and derive again. ``quarantined_events``
keeps, apart from the log, events it once took that its wire contracts no longer admit
(``dlscope db check --quarantine``). The Alembic revisions in
``migrations/versions`` create exactly these tables; keep the two in step."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeEngine

__all__ = [
    "UtcDateTime",
    "agents",
    "artifacts",
    "as_utc",
    "evaluations",
    "events",
    "experiments",
    "metadata",
    "quarantined_events",
]

# Named constraints, so a later migration can drop or alter them by a predictable name.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware timestamp that always comes back as UTC.

    PostgreSQL stores ``timestamptz`` natively; SQLite keeps text without an offset, so values
    are converted to UTC before they are written and tagged as UTC when read. A naive value
    is taken to be UTC already.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else as_utc(value)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else as_utc(value)


def as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _json() -> TypeEngine[Any]:
    # JSONB on PostgreSQL: smaller, and indexable should a query ever need to look inside.
    return JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


def _document() -> TypeEngine[Any]:
    # The log's documents: JSON text on both databases. Written once, read whole, never
    # searched inside; PostgreSQL's parse into JSONB halved the log's write rate (0006).
    return JSON(none_as_null=True)


# SQLite only autoincrements an INTEGER PRIMARY KEY (an alias of the rowid), not a BIGINT.
_Position = BigInteger().with_variant(Integer(), "sqlite")


def _stored_event() -> list[Column[Any]]:
    """The columns of an event as the log stores it, after its position: the log's and the
    quarantine's (an event moved there keeps every one of them). New columns each call: a
    column belongs to one table."""
    return [
        Column("stream_id", Text, nullable=False),
        Column("version", Integer, nullable=False),
        Column("event_id", Uuid, nullable=False),
        Column("type", Text, nullable=False),
        Column("schema_version", Integer, nullable=False),
        Column("payload", _document(), nullable=False),
        # trace_id, correlation_id, causation_id, producer, traceparent, tracestate.
        Column("metadata", _document(), nullable=False),
        # Also a column (besides in ``metadata``) so one evaluation's messages can be found
        # by index.
        Column("correlation_id", Uuid, nullable=False),
        Column("occurred_at", UtcDateTime, nullable=False),
        Column("recorded_at", UtcDateTime, nullable=False),
    ]


events = Table(
    "events",
    metadata,
    # The global order of the log; AUTOINCREMENT on SQLite so a position is never reused.
    Column("position", _Position, primary_key=True, autoincrement=True),
    *_stored_event(),
    # A redelivered message carries the same event_id: the unique key makes it a no-op.
    UniqueConstraint("event_id"),
    # Two writers that both think they append version n of a stream cannot both succeed.
    UniqueConstraint("stream_id", "version"),
    Index(None, "type"),
    Index(None, "correlation_id"),
    sqlite_autoincrement=True,
)

evaluations = Table(
    "evaluations",
    metadata,
    Column("evaluation_id", Uuid, primary_key=True),
    Column("status", Text, nullable=False),
    Column("model", Text),
    # The requested constraint until a version is resolved by evaluation.scheduled.
    Column("model_version", Text),
    Column("framework", Text),
    Column("hardware", Text),
    # The latest attempt's agent, host and environment, and the number of attempts.
    Column("agent_id", Text),
    Column("host", Text),
    Column("environment", _json()),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("trace_id", Text, nullable=False),
    Column("request", _json()),
    Column("result", _json()),
    Column("error", Text),
    # The sweep it is a load of (its request's sweep label), so a sweep's page finds its loads.
    Column("sweep_id", Uuid),
    # When requested; for an evaluation whose request was never seen, its first event's time.
    Column("requested_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("last_position", BigInteger, nullable=False),
    Index(None, "requested_at"),
    Index(None, "status", "requested_at"),
    Index(None, "sweep_id"),
)

agents = Table(
    "agents",
    metadata,
    Column("agent_id", Text, primary_key=True),
    Column("host", Text),
    Column("framework", Text),
    Column("framework_version", Text),
    Column("hardware", Text),
    Column("capabilities", _json()),
    Column("heartbeat_interval_s", Float),
    Column("status", Text, nullable=False),
    Column("busy", Boolean, nullable=False),
    # Last time the agent itself spoke (online or heartbeat).
    Column("last_seen", UtcDateTime),
    # Time of the newest event applied: an older event arriving later changes no status.
    Column("updated_at", UtcDateTime, nullable=False),
    Column("last_position", BigInteger, nullable=False),
)

artifacts = Table(
    "artifacts",
    metadata,
    Column("ref", Text, primary_key=True),
    Column("kind", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("version", Text, nullable=False),
    Column("digest", Text, nullable=False),
    Column("manifest", _json(), nullable=False),
    Column("framework", Text),
    Column("task", Text),
    Column("deprecated", Boolean, nullable=False),
    Column("deprecation_reason", Text),
    Column("registered_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("last_position", BigInteger, nullable=False),
    Index(None, "kind", "name"),
)

experiments = Table(
    "experiments",
    metadata,
    Column("experiment_id", Uuid, primary_key=True),
    Column("status", Text, nullable=False),
    Column("model", Text),
    Column("trace_id", Text, nullable=False),
    Column("request", _json()),
    # The plan: member evaluations, and what could not be scheduled.
    Column("members", _json()),
    Column("skipped", _json()),
    Column("comparison", _json()),
    Column("error", Text),
    Column("requested_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("last_position", BigInteger, nullable=False),
    Index(None, "requested_at"),
    Index(None, "status", "requested_at"),
)

# Events moved out of the log because the wire contracts do not admit them (an unknown type,
# a payload failing its schema): kept as they were stored, with why, for a person to judge.
# Nothing reads them into a projection.
quarantined_events = Table(
    "quarantined_events",
    metadata,
    # The position the event had in the log: kept so its place in the order is not lost.
    Column("position", BigInteger, primary_key=True, autoincrement=False),
    *_stored_event(),
    Column("reason", Text, nullable=False),
    Column("quarantined_at", UtcDateTime, nullable=False),
    UniqueConstraint("event_id"),
)
