"""``dlscope db``: the event store's migrations, its projections rebuilt from the log, and the
check that every stored event is still admitted by the wire contracts."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from dlscope.cli.terminal import console, fail, run_or_fail
from shared.config import Settings

__all__ = ["db"]

db = typer.Typer(
    help="The event store: migrations, projections and admission checks.", no_args_is_help=True
)


@db.command("upgrade")
def db_upgrade() -> None:
    """Apply the event store's migrations (DLSCOPE_DATABASE_URL, default SQLite under home)."""
    from shared.eventstore.migrate import current_revision, upgrade

    url = Settings().resolved_database_url

    async def main() -> str | None:
        await upgrade(url)
        return await current_revision(url)

    revision = run_or_fail(main())
    console.print(f"event store at revision {revision}")


@db.command("rebuild-projections")
def db_rebuild_projections() -> None:
    """Drop the read models and rebuild them by replaying every stored event."""
    from shared.eventstore import EventStore

    url = Settings().resolved_database_url

    async def main() -> int:
        async with EventStore.from_url(url) as store:
            return await store.rebuild_projections()

    replayed = run_or_fail(main())
    console.print(f"projections rebuilt from {replayed} events")


@db.command("check")
def db_check(
    quarantine: Annotated[
        bool,
        typer.Option(
            "--quarantine",
            help="Move them out of the log into the quarantine table and rebuild the projections.",
        ),
    ] = False,
    shown: Annotated[int, typer.Option("--show", min=0, help="How many to list.")] = 20,
) -> None:
    """Find stored events the wire contracts would not admit today (unknown type, payload
    failing its schema); exits 1 if some remain in the log."""
    from shared.eventstore import EventStore
    from shared.eventstore.quarantine import (
        Inadmissible,
        by_type,
        find_inadmissible,
        quarantine_inadmissible,
    )

    url = Settings().resolved_database_url

    async def main() -> tuple[list[Inadmissible], int, int]:
        async with EventStore.from_url(url) as store:
            found = await find_inadmissible(store)
            moved = await quarantine_inadmissible(store, found) if quarantine else 0
            return found, moved, await store.count_events()

    found, moved, remaining = run_or_fail(main())
    if not found:
        console.print(f"all {remaining} stored events are admitted by the wire contracts")
        return
    console.print(f"{len(found)} stored events would not be admitted today:")
    for event_type, count in by_type(found).most_common():
        console.print(f"  {count:>6}  {escape(event_type)}", highlight=False)
    table = Table("position", "event id", "type", "stream", "reason")
    for item in found[:shown]:
        event = item.event
        reason = item.reason if len(item.reason) <= 100 else item.reason[:99] + "…"
        table.add_row(
            str(event.position),
            str(event.event_id),
            escape(event.type),
            escape(event.stream_id),
            escape(reason),
        )
    if shown:
        console.print(table)
    if quarantine:
        console.print(
            f"moved {moved} into the quarantine table (quarantined_events) and rebuilt the "
            f"projections from the {remaining} events left"
        )
        return
    raise fail("run `dlscope db check --quarantine` to move them out of the log", 1)
