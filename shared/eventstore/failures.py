"""What the database's errors mean for the store: unavailable (worth waiting out), a
collision with a concurrent writer (worth trying again), data it refuses (never worth trying
again), or no tables yet (the migrations have not run)."""

from __future__ import annotations

from sqlalchemy import exc as sa_exc

__all__ = ["is_conflict", "is_missing_table", "is_refused", "is_unavailable"]

# SQLSTATE classes meaning "the database cannot serve us now": connection exceptions,
# rejected credentials, a missing database, too many connections, a shutting-down server.
_UNAVAILABLE_SQLSTATES = ("08", "28", "3D", "53", "57P")
# SQLSTATE classes meaning "not this data": data exceptions (a number out of a column's range,
# text the encoding cannot hold) and program limits (a value over what a column may take).
_REFUSED_SQLSTATES = ("22", "54")


def is_unavailable(exc: sa_exc.DBAPIError) -> bool:
    if exc.connection_invalidated:
        return True
    # SQLite's OperationalError is "database is locked", "unable to open database file", …
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        return True
    sqlstate = getattr(exc.orig, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate.startswith(_UNAVAILABLE_SQLSTATES)


def is_refused(exc: sa_exc.DBAPIError) -> bool:
    """The data itself refused: the same statement with the same values fails every time."""
    if isinstance(exc, sa_exc.DataError):
        return True
    sqlstate = getattr(exc.orig, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate.startswith(_REFUSED_SQLSTATES)


def is_conflict(exc: sa_exc.DBAPIError) -> bool:
    """A collision with a concurrent writer, which trying again resolves."""
    # A unique violation (the same stream version or event id, stored by the other writer),
    # or PostgreSQL's serialization failure or deadlock. Other integrity errors are bugs.
    if getattr(exc.orig, "sqlstate", None) in ("23505", "40001", "40P01"):
        return True
    return isinstance(exc, sa_exc.IntegrityError) and "UNIQUE constraint failed" in str(exc.orig)


def is_missing_table(exc: sa_exc.DBAPIError) -> bool:
    # PostgreSQL: SQLSTATE 42P01 (undefined_table); SQLite: "no such table".
    return getattr(exc.orig, "sqlstate", None) == "42P01" or "no such table" in str(exc.orig)
