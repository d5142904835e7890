"""Removing what a test deployment left on the shared RabbitMQ."""

from __future__ import annotations

import aio_pika

from shared.messages import Topology

__all__ = ["purge_namespace"]

# The durable queues dlscope's services declare (the others delete themselves).
DURABLE_QUEUES = (
    "recorder",
    "registry",
    "analyzer",
    "scheduler.requests",
    "worker.onnxruntime.cpu",
    "dead-letters",
)


async def purge_namespace(url: str, namespace: str) -> None:
    topology = Topology(namespace)
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        for queue in DURABLE_QUEUES:
            await channel.queue_delete(f"{namespace}.{queue}")
        for exchange in (topology.events, topology.jobs, topology.dlx):
            await channel.exchange_delete(exchange)
