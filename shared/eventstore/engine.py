"""Async engines for the event store's two databases, set up the same way everywhere.

PostgreSQL (``postgresql+asyncpg://``) for deployments; SQLite (``sqlite+aiosqlite:///path``)
for the embedded mode, where one process holds a writer (the recorder) and readers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from shared.errors import ConfigurationError

__all__ = ["WRITE", "create_engine", "describe"]

# Execution options of a connection that will write. On SQLite its transaction starts with
# BEGIN IMMEDIATE: it takes the write lock up front (waiting up to the busy timeout), instead
# of reading under a deferred BEGIN and failing with "database is locked" when it upgrades.
WRITE: dict[str, Any] = {"dlscope_write": True}

_SQLITE_BUSY_TIMEOUT_MS = 10_000


def create_engine(url: str | URL) -> AsyncEngine:
    """An engine for ``url``; nothing is connected until first use."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    options: dict[str, Any] = {
        "json_serializer": _dumps,
        "json_deserializer": orjson.loads,
    }
    if backend == "postgresql":
        # Pre-ping: a connection broken by a database restart is replaced, not handed out.
        return create_async_engine(parsed, pool_pre_ping=True, **options)
    if backend == "sqlite":
        _create_parent_directory(parsed)
        engine = create_async_engine(parsed, **options)
        _configure_sqlite(engine)
        return engine
    raise ConfigurationError(
        f"unsupported event store database {describe(parsed)!r}: use "
        "postgresql+asyncpg://… or sqlite+aiosqlite:///path"
    )


def describe(url: str | URL) -> str:
    """The URL without its password, for messages."""
    return make_url(url).render_as_string(hide_password=True)


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _create_parent_directory(url: URL) -> None:
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    try:
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot create the directory of the SQLite database {database}: {exc}"
        ) from exc


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        # SQLAlchemy, not the sqlite3 module, emits BEGIN (see _on_begin): the module's
        # legacy mode would run SELECTs and DDL outside the transaction.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # WAL: readers see the last commit while the writer appends, without blocking it.
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={_SQLITE_BUSY_TIMEOUT_MS}")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        writes = connection.get_execution_options().get("dlscope_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")
