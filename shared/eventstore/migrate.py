"""Bring a database's schema up to date with Alembic, from inside a running event loop.

``upgrade(url)`` is what services and tests call before opening an ``EventStore``. The
``alembic`` command line does the same from the repository root (``alembic upgrade head``,
on ``DLSCOPE_DATABASE_URL`` since ``alembic.ini`` leaves ``sqlalchemy.url`` empty).
"""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.engine import Connection

from shared.config import REPOSITORY_ROOT
from shared.errors import StoreUnavailable
from shared.eventstore.engine import WRITE, create_engine, describe
from shared.eventstore.failures import is_unavailable

__all__ = ["MIGRATIONS_DIR", "current_revision", "head_revision", "upgrade"]

MIGRATIONS_DIR = REPOSITORY_ROOT / "migrations"
# Arbitrary but fixed: the PostgreSQL advisory lock that serialises concurrent upgrades.
_LOCK_KEY = 0x646C73636F7066


async def upgrade(url: str) -> None:
    """Migrate the database at ``url`` to the newest revision; a no-op when it is there.
    Raises ``StoreUnavailable`` when the database cannot be reached (worth waiting out)."""
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            await connection.execution_options(**WRITE)
            # One transaction for the whole upgrade (DDL is transactional on both databases).
            async with connection.begin():
                await connection.run_sync(_upgrade)
    except sa_exc.DBAPIError as exc:
        if not is_unavailable(exc):
            raise
        raise StoreUnavailable(f"cannot migrate {describe(url)}: unavailable: {exc}") from exc
    except (OSError, sa_exc.TimeoutError) as exc:
        raise StoreUnavailable(f"cannot migrate {describe(url)}: unavailable: {exc}") from exc
    finally:
        await engine.dispose()


async def current_revision(url: str) -> str | None:
    """The revision the database at ``url`` is at; None before the first migration."""
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(_current_revision)
    finally:
        await engine.dispose()


def head_revision() -> str:
    """The newest revision in ``migrations/versions``."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    if head is None:  # pragma: no cover - the repository always ships a revision
        raise RuntimeError(f"no migrations found in {MIGRATIONS_DIR}")
    return head


def _upgrade(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        # Services starting together all call upgrade: one migrates, the others wait for it
        # and then find nothing to do. (On SQLite, BEGIN IMMEDIATE already serialises them.)
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
    config = _config()
    # migrations/env.py runs on this connection instead of building an engine of its own.
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def _current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def _config() -> Config:
    # No alembic.ini: its logging section would reconfigure the logging of the calling process.
    config = Config()
    # ConfigParser interpolation: a literal "%" in the path must be doubled.
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    return config
