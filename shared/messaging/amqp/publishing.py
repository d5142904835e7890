"""Publishing with publisher confirms, on one plain channel replaced when it closes: a channel
error (an undeclared exchange) or a lost connection must not end the adapter, and a plain
channel is never reopened behind our back by aio-pika. A publish returns once RabbitMQ has
confirmed the message."""

from __future__ import annotations

import asyncio

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, HeadersType
from aio_pika.exceptions import ChannelNotFoundEntity
from aiormq.abc import DeliveredMessage

from shared.errors import BrokerUnavailable, ConfigurationError
from shared.messaging.amqp.exchanges import Exchanges
from shared.messaging.amqp.link import Link
from shared.messaging.broker import OutgoingMessage, undeclared_exchange

__all__ = ["ConfirmedPublisher", "amqp_message"]


class ConfirmedPublisher:
    def __init__(self, link: Link, exchanges: Exchanges) -> None:
        self._link = link
        self._exchanges = exchanges
        self._channel: AbstractChannel | None = None
        self._lock = asyncio.Lock()

    def reset(self) -> None:
        """The connection is gone: the next publish opens a channel on the next one."""
        self._channel = None

    async def publish(self, exchange: str, routing_key: str, message: OutgoingMessage) -> None:
        await self._exchanges.check(exchange)
        await self.send(exchange, routing_key, amqp_message(message, dict(message.headers)))

    async def send(
        self, exchange: str, routing_key: str, message: aio_pika.Message, *, mandatory: bool = False
    ) -> None:
        """Publish ``message`` and wait for RabbitMQ's confirm. Not mandatory unless asked: an
        unroutable message is dropped, as the port says; a mandatory one comes back instead
        of the confirm, and that is a ``ConfigurationError``."""
        link = self._link
        async with link.guard(f"publishing to exchange {exchange!r} with key {routing_key!r}"):
            async with self._lock:
                if self._channel is None or self._channel.is_closed:
                    self._channel = aio_pika.Channel(await link.ready(), publisher_confirms=True)
                    await self._channel.initialize(timeout=link.timeout)
                channel = self._channel
            target = (
                channel.default_exchange
                if not exchange
                else await channel.get_exchange(exchange, ensure=False)
            )
            try:
                confirmation = await target.publish(message, routing_key, mandatory=mandatory)
            except ChannelNotFoundEntity as exc:
                if f"exchange '{exchange}'" not in str(exc):
                    # Another publish's 404 closed the shared channel under this one, which
                    # the broker may or may not have taken: worth a retry, not a config error.
                    raise BrokerUnavailable(f"publish interrupted by {exc}") from exc
                self._exchanges.forget(exchange)
                raise undeclared_exchange(exchange) from exc
            if isinstance(confirmation, DeliveredMessage):
                raise ConfigurationError(
                    f"no queue takes routing key {routing_key!r} from exchange {exchange!r}: "
                    "RabbitMQ returned the message"
                )


def amqp_message(
    message: OutgoingMessage | AbstractIncomingMessage, headers: HeadersType
) -> aio_pika.Message:
    """``message`` (one to send, or a copy of one delivered) with ``headers``."""
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
