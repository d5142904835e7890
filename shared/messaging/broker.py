"""The broker port: what dlscope needs from a message broker, at the level of bytes.

Two adapters implement it: ``AmqpBroker`` (RabbitMQ through aio-pika) and ``MemoryBroker``
(in-process, for the embedded mode). Both follow RabbitMQ's semantics exactly, and one
contract suite (tests/contract/test_broker.py) runs against both.

What every adapter guarantees:
- ``publish`` returns only once the broker has taken the message (publisher confirms);
  a message no queue is bound for is dropped, as RabbitMQ does without ``mandatory``.
- Topic exchanges: ``*`` matches exactly one word, ``#`` zero or more words.
- Deliveries reach the consumer concurrently, at most ``prefetch`` unsettled at a time, and
  are *started* in delivery order; the consumer's ``Settlement`` settles each one:
  ACK removes it; RETRY puts it back at the tail with ``attempt + 1``; DEAD_LETTER publishes
  it to the dead-letter exchange under its original routing key with the reason in the
  ``x-dlscope-reason`` header, then removes it; REQUEUE hands it back unsettled, as a
  consumer that went away would (RabbitMQ's ``basic.nack`` with requeue): back at its place
  in the queue, flagged ``redelivered``, its attempt unchanged. The adapter settles only
  after the consumer returns, so an effect committed by the consumer is never lost to an
  early ack.
- A message left unsettled when a consumer goes away (crash, cancel) is delivered again,
  flagged ``redelivered``.
- Partitions (``declare_partitions``): a consistent-hash exchange, as RabbitMQ's
  ``rabbitmq_consistent_hash_exchange`` plugin has it, sends each message to exactly one of
  its queues, chosen by hashing one header: the same value always lands in the same queue.
  RabbitMQ hashes a missing header as one more value, so every message without it lands in
  one same queue; nothing is dropped.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from shared.errors import ConfigurationError

__all__ = [
    "ATTEMPT_HEADER",
    "DEAD_LETTERED_FROM_HEADER",
    "REASON_HEADER",
    "STREAM_HEADER",
    "Binding",
    "Broker",
    "Consumer",
    "Delivery",
    "Outcome",
    "OutgoingMessage",
    "Settlement",
    "Subscription",
    "dead_letter_headers",
    "retry_headers",
    "undeclared_exchange",
]

ATTEMPT_HEADER = "x-dlscope-attempt"
REASON_HEADER = "x-dlscope-reason"
# The queue whose consumer dead-lettered a message: a replay goes back there alone, not to
# every queue its routing key reaches (those that handled it would get it twice).
DEAD_LETTERED_FROM_HEADER = "x-dlscope-queue"
# The stream an event belongs to, set by the bus on every message: partitions hash on it.
STREAM_HEADER = "x-dlscope-stream"
# Where a retried message was first published, so its routing key survives the retry.
ORIGIN_EXCHANGE_HEADER = "x-dlscope-exchange"
ORIGIN_ROUTING_KEY_HEADER = "x-dlscope-routing-key"


class Outcome(enum.Enum):
    ACK = "ack"
    RETRY = "retry"
    DEAD_LETTER = "dead-letter"
    # Not the message's fault (a dependency is unavailable): not counted as an attempt.
    REQUEUE = "requeue"


@dataclass(frozen=True)
class Settlement:
    """How a consumer settles one delivery: its outcome, and why."""

    outcome: Outcome
    reason: str = ""


@dataclass(frozen=True)
class OutgoingMessage:
    body: bytes
    message_id: str
    headers: Mapping[str, str] = field(default_factory=dict)
    correlation_id: str | None = None
    reply_to: str | None = None
    content_type: str = "application/json"
    # RabbitMQ confirms a persistent message on a durable queue only once it is on disk.
    # Request/reply messages are worthless after their timeout, so they skip the disk.
    persistent: bool = True


@dataclass(frozen=True)
class Delivery:
    body: bytes
    exchange: str
    routing_key: str
    headers: Mapping[str, object]
    message_id: str | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    # 1 on the first delivery; RETRY increments it.
    attempt: int = 1
    # Delivered before to a consumer that went away without settling it (it died, or its
    # connection dropped): RabbitMQ's redelivered flag.
    redelivered: bool = False


def retry_headers(delivery: Delivery) -> dict[str, str]:
    """What a retried copy of ``delivery`` carries beyond its own headers: its next attempt,
    and where it was first published (the copy comes back through the default exchange)."""
    return {
        ATTEMPT_HEADER: str(delivery.attempt + 1),
        ORIGIN_EXCHANGE_HEADER: delivery.exchange,
        ORIGIN_ROUTING_KEY_HEADER: delivery.routing_key,
    }


def dead_letter_headers(reason: str, queue: str) -> dict[str, str]:
    """What a dead letter carries beyond its own headers: why, and the queue whose consumer
    dead-lettered it."""
    return {REASON_HEADER: reason, DEAD_LETTERED_FROM_HEADER: queue}


def undeclared_exchange(name: str) -> ConfigurationError:
    """What every adapter raises for a message or binding on an exchange nobody declared."""
    return ConfigurationError(f"exchange {name!r} has not been declared")


@dataclass(frozen=True)
class Binding:
    exchange: str
    pattern: str


Consumer = Callable[[Delivery], Awaitable[Settlement]]


class Subscription(Protocol):
    async def cancel(self) -> None:
        """Stop consuming; unsettled deliveries go back to the queue."""


class Broker(Protocol):
    @property
    def is_connected(self) -> bool: ...

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    async def declare_exchanges(
        self, names: Sequence[str], *, dead_letter_exchange: str, dead_letter_queue: str
    ) -> None:
        """Declare durable topic exchanges, the dead-letter exchange, and a durable queue
        bound to it with ``#`` that keeps every dead letter for inspection."""

    async def declare_partitions(
        self,
        exchange: str,
        *,
        source: str,
        queues: Sequence[str],
        hash_header: str,
        dead_letter_exchange: str,
    ) -> None:
        """Declare ``exchange`` (durable, consistent hash on the ``hash_header`` header),
        bound to the exchange ``source`` with ``#``, and the durable ``queues`` (dead-lettering
        to ``dead_letter_exchange``), each bound to it with weight 1. Declaring every queue
        at once keeps the hash ring whole from the start, whichever consumer starts first."""

    async def declare_queue(
        self, queue: str, bindings: Sequence[Binding], *, dead_letter_exchange: str
    ) -> None:
        """Declare the durable ``queue`` (dead-lettering to ``dead_letter_exchange``) with
        its ``bindings``, before anyone consumes it: what is published meanwhile waits in it."""

    async def publish(self, exchange: str, routing_key: str, message: OutgoingMessage) -> None:
        """Publish persistently and wait for the broker's confirm. ``exchange=""`` is the
        default exchange, which routes to the queue named by ``routing_key``."""

    async def consume(
        self,
        queue: str,
        bindings: Sequence[Binding],
        consumer: Consumer,
        *,
        prefetch: int,
        dead_letter_exchange: str,
        durable: bool = True,
    ) -> Subscription:
        """Declare ``queue`` (durable, or exclusive and auto-deleted when not), bind it and
        start consuming."""

    async def declare_reply_queue(self, consumer: Consumer) -> str:
        """An exclusive, auto-deleted queue for request/reply answers; returns its name."""

    async def queue_depth(self, queue: str) -> int:
        """Messages ready in ``queue`` (not counting unsettled deliveries)."""

    async def drained(self) -> None:
        """Wait until every queue this broker's own consumers read is empty and none of
        their deliveries is being handled: whatever was published so far, and whatever
        handling it published in turn, has been handled (and settled) in this process.
        What waits in a queue no consumer of this broker reads (the dead letters, another
        process's queues) does not hold it up. The embedded mode's "everything caused so
        far has happened", e.g. before it reads the event store the recorder writes."""

    async def delete_queue(self, queue: str) -> None: ...
