"""The adapter's link to RabbitMQ: one robust connection, which aio-pika opens again after a
loss, the short-lived channels of one-off checks, and the guard that bounds each operation by
the timeout and says what went wrong in dlscope's terms (``shared.errors``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import KW_ONLY, dataclass, field

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractRobustConnection
from aio_pika.exceptions import (
    AMQPError,
    AuthenticationError,
    ChannelInvalidStateError,
    ChannelNotFoundEntity,
    ChannelPreconditionFailed,
)
from yarl import URL

from shared.errors import BrokerUnavailable, ConfigurationError

__all__ = ["BROKER_ERRORS", "Link"]

# What a lost or refusing broker looks like from aio-pika and aiormq.
BROKER_ERRORS = (AMQPError, ChannelInvalidStateError, OSError, TimeoutError)


@dataclass(eq=False)
class Link:
    """The link to RabbitMQ at ``url``, which shows it as ``connection_name``; ``timeout`` is
    the longest wait for one operation, including for a reconnect in progress."""

    url: str = field(repr=False)  # with the password
    _: KW_ONLY
    connection_name: str
    timeout: float
    reconnect_interval: float
    _connection: AbstractRobustConnection | None = field(default=None, init=False)

    @property
    def is_connected(self) -> bool:
        connection = self._connection
        return connection is not None and not connection.is_closed and connection.connected.is_set()

    async def connect(self) -> None:
        if self._connection is not None:
            return
        where = URL(self.url).with_password(None)  # never log the password
        try:
            self._connection = await aio_pika.connect_robust(
                self.url,
                client_properties={"connection_name": self.connection_name},
                reconnect_interval=self.reconnect_interval,
                timeout=self.timeout,
            )
        except AuthenticationError as exc:
            raise ConfigurationError(f"RabbitMQ at {where} refused the credentials: {exc}") from exc
        except (*BROKER_ERRORS, RuntimeError) as exc:
            raise BrokerUnavailable(f"cannot connect to RabbitMQ at {where}: {exc!r}") from exc

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(*BROKER_ERRORS):
                await connection.close()

    async def ready(self) -> AbstractRobustConnection:
        if self._connection is None:
            raise ConfigurationError("the AMQP broker is not connected; call connect() first")
        # While aio-pika reconnects, wait (bounded by the caller's guard) instead of failing.
        await self._connection.connected.wait()
        return self._connection

    @contextlib.asynccontextmanager
    async def scratch_channel(self) -> AsyncIterator[AbstractChannel]:
        """A plain channel for one-off checks, whose 404s may close it harmlessly."""
        channel = aio_pika.Channel(await self.ready(), publisher_confirms=False)
        await channel.initialize(timeout=self.timeout)
        try:
            yield channel
        finally:
            if not channel.is_closed:
                with contextlib.suppress(*BROKER_ERRORS):
                    await channel.close()

    @contextlib.asynccontextmanager
    async def guard(self, action: str) -> AsyncIterator[None]:
        """Bound ``action`` by the timeout and translate aio-pika's errors into ours."""
        try:
            async with asyncio.timeout(self.timeout):
                yield
        except (ChannelNotFoundEntity, ChannelPreconditionFailed) as exc:
            # 404 or 406 (declared before with other settings): retrying cannot help.
            raise ConfigurationError(f"{action}: {exc}") from exc
        except TimeoutError as exc:
            raise BrokerUnavailable(f"{action}: no answer within {self.timeout:g} s") from exc
        except (*BROKER_ERRORS, RuntimeError) as exc:  # a bare RuntimeError: no transport
            raise BrokerUnavailable(f"{action}: {exc!r}") from exc
