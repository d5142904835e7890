"""A deployment's dead letters on RabbitMQ: read them, and replay those whose cause has passed.

Every service dead-letters a message it cannot process to ``<ns>.dlx`` under the message's
original routing key, with the reason in the ``x-dlscope-reason`` header; the queue
``<ns>.dead-letters`` keeps them all. One message refused by several services (an invalid
event reaches every service bound to its key) is there once per service that refused it.

While a ``DeadLetterQueue`` is open it holds every dead letter fetched and unacknowledged;
only those replayed are acknowledged, and closing it hands the rest back to RabbitMQ in their
order. Reading the queue therefore never loses a dead letter, even if the command dies.

The embedded broker (``memory://``) keeps its dead letters inside the process that ran it
(``dlscope run`` / ``dlscope up``): they are gone when it exits, and no other process can
read them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from yarl import URL

from shared.errors import BrokerUnavailable, ConfigurationError, InvalidMessage
from shared.messages import Envelope, Topology, decode
from shared.messaging.amqp import AmqpBroker, HeldMessage
from shared.messaging.broker import (
    ATTEMPT_HEADER,
    DEAD_LETTERED_FROM_HEADER,
    ORIGIN_EXCHANGE_HEADER,
    ORIGIN_ROUTING_KEY_HEADER,
    REASON_HEADER,
)

__all__ = ["DeadLetter", "DeadLetterQueue", "ReplayReport"]

# Headers of one delivery's fate, which a replayed message must not carry into its next life.
_SPENT_HEADERS = (
    REASON_HEADER,
    ATTEMPT_HEADER,
    ORIGIN_EXCHANGE_HEADER,
    ORIGIN_ROUTING_KEY_HEADER,
    DEAD_LETTERED_FROM_HEADER,
)


@dataclass(frozen=True)
class DeadLetter:
    """One dead-lettered message as the dead-letter queue holds it."""

    routing_key: str
    # Where it was first published, so a replay sends it there again.
    exchange: str
    reason: str
    # The queue whose consumer refused it (None for letters older than that header): a
    # replay goes back to that queue alone.
    queue: str | None
    headers: Mapping[str, object]
    body: bytes
    message_id: str | None
    envelope: Envelope | None
    # Why the body is not an envelope at all (not JSON, fields missing); None if it is one.
    unreadable: str | None

    @property
    def event_id(self) -> str | None:
        return str(self.envelope.event_id) if self.envelope is not None else self.message_id

    @property
    def type(self) -> str | None:
        return self.envelope.type if self.envelope is not None else None

    def problem(self) -> str | None:
        """Why the wire contracts would refuse this message today; None if they admit it."""
        if self.envelope is None:
            return self.unreadable
        try:
            self.envelope.typed()
        except InvalidMessage as exc:
            return str(exc)
        return None


@dataclass
class ReplayReport:
    # The event ids published again, once each however many services had refused them.
    replayed: list[str] = field(default_factory=list)
    # Dead-letter copies acknowledged (removed from the queue) because they were replayed.
    acknowledged: int = 0
    # Left in the queue, with why the contracts still refuse them.
    still_invalid: list[tuple[DeadLetter, str]] = field(default_factory=list)


class DeadLetterQueue:
    """The dead letters of namespace ``topology`` on the RabbitMQ at ``url``."""

    def __init__(self, url: str, topology: Topology, *, timeout: float = 10.0) -> None:
        self._url = url
        self._where = URL(url).with_password(None)  # never shown with its password
        self._topology = topology
        self._timeout = timeout
        self._resources = contextlib.AsyncExitStack()
        self._broker: AmqpBroker | None = None
        self._held: list[tuple[DeadLetter, HeldMessage]] = []

    @property
    def topology(self) -> Topology:
        return self._topology

    @property
    def letters(self) -> list[DeadLetter]:
        """Every dead letter, oldest first."""
        return [letter for letter, _ in self._held]

    async def __aenter__(self) -> Self:
        async with contextlib.AsyncExitStack() as resources:
            broker = AmqpBroker(self._url, timeout=self._timeout)
            await broker.connect()
            resources.push_async_callback(broker.close)
            if not await broker.queue_exists(self._topology.dead_letters):
                raise ConfigurationError(
                    f"RabbitMQ at {self._where} has no dead-letter queue "
                    f"{self._topology.dead_letters!r}: no dlscope service of namespace "
                    f"{self._topology.namespace!r} has run there (DLSCOPE_NAMESPACE?)"
                )
            held = await resources.enter_async_context(broker.holding(self._topology.dead_letters))
            self._held = [(self._letter(message), message) for message in held]
            self._broker, self._resources = broker, resources.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._broker, self._held = None, []
        # Letting go of the letters hands back every one not acknowledged, in its place in
        # the queue, then the connection closes.
        await self._resources.aclose()

    def select(
        self, event_ids: Sequence[str] = (), *, message_type: str | None = None
    ) -> list[DeadLetter]:
        """The dead letters with one of ``event_ids`` (all when none is named) and of
        ``message_type`` (its envelope's type or its routing key) when given."""
        wanted = set(event_ids)
        return [
            letter
            for letter in self.letters
            if (not wanted or letter.event_id in wanted)
            and (message_type is None or message_type in (letter.type, letter.routing_key))
        ]

    async def replay(
        self, letters: Iterable[DeadLetter], *, queue: str | None = None
    ) -> ReplayReport:
        """Publish ``letters`` again: each straight back to the queue whose consumer refused
        it (or to ``queue``; or, for a letter that does not say, to the exchange it was
        first published to), each event once per target, and acknowledge their dead-letter
        copies. A letter the contracts still refuse stays in the queue. Storing is
        idempotent by event id, so an event replayed twice is stored once."""
        assert self._broker is not None, "used inside its context"
        letters = list(letters)
        targets = {queue} if queue is not None else {letter.queue for letter in letters}
        for name in sorted(t for t in targets if t is not None):
            # A message published to a queue that does not exist would be dropped, so this
            # must not be left to the publish.
            if not await self._broker.queue_exists(name):
                raise ConfigurationError(f"RabbitMQ at {self._where} has no queue {name!r}")
        chosen = {id(letter) for letter in letters}
        report = ReplayReport()
        published: set[tuple[str, str, str]] = set()
        for letter, message in self._held:
            if id(letter) not in chosen:
                continue
            problem = letter.problem()
            if problem is not None or letter.event_id is None:
                report.still_invalid.append((letter, problem or "it has no event id"))
                continue
            target = queue if queue is not None else letter.queue
            key = (letter.event_id, target or letter.exchange, letter.routing_key)
            if key not in published:
                try:
                    await self._publish(letter, message, target)
                except ConfigurationError as exc:
                    raise ConfigurationError(f"cannot replay {letter.event_id}: {exc}") from exc
                except BrokerUnavailable as exc:
                    raise BrokerUnavailable(
                        f"replaying {letter.event_id} failed: {exc}; what was not replayed "
                        "is still in the dead-letter queue"
                    ) from exc
                published.add(key)
                report.replayed.append(letter.event_id)
            # Only now: the adapter returns once RabbitMQ has confirmed the new copy.
            await message.ack()
            report.acknowledged += 1
        return report

    # internals

    async def _publish(self, letter: DeadLetter, message: HeldMessage, queue: str | None) -> None:
        assert self._broker is not None
        assert letter.event_id is not None
        headers = {
            name: value for name, value in letter.headers.items() if name not in _SPENT_HEADERS
        }
        if queue is not None:
            # Straight to one service's queue, through the default exchange; the origin
            # headers tell its consumer where the message was first published.
            headers[ORIGIN_EXCHANGE_HEADER] = letter.exchange
            headers[ORIGIN_ROUTING_KEY_HEADER] = letter.routing_key
            exchange, routing_key = "", queue
        else:
            exchange, routing_key = letter.exchange, letter.routing_key
        envelope = letter.envelope
        await self._broker.republish(
            message,
            exchange,
            routing_key,
            headers=headers,
            message_id=letter.event_id,
            correlation_id=None if envelope is None else str(envelope.correlation_id),
        )

    def _letter(self, message: HeldMessage) -> DeadLetter:
        headers = message.headers
        routing_key = message.routing_key
        try:
            envelope, unreadable = decode(message.body), None
        except InvalidMessage as exc:
            envelope, unreadable = None, str(exc)
        return DeadLetter(
            routing_key=routing_key,
            exchange=self._origin(headers, routing_key),
            reason=_text(headers.get(REASON_HEADER, "(no reason recorded)")),
            queue=_text(headers[DEAD_LETTERED_FROM_HEADER])
            if headers.get(DEAD_LETTERED_FROM_HEADER)
            else None,
            headers=headers,
            body=message.body,
            message_id=message.message_id,
            envelope=envelope,
            unreadable=unreadable,
        )

    def _origin(self, headers: Mapping[str, object], routing_key: str) -> str:
        recorded = headers.get(ORIGIN_EXCHANGE_HEADER)
        if recorded:  # a message retried before it was dead-lettered says where it came from
            return _text(recorded)
        # Work and calls travel on the jobs exchange; every other key is an event.
        jobs = routing_key.startswith(("job.", "rpc."))
        return self._topology.jobs if jobs else self._topology.events


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)
