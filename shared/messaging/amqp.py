"""The RabbitMQ adapter of the broker port, through aio-pika.

Channels, and why there are several:
- one robust channel declares the exchanges and the dead-letter queue, so that aio-pika
  declares them again after a reconnect (a broker that lost its data gets them back);
- one robust channel per subscription, so its QoS is its own prefetch, aio-pika restores its
  queue, bindings and consumer after a reconnect, and closing it hands every unsettled
  delivery back to RabbitMQ;
- one plain channel with publisher confirms for publishing, replaced when it closes: a
  channel error (an undeclared exchange) or a lost connection must not end the adapter, and
  a plain channel is never reopened behind our back by aio-pika;
- short-lived plain channels for one-off checks, whose 404s may close them harmlessly;
- a plain channel per ``holding`` block, which holds the messages it took unacknowledged
  until it closes and RabbitMQ hands them back.

Beyond the port, for RabbitMQ alone: what a tool does to a deployment's queues from outside
it. ``dlscope dlq`` reads the dead-letter queue (``holding``) and replays letters
(``republish``); the test harness checks for queues and removes a namespace's exchanges.
Nothing else in dlscope imports aio-pika (an import contract in pyproject.toml says so).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import cast

import aio_pika
from aio_pika.abc import (
    AbstractChannel,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustChannel,
    AbstractRobustConnection,
    HeadersType,
)
from aio_pika.exceptions import (
    AMQPError,
    AuthenticationError,
    ChannelInvalidStateError,
    ChannelNotFoundEntity,
    ChannelPreconditionFailed,
)
from aiormq.abc import DeliveredMessage
from aiormq.exceptions import ConnectionCommandInvalid
from yarl import URL

from shared.errors import BrokerUnavailable, ConfigurationError
from shared.messaging.acks import Acknowledgements
from shared.messaging.broker import (
    ATTEMPT_HEADER,
    DEAD_LETTERED_FROM_HEADER,
    ORIGIN_EXCHANGE_HEADER,
    ORIGIN_ROUTING_KEY_HEADER,
    REASON_HEADER,
    Binding,
    Consumer,
    Delivery,
    Outcome,
    OutgoingMessage,
    Settlement,
)

__all__ = ["AmqpBroker", "HeldMessage"]

log = logging.getLogger(__name__)

# What a lost or refusing broker looks like from aio-pika and aiormq.
_BROKER_ERRORS = (AMQPError, ChannelInvalidStateError, OSError, TimeoutError)


class _AmqpSubscription:
    def __init__(
        self, broker: AmqpBroker, channel: AbstractRobustChannel, queue: AbstractQueue
    ) -> None:
        self._broker = broker
        self._channel = channel
        self.queue = queue
        self.tag = ""
        self.cancelled = False
        # Deliveries whose consumer is running (cancelled with the subscription: a worker
        # goes away with its job) and those being settled (finished first: a copy sent but
        # its original not acknowledged would be delivered twice).
        self.handlers: set[asyncio.Task[object]] = set()
        self.settling: set[asyncio.Task[object]] = set()
        # The acknowledgements owed on the channel the deliveries came in on (its tags are its
        # own: a channel aio-pika opened again after a reconnect starts them afresh).
        self._acks: tuple[object, Acknowledgements] | None = None

    def acks(self, message: AbstractIncomingMessage) -> Acknowledgements:
        channel = message.channel
        if self._acks is None or self._acks[0] is not channel:
            self._acks = (channel, Acknowledgements())
        return self._acks[1]

    async def cancel(self) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        self._broker._subscriptions.discard(self)
        # Bounded: during an outage aio-pika would wait for the connection to come back.
        with contextlib.suppress(*_BROKER_ERRORS):
            async with asyncio.timeout(self._broker.timeout):
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
                async with asyncio.timeout(self._broker.timeout):
                    await asyncio.gather(*settling, return_exceptions=True)
        with contextlib.suppress(*_BROKER_ERRORS):
            async with asyncio.timeout(self._broker.timeout):
                # RabbitMQ requeues whatever a closed channel left unacknowledged.
                await self._channel.close()


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
        except _BROKER_ERRORS as exc:
            raise BrokerUnavailable(f"acknowledging message {self.message_id}: {exc!r}") from exc


class AmqpBroker:
    def __init__(
        self,
        url: str,
        *,
        connection_name: str | None = None,
        timeout: float = 10.0,
        reconnect_interval: float = 1.0,
    ) -> None:
        self._url = url
        # Shown by RabbitMQ (management UI, rabbitmqctl) as the client-provided name.
        self.connection_name = connection_name or f"dlscope-{uuid.uuid4().hex[:12]}"
        # Longest wait for one operation, including for a reconnect in progress.
        self.timeout = timeout
        self._reconnect_interval = reconnect_interval
        self._connection: AbstractRobustConnection | None = None
        self._topology: AbstractRobustChannel | None = None
        self._publisher: AbstractChannel | None = None
        self._publisher_lock = asyncio.Lock()
        self._known_exchanges: set[str] = {""}
        self._subscriptions: set[_AmqpSubscription] = set()

    @property
    def is_connected(self) -> bool:
        connection = self._connection
        return connection is not None and not connection.is_closed and connection.connected.is_set()

    async def connect(self) -> None:
        if self._connection is not None:
            return
        where = URL(self._url).with_password(None)  # never log the password
        try:
            self._connection = await aio_pika.connect_robust(
                self._url,
                client_properties={"connection_name": self.connection_name},
                reconnect_interval=self._reconnect_interval,
                timeout=self.timeout,
            )
        except AuthenticationError as exc:
            raise ConfigurationError(f"RabbitMQ at {where} refused the credentials: {exc}") from exc
        except (*_BROKER_ERRORS, RuntimeError) as exc:
            raise BrokerUnavailable(f"cannot connect to RabbitMQ at {where}: {exc!r}") from exc

    async def close(self) -> None:
        for subscription in list(self._subscriptions):
            await subscription.cancel()
        connection, self._connection = self._connection, None
        self._topology = self._publisher = None
        self._known_exchanges = {""}
        if connection is not None:
            with contextlib.suppress(*_BROKER_ERRORS):
                await connection.close()

    async def declare_exchanges(
        self, names: Sequence[str], *, dead_letter_exchange: str, dead_letter_queue: str
    ) -> None:
        async with self._guard("declaring the exchanges"):
            topology = await self._topology_channel()
            for name in (*names, dead_letter_exchange):
                await topology.declare_exchange(name, aio_pika.ExchangeType.TOPIC, durable=True)
                self._known_exchanges.add(name)
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
        await self._check_exchange(source)
        async with self._guard(f"declaring the partitions of {exchange!r}"):
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
            self._known_exchanges.add(exchange)
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
            await self._check_exchange(binding.exchange)
        async with self._guard(f"declaring queue {queue!r}"):
            topology = await self._topology_channel()
            declared = await topology.declare_queue(
                queue, durable=True, arguments=_dead_lettering(dead_letter_exchange)
            )
            for binding in bindings:
                await declared.bind(binding.exchange, binding.pattern)

    async def publish(self, exchange: str, routing_key: str, message: OutgoingMessage) -> None:
        await self._check_exchange(exchange)
        await self._send(exchange, routing_key, _message(message, dict(message.headers)))

    async def consume(
        self,
        queue: str,
        bindings: Sequence[Binding],
        consumer: Consumer,
        *,
        prefetch: int,
        dead_letter_exchange: str,
        durable: bool = True,
    ) -> _AmqpSubscription:
        # Checked on a throwaway channel first: a 404 on the subscription's robust channel
        # would have aio-pika reopen it in the background.
        for binding in bindings:
            await self._check_exchange(binding.exchange)
        async with self._guard(f"consuming from queue {queue!r}"):
            channel = (await self._ready()).channel()
            try:
                await channel.initialize(timeout=self.timeout)
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
                subscription = _AmqpSubscription(self, channel, declared)
                handle = self._handler(subscription, consumer, dead_letter_exchange)
                subscription.tag = await declared.consume(handle)
            except BaseException:
                with contextlib.suppress(*_BROKER_ERRORS):
                    await channel.close()
                raise
        self._subscriptions.add(subscription)
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
        async with self._guard(f"counting the messages in queue {queue!r}"):
            try:
                async with self._scratch_channel() as channel:
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
        async with self._guard(f"deleting queue {queue!r}"), self._scratch_channel() as channel:
            await channel.queue_delete(queue)

    # RabbitMQ alone, beyond the port (see the module's docstring)

    async def queue_exists(self, queue: str) -> bool:
        """Whether ``queue`` has been declared."""
        async with self._guard(f"looking up queue {queue!r}"):
            try:
                async with self._scratch_channel() as channel:
                    await channel.declare_queue(queue, passive=True)
            except ChannelNotFoundEntity:
                return False
            return True

    async def delete_exchange(self, exchange: str) -> None:
        """Delete ``exchange`` and its bindings; nothing happens if there is none."""
        self._known_exchanges.discard(exchange)
        async with (
            self._guard(f"deleting exchange {exchange!r}"),
            self._scratch_channel() as channel,
        ):
            await channel.exchange_delete(exchange)

    @contextlib.asynccontextmanager
    async def holding(self, queue: str) -> AsyncIterator[list[HeldMessage]]:
        """Every message ready in ``queue``, oldest first, taken and held unacknowledged for
        the block. One acknowledged is gone; when the block ends, however it ends (the
        process dies), RabbitMQ hands the others back in their order: reading a queue this
        way never loses a message."""
        async with contextlib.AsyncExitStack() as stack:
            async with self._guard(f"reading queue {queue!r}"):
                channel = await stack.enter_async_context(self._scratch_channel())
                declared = await channel.declare_queue(queue, passive=True)
            held: list[HeldMessage] = []
            # basic.get hands out the next message not yet taken; the taken ones stay
            # unacknowledged, so one pass sees every message once. Each get is bounded by
            # the timeout, not the pass: a long queue takes as long as it takes.
            while True:
                async with self._guard(f"reading queue {queue!r}"):
                    message = await declared.get(no_ack=False, fail=False)
                if message is None:
                    break
                held.append(HeldMessage(message))
            yield held

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
        await self._check_exchange(exchange)
        copy = aio_pika.Message(
            held.body,
            # The values came from a message RabbitMQ delivered: AMQP field values already.
            headers=cast(HeadersType, dict(headers)),
            content_type="application/json",
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            message_id=message_id,
            correlation_id=correlation_id,
        )
        await self._send(exchange, routing_key, copy, mandatory=True)

    # internals

    def _handler(
        self, subscription: _AmqpSubscription, consumer: Consumer, dead_letter_exchange: str
    ) -> Callable[[AbstractIncomingMessage], Awaitable[None]]:
        # aio-pika runs this in a task of its own per delivery, created in delivery order;
        # QoS keeps at most ``prefetch`` of them unacknowledged.
        async def handle(message: AbstractIncomingMessage) -> None:
            # Known as in hand before anything else: even one left unsettled below must stop
            # a later delivery's multiple acknowledgement short of it.
            acks = subscription.acks(message)
            acks.delivered(message)
            if subscription.cancelled:
                return  # left unacknowledged: requeued when the channel closes
            task: asyncio.Task[object] | None = asyncio.current_task()
            if task is not None:
                subscription.handlers.add(task)
            try:
                delivery = _delivery(message)
                try:
                    settlement = await consumer(delivery)
                except Exception as exc:  # a consumer returns its settlement; a crash is transient
                    log.exception(
                        "consumer of %r failed; retrying the message", subscription.queue.name
                    )
                    settlement = Settlement(Outcome.RETRY, f"{type(exc).__name__}: {exc}")
                if task is not None:
                    subscription.handlers.discard(task)
                    subscription.settling.add(task)
                await self._settle(
                    subscription.queue.name,
                    message,
                    acks,
                    delivery,
                    settlement,
                    dead_letter_exchange,
                )
            except (*_BROKER_ERRORS, BrokerUnavailable, ConfigurationError) as exc:
                log.warning(
                    "could not settle a message on %r; RabbitMQ will redeliver it: %r",
                    subscription.queue.name,
                    exc,
                )
                # Hand it back now: left unacknowledged on a live channel it would be stuck.
                with contextlib.suppress(*_BROKER_ERRORS):
                    await message.nack(requeue=True)
                    acks.settled(message)
            finally:
                if task is not None:
                    subscription.handlers.discard(task)
                    subscription.settling.discard(task)

        return handle

    async def _settle(
        self,
        queue: str,
        message: AbstractIncomingMessage,
        acks: Acknowledgements,
        delivery: Delivery,
        settlement: Settlement,
        dead_letter_exchange: str,
    ) -> None:
        # The copy is confirmed before the original is acked: a crash in between duplicates
        # the message rather than losing it.
        if settlement.outcome is Outcome.REQUEUE:
            # Back to its place in the queue, flagged redelivered, its attempt unchanged.
            await message.nack(requeue=True)
            acks.settled(message)
            return
        headers: HeadersType = dict(message.headers)
        if settlement.outcome is Outcome.RETRY:
            headers[ATTEMPT_HEADER] = str(delivery.attempt + 1)
            headers[ORIGIN_EXCHANGE_HEADER] = delivery.exchange
            headers[ORIGIN_ROUTING_KEY_HEADER] = delivery.routing_key
            await self._send("", queue, _message(message, headers))
        elif settlement.outcome is Outcome.DEAD_LETTER and dead_letter_exchange:
            headers[REASON_HEADER] = settlement.reason
            headers[DEAD_LETTERED_FROM_HEADER] = queue
            await self._send(dead_letter_exchange, delivery.routing_key, _message(message, headers))
        # With the others settled in this turn of the loop, in one frame where it can.
        await acks.ack(message)

    async def _send(
        self, exchange: str, routing_key: str, message: aio_pika.Message, *, mandatory: bool = False
    ) -> None:
        async with self._guard(f"publishing to exchange {exchange!r} with key {routing_key!r}"):
            async with self._publisher_lock:
                if self._publisher is None or self._publisher.is_closed:
                    self._publisher = aio_pika.Channel(await self._ready(), publisher_confirms=True)
                    await self._publisher.initialize(timeout=self.timeout)
                channel = self._publisher
            target = (
                channel.default_exchange
                if not exchange
                else await channel.get_exchange(exchange, ensure=False)
            )
            try:
                # Not mandatory unless asked: an unroutable message is dropped, as the port
                # says; a mandatory one comes back instead of the broker's confirm.
                confirmation = await target.publish(message, routing_key, mandatory=mandatory)
            except ChannelNotFoundEntity as exc:
                if f"exchange '{exchange}'" not in str(exc):
                    # Another publish's 404 closed the shared channel under this one, which
                    # the broker may or may not have taken: worth a retry, not a config error.
                    raise BrokerUnavailable(f"publish interrupted by {exc}") from exc
                self._known_exchanges.discard(exchange)
                raise ConfigurationError(f"exchange {exchange!r} has not been declared") from exc
            if isinstance(confirmation, DeliveredMessage):
                raise ConfigurationError(
                    f"no queue takes routing key {routing_key!r} from exchange {exchange!r}: "
                    "RabbitMQ returned the message"
                )

    async def _check_exchange(self, name: str) -> None:
        if name in self._known_exchanges:
            return
        async with self._guard(f"looking up exchange {name!r}"):
            try:
                async with self._scratch_channel() as channel:
                    await channel.declare_exchange(name, passive=True)
            except ChannelNotFoundEntity as exc:
                raise ConfigurationError(f"exchange {name!r} has not been declared") from exc
        self._known_exchanges.add(name)

    async def _topology_channel(self) -> AbstractRobustChannel:
        if self._topology is None or self._topology.is_closed:
            self._topology = (await self._ready()).channel()
            await self._topology.initialize(timeout=self.timeout)
        return self._topology

    async def _ready(self) -> AbstractRobustConnection:
        if self._connection is None:
            raise ConfigurationError("the AMQP broker is not connected; call connect() first")
        # While aio-pika reconnects, wait (bounded by the caller's guard) instead of failing.
        await self._connection.connected.wait()
        return self._connection

    @contextlib.asynccontextmanager
    async def _scratch_channel(self) -> AsyncIterator[AbstractChannel]:
        channel = aio_pika.Channel(await self._ready(), publisher_confirms=False)
        await channel.initialize(timeout=self.timeout)
        try:
            yield channel
        finally:
            if not channel.is_closed:
                with contextlib.suppress(*_BROKER_ERRORS):
                    await channel.close()

    @contextlib.asynccontextmanager
    async def _guard(self, action: str) -> AsyncIterator[None]:
        """Bound ``action`` by the timeout and translate aio-pika's errors into ours."""
        try:
            async with asyncio.timeout(self.timeout):
                yield
        except (ChannelNotFoundEntity, ChannelPreconditionFailed) as exc:
            # 404 or 406 (declared before with other settings): retrying cannot help.
            raise ConfigurationError(f"{action}: {exc}") from exc
        except TimeoutError as exc:
            raise BrokerUnavailable(f"{action}: no answer within {self.timeout:g} s") from exc
        except (*_BROKER_ERRORS, RuntimeError) as exc:  # a bare RuntimeError: no transport
            raise BrokerUnavailable(f"{action}: {exc!r}") from exc


def _dead_lettering(dead_letter_exchange: str) -> dict[str, str] | None:
    return {"x-dead-letter-exchange": dead_letter_exchange} if dead_letter_exchange else None


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


def _message(
    message: OutgoingMessage | AbstractIncomingMessage, headers: HeadersType
) -> aio_pika.Message:
    return aio_pika.Message(
        message.body,
        headers=headers,
        content_type=message.content_type,
        # Copies of incoming messages (retries, dead letters) are always kept on disk.
        delivery_mode=(
            aio_pika.DeliveryMode.NOT_PERSISTENT
            if isinstance(message, OutgoingMessage) and not message.persistent
            else aio_pika.DeliveryMode.PERSISTENT
        ),
        message_id=message.message_id,
        correlation_id=message.correlation_id,
        reply_to=message.reply_to,
    )


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


def _attempt(value: object) -> int:
    try:
        return max(1, int(_text(value))) if value is not None else 1
    except ValueError:
        return 1
