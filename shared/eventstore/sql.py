"""The few statements that PostgreSQL and SQLite spell differently."""

from __future__ import annotations

from collections.abc import Collection
from functools import cache
from typing import Any

from sqlalchemy import ColumnElement, Table, any_, bindparam, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import Insert

__all__ = ["lock_writers", "one_of", "upsert"]

# Arbitrary but fixed key of the PostgreSQL advisory lock held by every writing transaction.
_WRITERS_LOCK_KEY = 0x646C73636F7065  # "dlscope"


async def lock_writers(connection: AsyncConnection) -> None:
    """Make this transaction the only writer until it ends.

    Writers then commit in position order, so a reader following ``read_all(after=…)`` never
    sees a position appear behind one it has already passed, and two writers never race for
    the same stream version. SQLite gets the same from BEGIN IMMEDIATE (see ``engine.WRITE``);
    on PostgreSQL it is a transaction-level advisory lock (readers are not affected).
    """
    if connection.dialect.name == "postgresql":
        await connection.execute(
            text("SELECT pg_advisory_xact_lock(:key)"), {"key": _WRITERS_LOCK_KEY}
        )


def one_of(
    dialect: str, column: ColumnElement[Any], values: Collection[Any]
) -> ColumnElement[bool]:
    """``column IN values``.

    On PostgreSQL as ``= ANY(array)``: one statement text whatever the number of values, so
    asyncpg prepares it once per connection instead of once per batch size.
    """
    if dialect == "postgresql":
        array = bindparam(None, list(values), type_=postgresql.ARRAY(column.type))
        return column == any_(array)
    return column.in_(values)


@cache
def upsert(dialect: str, table: Table) -> Insert:
    """INSERT that replaces the row with the same primary key (built once per table)."""
    (key,) = table.primary_key.columns
    if dialect == "postgresql":
        statement: postgresql.Insert | sqlite.Insert = postgresql.insert(table)
    elif dialect == "sqlite":
        statement = sqlite.insert(table)
    else:  # pragma: no cover - create_engine refuses other databases
        raise NotImplementedError(f"no upsert for the {dialect} dialect")
    return statement.on_conflict_do_update(
        index_elements=[key],
        set_={c.name: statement.excluded[c.name] for c in table.columns if c is not key},
    )
