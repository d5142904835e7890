"""Alembic environment for dlscope's event store (async template).

Two ways in:
  (a) programmatic, from ``shared.eventstore.migrate``: a sync connection (the sync face of an
      async one, inside ``AsyncConnection.run_sync``) waits in ``config.attributes["connection"]``
      and the migrations run on it, in its transaction;
  (b) the ``alembic`` command line: an async engine is built from ``sqlalchemy.url``, or if that
      is empty from ``shared.config.Settings().resolved_database_url``.
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from shared.config import Settings
from shared.eventstore.engine import WRITE, create_engine
from shared.eventstore.schema import metadata

config = context.config

# Only the command line has an ini file; a program calling migrate keeps its own logging.
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = metadata


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or Settings().resolved_database_url


def run_migrations_offline() -> None:
    """Emit the SQL instead of running it (``alembic upgrade head --sql``)."""
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=_url().startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def do_run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things in place: batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_async_migrations() -> None:
    # The event store's engine: on SQLite it creates the directory and takes the write lock.
    engine = create_engine(_url())
    try:
        async with engine.connect() as connection:
            await connection.execution_options(**WRITE)
            async with connection.begin():
                await connection.run_sync(do_run_migrations)
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        asyncio.run(run_async_migrations())
    else:
        do_run_migrations(connection)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
