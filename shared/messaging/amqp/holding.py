"""Reading a queue from outside the deployment without losing a message (``dlscope dlq``): on
a plain channel of its own, which holds every message it took unacknowledged until it closes
and RabbitMQ hands them back, in their order."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import cast

import aio_pika
from aio_pika.abc import AbstractIncomingMessage, HeadersType

from shared.errors import BrokerUnavailable
from shared.messaging.amqp.link import BROKER_ERRORS, Link

__all__ = ["HeldMessage", "holding"]


class HeldMessage:
    """A message taken from a queue and held unacknowledged (``AmqpBroker.holding``): RabbitMQ
    keeps it for us until it is acknowledged, or hands it back to the queue, in its place."""

    def __init__(self, message: AbstractIncomingMessage) -> None:
        self._message = message
        self.body = message.body
        self.routing_key = message.routing_key or ""
        self.headers: Mapping[str, object] = dict(message.headers)
        self.message_id = message.message_id

    async def ack(self) -> None:
        """Remove it from the queue for good."""
        try:
            await self._message.ack()
        except BROKER_ERRORS as exc:
            raise BrokerUnavailable(f"acknowledging message {self.message_id}: {exc!r}") from exc

    def copy(
        self, *, headers: Mapping[str, object], message_id: str, correlation_id: str | None
    ) -> aio_pika.Message:
        """A persistent copy of its JSON body with ``headers`` (``AmqpBroker.republish``)."""
        return aio_pika.Message(
            self.body,
            # The values came from a message RabbitMQ delivered: AMQP field values already.
            headers=cast(HeadersType, dict(headers)),
            content_type="application/json",
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            message_id=message_id,
            correlation_id=correlation_id,
        )


@contextlib.asynccontextmanager
async def holding(link: Link, queue: str) -> AsyncIterator[list[HeldMessage]]:
    """Every message ready in ``queue``, oldest first, taken and held unacknowledged for the
    block (``AmqpBroker.holding``)."""
    async with contextlib.AsyncExitStack() as stack:
        async with link.guard(f"reading queue {queue!r}"):
            channel = await stack.enter_async_context(link.scratch_channel())
            declared = await channel.declare_queue(queue, passive=True)
        held: list[HeldMessage] = []
        # basic.get hands out the next message not yet taken; the taken ones stay
        # unacknowledged, so one pass sees every message once. Each get is bounded by the
        # timeout, not the pass: a long queue takes as long as it takes.
        while True:
            async with link.guard(f"reading queue {queue!r}"):
                message = await declared.get(no_ack=False, fail=False)
            if message is None:
                break
            held.append(HeldMessage(message))
        yield held
