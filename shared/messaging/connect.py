"""Choosing the broker adapter from the configured URL."""

from __future__ import annotations

from shared.errors import ConfigurationError
from shared.messaging.broker import Broker
from shared.messaging.memory import MemoryBroker

__all__ = ["create_broker"]


def create_broker(url: str) -> Broker:
    if url.startswith("memory://"):
        return MemoryBroker()
    if url.startswith(("amqp://", "amqps://")):
        # Imported lazily: the embedded mode never needs aio-pika's connection machinery.
        from shared.messaging.amqp import AmqpBroker

        return AmqpBroker(url)
    raise ConfigurationError(
        f"unsupported broker URL {url!r}: use memory:// or amqp://user:password@host:port/vhost"
    )
