"""The event store's database: its engine, a connection to read on, a transaction to write
in, and its errors said in dlscope's terms (``shared.errors``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Self

from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from shared.errors import ConfigurationError, StoreUnavailable
from shared.eventstore.engine import WRITE, create_engine, describe
from shared.eventstore.failures import is_conflict, is_missing_table, is_unavailable
from shared.eventstore.sql import lock_writers

__all__ = ["Database"]


class Database:
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
        async with self._reading() as connection:
            await connection.execute(text("SELECT 1"))

    @contextlib.asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        """A connection to read on, its errors translated."""
        with self._errors():
            async with self._engine.connect() as connection:
                yield connection

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
            if is_conflict(exc):
                raise  # for append to try again
            if is_missing_table(exc):
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
