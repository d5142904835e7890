"""The exchanges the adapter knows to exist on RabbitMQ: declared or looked up by it once, so
that a publish need not ask again (``""``, the default exchange, always exists)."""

from __future__ import annotations

from aio_pika.exceptions import ChannelNotFoundEntity

from shared.messaging.amqp.link import Link
from shared.messaging.broker import undeclared_exchange

__all__ = ["Exchanges"]


class Exchanges:
    def __init__(self, link: Link) -> None:
        self._link = link
        self._known: set[str] = {""}

    def known(self, name: str) -> None:
        """``name`` was declared, or found declared."""
        self._known.add(name)

    def forget(self, name: str) -> None:
        """``name`` is gone (RabbitMQ said so, or the adapter deleted it): look it up again."""
        self._known.discard(name)

    def forget_all(self) -> None:
        self._known = {""}

    async def check(self, name: str) -> None:
        """``ConfigurationError`` unless the exchange ``name`` has been declared. Looked up on
        a throwaway channel: a 404 closes the channel it comes on."""
        if name in self._known:
            return
        async with self._link.guard(f"looking up exchange {name!r}"):
            try:
                async with self._link.scratch_channel() as channel:
                    await channel.declare_exchange(name, passive=True)
            except ChannelNotFoundEntity as exc:
                raise undeclared_exchange(name) from exc
        self._known.add(name)
