"""The adapter's link to RabbitMQ: one robust connection, which aio-pika opens again after a
loss, the short-lived channels of one-off checks, and the guard that bounds each operation by
the timeout and says what went wrong in dlscope's terms (``shared.errors``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterator
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
from aiormq.exceptions import InvalidFrameError, ProbableAuthenticationError
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
            with _said_by_us():
                self._connection = await aio_pika.connect_robust(
                    self.url,
                    client_properties={"connection_name": self.connection_name},
                    reconnect_interval=self.reconnect_interval,
                    timeout=self.timeout,
                )
        except (AuthenticationError, ProbableAuthenticationError) as exc:
            user = URL(self.url).user or "guest"
            raise ConfigurationError(
                f"RabbitMQ at {_host(self.url)} refused user {user!r} (ACCESS_REFUSED): check "
                f"the user and password in the broker URL (DLSCOPE_BROKER_URL)"
            ) from exc
        except InvalidFrameError as exc:
            if "Connection.Close" not in str(exc):
                raise BrokerUnavailable(f"cannot connect to RabbitMQ at {where}: {exc!r}") from exc
            raise ConfigurationError(_vhost_refused(self.url)) from exc
        except (*BROKER_ERRORS, RuntimeError) as exc:
            raise BrokerUnavailable(_unreachable(self.url, exc)) from exc

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


# The libraries' own logs of a first connection that fails: an ERROR of aiormq's, and
# aio-pika's "Reconnecting after 1 seconds", which it does not do, since the error is raised.
_FIRST_CONNECT_LOGGERS = ("aiormq.connection", "aio_pika.robust_connection")


@contextlib.contextmanager
def _said_by_us() -> Iterator[None]:
    """The first connection's failure said once, by ``connect``'s error, not also in the
    libraries' logs; once connected, their logs of losses and reconnects are kept."""
    loggers = [logging.getLogger(name) for name in _FIRST_CONNECT_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# How a broker that refuses or cannot be reached is said: one line, which names the host (never
# the password) and what to do about it.


def _host(url: str) -> str:
    parsed = URL(url)
    return f"{parsed.host}:{parsed.port or 5672}"


def _vhost(url: str) -> str:
    """The virtual host ``url`` names, as RabbitMQ reads it: its path, "/" when empty."""
    return URL(url).path[1:] or "/"


def _vhost_refused(url: str) -> str:
    # RabbitMQ answers Connection.Open on a vhost that does not exist, or that the user may
    # not use, by closing the connection (NOT_ALLOWED); aiormq reports that as an unexpected
    # frame, without the reply text, so both causes are named.
    vhost, user = _vhost(url), URL(url).user or "guest"
    return (
        f"RabbitMQ at {_host(url)} refused vhost {vhost!r} (NOT_ALLOWED: it does not exist, "
        f"or user {user!r} has no access to it): create it (rabbitmqctl add_vhost {vhost}; "
        f"rabbitmqctl set_permissions -p {vhost} {user} '.*' '.*' '.*') or pick another "
        "broker URL (DLSCOPE_BROKER_URL)"
    )


def _unreachable(url: str, exc: BaseException) -> str:
    errno = getattr(exc, "errno", None) or getattr(exc.__cause__, "errno", None)
    if isinstance(errno, int):
        why = os.strerror(errno).lower()
    elif isinstance(exc, TimeoutError):
        why = "no answer in time"
    else:
        why = str(exc) or repr(exc)
    return (
        f"cannot connect to RabbitMQ at {_host(url)} ({why}): start it there, or point the "
        "broker URL (DLSCOPE_BROKER_URL) at one that runs"
    )
