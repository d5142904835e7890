"""``AmqpBroker``: the broker port over RabbitMQ. It declares what the services need there
(exchanges, queues, partitions) on one robust channel, so that aio-pika declares them again
after a reconnect (a broker that lost its data gets them back), and leaves the rest to its
parts: the link (``link``), publishing with confirms (``publishing``), a subscription per
consumed queue (``consuming``) and the tools' reads of a queue (``holding``)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import aio_pika
from aio_pika.abc import AbstractRobustChannel
from aio_pika.exceptions import ChannelNotFoundEntity
from aiormq.exceptions import ConnectionCommandInvalid

from shared.errors import ConfigurationError
from shared.messaging.amqp.consuming import AmqpSubscription
from shared.messaging.amqp.exchanges import Exchanges
from shared.messaging.amqp.holding import HeldMessage, holding
from shared.messaging.amqp.link import BROKER_ERRORS, Link
from shared.messaging.amqp.publishing import ConfirmedPublisher
from shared.messaging.broker import Binding, Consumer, OutgoingMessage

__all__ = ["AmqpBroker"]


class AmqpBroker:
    def __init__(
        self,
        url: str,
        *,
        connection_name: str | None = None,
        timeout: float = 10.0,
        reconnect_interval: float = 1.0,
    ) -> None:
        self._link = Link(
            url,
            connection_name=connection_name or f"dlscope-{uuid.uuid4().hex[:12]}",
            timeout=timeout,
            reconnect_interval=reconnect_interval,
        )
        self._exchanges = Exchanges(self._link)
        self._publisher = ConfirmedPublisher(self._link, self._exchanges)
        self._topology: AbstractRobustChannel | None = None
        self._subscriptions: set[AmqpSubscription] = set()

    @property
    def connection_name(self) -> str:
        """Shown by RabbitMQ (management UI, rabbitmqctl) as the client-provided name."""
        return self._link.connection_name

    @property
    def timeout(self) -> float:
        """Longest wait for one operation, including for a reconnect in progress."""
        return self._link.timeout

    @property
    def is_connected(self) -> bool:
        return self._link.is_connected

    async def connect(self) -> None:
        await self._link.connect()

    async def close(self) -> None:
        for subscription in list(self._subscriptions):
            await subscription.cancel()
        self._topology = None
        self._publisher.reset()
        self._exchanges.forget_all()
        await self._link.close()

    async def declare_exchanges(
        self, names: Sequence[str], *, dead_letter_exchange: str, dead_letter_queue: str
    ) -> None:
        async with self._link.guard("declaring the exchanges"):
            topology = await self._topology_channel()
            for name in (*names, dead_letter_exchange):
                await topology.declare_exchange(name, aio_pika.ExchangeType.TOPIC, durable=True)
                self._exchanges.known(name)
            queue = await topology.declare_queue(dead_letter_queue, durable=True)
            await queue.bind(dead_letter_exchange, "#")

    async def declare_partitions(
        self,
        exchange: str,
        *,
        source: str,
        queues: Sequence[str],
        hash_header: str,
        dead_letter_exchange: str,
    ) -> None:
        await self._exchanges.check(source)
        async with self._link.guard(f"declaring the partitions of {exchange!r}"):
            topology = await self._topology_channel()
            try:
                declared = await topology.declare_exchange(
                    exchange,
                    aio_pika.ExchangeType.X_CONSISTENT_HASH,
                    durable=True,
                    arguments={"hash-header": hash_header},
                )
            except ConnectionCommandInvalid as exc:  # 503 "unknown exchange type": plugin off
                raise ConfigurationError(
                    f"RabbitMQ cannot declare the consistent-hash exchange {exchange!r} ({exc}); "
                    "enable its plugin: rabbitmq-plugins enable rabbitmq_consistent_hash_exchange"
                ) from exc
            self._exchanges.known(exchange)
            await declared.bind(source, "#")
            for name in queues:
                queue = await topology.declare_queue(
                    name, durable=True, arguments=_dead_lettering(dead_letter_exchange)
                )
                # On a consistent-hash exchange the binding key is the queue's weight.
                await queue.bind(declared, "1")

    async def declare_queue(
        self, queue: str, bindings: Sequence[Binding], *, dead_letter_exchange: str
    ) -> None:
        for binding in bindings:
            await self._exchanges.check(binding.exchange)
        async with self._link.guard(f"declaring queue {queue!r}"):
            topology = await self._topology_channel()
            declared = await topology.declare_queue(
                queue, durable=True, arguments=_dead_lettering(dead_letter_exchange)
            )
            for binding in bindings:
                await declared.bind(binding.exchange, binding.pattern)

    def publish(
        self, exchange: str, routing_key: str, message: OutgoingMessage
    ) -> Coroutine[Any, Any, None]:
        # The publisher's own coroutine: a message pays for no extra await here.
        return self._publisher.publish(exchange, routing_key, message)

    async def consume(
        self,
        queue: str,
        bindings: Sequence[Binding],
        consumer: Consumer,
        *,
        prefetch: int,
        dead_letter_exchange: str,
        durable: bool = True,
    ) -> AmqpSubscription:
        # Checked on a throwaway channel first: a 404 on the subscription's robust channel
        # would have aio-pika reopen it in the background.
        for binding in bindings:
            await self._exchanges.check(binding.exchange)
        async with self._link.guard(f"consuming from queue {queue!r}"):
            channel = (await self._link.ready()).channel()
            try:
                await channel.initialize(timeout=self._link.timeout)
                await channel.set_qos(prefetch_count=prefetch)
                declared = await channel.declare_queue(
                    queue or None,
                    durable=durable,
                    exclusive=not durable,
                    auto_delete=not durable,
                    arguments=_dead_lettering(dead_letter_exchange),
                )
                for binding in bindings:
                    await declared.bind(binding.exchange, binding.pattern)
                subscription = AmqpSubscription(
                    channel,
                    declared,
                    consumer,
                    dead_letter_exchange=dead_letter_exchange,
                    publisher=self._publisher,
                    subscriptions=self._subscriptions,
                    link=self._link,
                )
                await subscription.start()
            except BaseException:
                with contextlib.suppress(*BROKER_ERRORS):
                    await channel.close()
                raise
        return subscription

    async def declare_reply_queue(self, consumer: Consumer) -> str:
        # aio-pika names the queue itself (amq_<uuid>) rather than letting RabbitMQ do it, so
        # that it can declare it again under the same name after a reconnect: the name is
        # what requesters have put in reply_to.
        subscription = await self.consume(
            "", [], consumer, prefetch=64, dead_letter_exchange="", durable=False
        )
        return subscription.queue.name

    async def queue_depth(self, queue: str) -> int:
        async with self._link.guard(f"counting the messages in queue {queue!r}"):
            try:
                async with self._link.scratch_channel() as channel:
                    declared = await channel.declare_queue(queue, passive=True)
            except ChannelNotFoundEntity:
                return 0
            return declared.declaration_result.message_count or 0

    async def drained(self, *, poll_s: float = 0.02) -> None:
        # RabbitMQ counts the ready messages only; the deliveries this process holds are its
        # own to count. A delivery on its way to its handler task is in neither for a moment:
        # quiet is believed once seen twice, a poll apart (the loop runs every ready task and
        # reads the socket in between).
        quiet = 0
        while quiet < 2:
            await asyncio.sleep(poll_s)
            subscriptions = [s for s in self._subscriptions if not s.cancelled]
            busy = any(s.handlers or s.settling for s in subscriptions)
            if not busy:
                depths = [await self.queue_depth(s.queue.name) for s in subscriptions]
                busy = any(depths)
            quiet = 0 if busy else quiet + 1

    async def delete_queue(self, queue: str) -> None:
        for subscription in [s for s in self._subscriptions if s.queue.name == queue]:
            await subscription.cancel()  # else aio-pika would declare it again to resume consuming
        async with (
            self._link.guard(f"deleting queue {queue!r}"),
            self._link.scratch_channel() as channel,
        ):
            await channel.queue_delete(queue)

    # RabbitMQ alone, beyond the port (see the package's docstring)

    async def queue_exists(self, queue: str) -> bool:
        """Whether ``queue`` has been declared."""
        async with self._link.guard(f"looking up queue {queue!r}"):
            try:
                async with self._link.scratch_channel() as channel:
                    await channel.declare_queue(queue, passive=True)
            except ChannelNotFoundEntity:
                return False
            return True

    async def delete_exchange(self, exchange: str) -> None:
        """Delete ``exchange`` and its bindings; nothing happens if there is none."""
        self._exchanges.forget(exchange)
        async with (
            self._link.guard(f"deleting exchange {exchange!r}"),
            self._link.scratch_channel() as channel,
        ):
            await channel.exchange_delete(exchange)

    def holding(self, queue: str) -> AbstractAsyncContextManager[list[HeldMessage]]:
        """Every message ready in ``queue``, oldest first, taken and held unacknowledged for
        the block. One acknowledged is gone; when the block ends, however it ends (the
        process dies), RabbitMQ hands the others back in their order: reading a queue this
        way never loses a message."""
        return holding(self._link, queue)

    async def republish(
        self,
        held: HeldMessage,
        exchange: str,
        routing_key: str,
        *,
        headers: Mapping[str, object],
        message_id: str,
        correlation_id: str | None,
    ) -> None:
        """Publish a copy of ``held``'s JSON body with ``headers``: persistent, confirmed by
        RabbitMQ before this returns, and mandatory, so that a copy no queue takes fails with
        ``ConfigurationError`` rather than vanishing. ``exchange=""`` sends it straight to the
        queue ``routing_key``."""
        await self._exchanges.check(exchange)
        copy = held.copy(headers=headers, message_id=message_id, correlation_id=correlation_id)
        await self._publisher.send(exchange, routing_key, copy, mandatory=True)

    async def _topology_channel(self) -> AbstractRobustChannel:
        if self._topology is None or self._topology.is_closed:
            self._topology = (await self._link.ready()).channel()
            await self._topology.initialize(timeout=self._link.timeout)
        return self._topology


def _dead_lettering(dead_letter_exchange: str) -> dict[str, str] | None:
    return {"x-dead-letter-exchange": dead_letter_exchange} if dead_letter_exchange else None
