"""Consuming one queue: a robust channel per subscription, so its QoS is its own prefetch,
aio-pika restores its queue, bindings and consumer after a reconnect, and closing it hands
every unsettled delivery back to RabbitMQ. Each delivery is settled after its consumer
returns, by the settlement it returns (``shared.messaging.broker``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import MutableSet
from dataclasses import KW_ONLY, dataclass, field

from aio_pika.abc import AbstractIncomingMessage, AbstractQueue, AbstractRobustChannel, HeadersType

from shared.errors import BrokerUnavailable, ConfigurationError
from shared.messaging.acks import Acknowledgements
from shared.messaging.amqp.link import BROKER_ERRORS, Link
from shared.messaging.amqp.publishing import ConfirmedPublisher, amqp_message
from shared.messaging.broker import (
    ATTEMPT_HEADER,
    ORIGIN_EXCHANGE_HEADER,
    ORIGIN_ROUTING_KEY_HEADER,
    Consumer,
    Delivery,
    Outcome,
    Settlement,
    dead_letter_headers,
    retry_headers,
)

__all__ = ["AmqpSubscription"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class AmqpSubscription:
    """``consumer`` on ``queue``, reading it on ``channel``; one of ``subscriptions`` (the
    adapter's own) until cancelled. The link's timeout bounds each step of a cancel."""

    channel: AbstractRobustChannel
    queue: AbstractQueue
    consumer: Consumer
    _: KW_ONLY
    dead_letter_exchange: str
    publisher: ConfirmedPublisher
    subscriptions: MutableSet[AmqpSubscription]
    link: Link
    tag: str = field(default="", init=False)
    cancelled: bool = field(default=False, init=False)
    # Deliveries whose consumer is running (cancelled with the subscription: a worker goes
    # away with its job) and those being settled (finished first: a copy sent but its
    # original not acknowledged would be delivered twice).
    handlers: set[asyncio.Task[object]] = field(default_factory=set, init=False)
    settling: set[asyncio.Task[object]] = field(default_factory=set, init=False)
    # The acknowledgements owed on the channel the deliveries came in on (its tags are its
    # own: a channel aio-pika opened again after a reconnect starts them afresh).
    _acks: tuple[object, Acknowledgements] | None = field(default=None, init=False)

    async def start(self) -> None:
        self.tag = await self.queue.consume(self.handle)
        self.subscriptions.add(self)

    async def cancel(self) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        self.subscriptions.discard(self)
        # Bounded: during an outage aio-pika would wait for the connection to come back.
        with contextlib.suppress(*BROKER_ERRORS):
            async with asyncio.timeout(self.link.timeout):
                # Through the robust queue, so that aio-pika does not resume it after a reconnect.
                await self.queue.cancel(self.tag)
        current = asyncio.current_task()
        handlers = [task for task in self.handlers if task is not current]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        settling = [task for task in self.settling if task is not current]
        if settling:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.link.timeout):
                    await asyncio.gather(*settling, return_exceptions=True)
        with contextlib.suppress(*BROKER_ERRORS):
            async with asyncio.timeout(self.link.timeout):
                # RabbitMQ requeues whatever a closed channel left unacknowledged.
                await self.channel.close()

    async def handle(self, message: AbstractIncomingMessage) -> None:
        # aio-pika runs this in a task of its own per delivery, created in delivery order;
        # QoS keeps at most ``prefetch`` of them unacknowledged.
        # Known as in hand before anything else: even one left unsettled below must stop a
        # later delivery's multiple acknowledgement short of it.
        acks = self._acks_for(message)
        acks.delivered(message)
        if self.cancelled:
            return  # left unacknowledged: requeued when the channel closes
        task: asyncio.Task[object] | None = asyncio.current_task()
        if task is not None:
            self.handlers.add(task)
        try:
            delivery = _delivery(message)
            try:
                settlement = await self.consumer(delivery)
            except Exception as exc:  # a consumer returns its settlement; a crash is transient
                log.exception("consumer of %r failed; retrying the message", self.queue.name)
                settlement = Settlement(Outcome.RETRY, f"{type(exc).__name__}: {exc}")
            if task is not None:
                self.handlers.discard(task)
                self.settling.add(task)
            await self._settle(message, acks, delivery, settlement)
        except (*BROKER_ERRORS, BrokerUnavailable, ConfigurationError) as exc:
            log.warning(
                "could not settle a message on %r; RabbitMQ will redeliver it: %r",
                self.queue.name,
                exc,
            )
            # Hand it back now: left unacknowledged on a live channel it would be stuck.
            with contextlib.suppress(*BROKER_ERRORS):
                await message.nack(requeue=True)
                acks.settled(message)
        finally:
            if task is not None:
                self.handlers.discard(task)
                self.settling.discard(task)

    def _acks_for(self, message: AbstractIncomingMessage) -> Acknowledgements:
        channel = message.channel
        if self._acks is None or self._acks[0] is not channel:
            self._acks = (channel, Acknowledgements())
        return self._acks[1]

    async def _settle(
        self,
        message: AbstractIncomingMessage,
        acks: Acknowledgements,
        delivery: Delivery,
        settlement: Settlement,
    ) -> None:
        # The copy is confirmed before the original is acked: a crash in between duplicates
        # the message rather than losing it.
        if settlement.outcome is Outcome.REQUEUE:
            # Back to its place in the queue, flagged redelivered, its attempt unchanged.
            await message.nack(requeue=True)
            acks.settled(message)
            return
        queue = self.queue.name
        headers: HeadersType = dict(message.headers)
        if settlement.outcome is Outcome.RETRY:
            headers.update(retry_headers(delivery))
            await self.publisher.send("", queue, amqp_message(message, headers))
        elif settlement.outcome is Outcome.DEAD_LETTER and self.dead_letter_exchange:
            headers.update(dead_letter_headers(settlement.reason, queue))
            await self.publisher.send(
                self.dead_letter_exchange, delivery.routing_key, amqp_message(message, headers)
            )
        # With the others settled in this turn of the loop, in one frame where it can.
        await acks.ack(message)


def _delivery(message: AbstractIncomingMessage) -> Delivery:
    headers = dict(message.headers)
    return Delivery(
        body=message.body,
        # A retried message comes through the default exchange; report where it was sent.
        exchange=_text(headers.get(ORIGIN_EXCHANGE_HEADER, message.exchange or "")),
        routing_key=_text(headers.get(ORIGIN_ROUTING_KEY_HEADER, message.routing_key or "")),
        headers=headers,
        message_id=message.message_id,
        correlation_id=message.correlation_id,
        reply_to=message.reply_to,
        attempt=_attempt(headers.get(ATTEMPT_HEADER)),
        redelivered=bool(message.redelivered),
    )


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


def _attempt(value: object) -> int:
    try:
        return max(1, int(_text(value))) if value is not None else 1
    except ValueError:
        return 1
