"""``dlscope dlq``: the dead letters of a deployment on RabbitMQ (list, show, replay)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer
from rich.markup import escape
from rich.table import Table

from dlscope.cli.terminal import console, fail, run_or_fail
from dlscope.dead_letters import DeadLetter, DeadLetterQueue, ReplayReport
from shared.config import Settings
from shared.messages import Topology

__all__ = ["dlq"]

dlq = typer.Typer(
    help=(
        "Dead letters: messages the services refused, with why. Inspect them and replay "
        "those whose cause has passed (RabbitMQ, DLSCOPE_BROKER_URL)."
    ),
    no_args_is_help=True,
)

T = TypeVar("T")

# A reason is one line in a table; `dlscope dlq show` prints it whole.
_REASON_WIDTH = 100


def _open(work: Callable[[DeadLetterQueue], Awaitable[T]]) -> T:
    """Run ``work`` on the deployment's dead-letter queue; user errors end the command."""
    settings = Settings()
    if settings.broker_url.startswith("memory://"):
        raise fail(
            "the embedded broker (memory://) keeps dead letters only inside the process that "
            "ran it (`dlscope run`, `dlscope up`): they are gone when it exits and no other "
            "process can read them; set DLSCOPE_BROKER_URL to the RabbitMQ of a deployment "
            "(amqp://…)",
            2,
        )

    async def main() -> T:
        async with DeadLetterQueue(settings.broker_url, Topology(settings.namespace)) as queue:
            return await work(queue)

    return run_or_fail(main())


def _shorten(text: str, width: int = _REASON_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


@dlq.command("list")
def list_letters(
    newest: Annotated[
        int, typer.Option("--newest", "-n", min=0, help="How many of the newest to list.")
    ] = 20,
) -> None:
    """How many dead letters there are, by routing key and reason, and the newest ones."""

    async def read(queue: DeadLetterQueue) -> list[DeadLetter]:
        return queue.letters

    letters = _open(read)
    if not letters:
        console.print("no dead letters")
        return
    events = {letter.event_id for letter in letters if letter.event_id is not None}
    console.print(
        f"{len(letters)} dead letters ({len(events)} distinct event ids; one message refused "
        "by several services is there once per service)"
    )
    groups = Counter((letter.routing_key, letter.reason) for letter in letters)
    summary = Table("count", "routing key", "reason", title="by routing key and reason")
    for (routing_key, reason), count in groups.most_common():
        summary.add_row(str(count), escape(routing_key), escape(_shorten(reason)))
    console.print(summary)
    if newest:
        shown = letters[-newest:][::-1]
        table = Table("event id", "type", "routing key", "reason", title=f"newest {len(shown)}")
        for letter in shown:
            table.add_row(
                letter.event_id or "-",
                escape(letter.type or "-"),
                escape(letter.routing_key),
                escape(_shorten(letter.reason)),
            )
        console.print(table)


@dlq.command("show")
def show(
    event_id: Annotated[str, typer.Argument(help="The event id (or AMQP message id).")],
) -> None:
    """A dead letter's envelope and headers: every copy of it, with each one's reason."""

    async def read(queue: DeadLetterQueue) -> list[DeadLetter]:
        return queue.select([event_id])

    copies = _open(read)
    if not copies:
        raise fail(
            f"no dead letter has event id {event_id}; `dlscope dlq list` shows those there", 1
        )
    for number, letter in enumerate(copies, start=1):
        console.rule(f"copy {number} of {len(copies)}: {letter.routing_key}")
        console.print(f"reason: {escape(letter.reason)}", highlight=False)
        where = (
            f"queue {letter.queue!r}, which refused it"
            if letter.queue is not None
            else f"exchange {letter.exchange!r}"
        )
        console.print(f"replays to: {where}, routing key {letter.routing_key!r}")
        headers = {name: _plain(value) for name, value in letter.headers.items()}
        console.print("headers:")
        console.print_json(json.dumps(headers, default=str))
        if letter.envelope is not None:
            console.print("envelope:")
            console.print_json(letter.envelope.model_dump_json())
        else:
            console.print(f"body (not an envelope: {escape(letter.unreadable or '')}):")
            console.print(repr(letter.body), highlight=False, soft_wrap=True)


@dlq.command("replay")
def replay(
    event_ids: Annotated[
        list[str] | None, typer.Argument(help="Event ids to replay.", show_default=False)
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Replay every dead letter.")] = False,
    message_type: Annotated[
        str | None,
        typer.Option("--type", help="Only dead letters of this type (or routing key)."),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue",
            help=(
                "Send them all to this one queue instead: a service's name (`recorder` is "
                "the queue <DLSCOPE_NAMESPACE>.recorder) or a full queue name starting with "
                "the namespace; it must exist."
            ),
        ),
    ] = None,
) -> None:
    """Publish dead letters again and remove them from the dead-letter queue. Each goes
    straight to the queue of the service that refused it, through the default exchange, so no
    other service gets it twice; an event several services refused goes once to each of their
    queues. A letter from before dlscope recorded the queue goes to the exchange and routing
    key it was first published to, so every service bound to that key gets it again. With
    --queue, all go to that one queue. Letters the wire contracts still refuse stay there.
    Idempotent: the event store keeps one copy of an event id, however often it is replayed."""
    ids = event_ids or []
    if ids and all_:
        raise fail("name event ids or --all, not both", 2)
    if not ids and not all_ and message_type is None:
        raise fail("name the event ids to replay, or --all (optionally with --type)", 2)

    async def work(dead_letters: DeadLetterQueue) -> ReplayReport:
        chosen = dead_letters.select(ids, message_type=message_type)
        missing = sorted(set(ids) - {letter.event_id for letter in chosen})
        if missing:
            raise fail(
                f"no dead letter has event id {', '.join(missing)}"
                + (f" and type {message_type!r}" if message_type else "")
                + "; nothing was replayed",
                1,
            )
        target = None
        if queue is not None:
            prefix = f"{dead_letters.topology.namespace}."
            target = queue if queue.startswith(prefix) else dead_letters.topology.queue(queue)
        return await dead_letters.replay(chosen, queue=target)

    report = _open(work)
    console.print(
        f"replayed {len(report.replayed)} events "
        f"({report.acknowledged} dead-letter copies removed from the queue)"
    )
    if report.still_invalid:
        console.print(
            f"{len(report.still_invalid)} still refused by the wire contracts, left in the "
            "dead-letter queue:"
        )
        reasons = Counter(reason for _, reason in report.still_invalid)
        for reason, count in reasons.most_common():
            console.print(f"  {count:>6}  {escape(_shorten(reason))}", highlight=False)
        if ids:  # the ones asked for by name were not all replayed
            raise typer.Exit(1)


def _plain(value: object) -> object:
    return value.decode(errors="replace") if isinstance(value, bytes | bytearray) else value
