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


async def purge_namespace(url: str, namespace: str, *, recorder_partitions: int = 1) -> None:
    topology = Topology(namespace)
    partitions = [
        topology.recorder_queue(i, recorder_partitions) for i in range(recorder_partitions)
    ]
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        for queue in DURABLE_QUEUES:
            await channel.queue_delete(f"{namespace}.{queue}")
        for queue in partitions:
            await channel.queue_delete(queue)
        for exchange in (
            topology.events,
            topology.jobs,
            topology.dlx,
            topology.recorder_partitions,
        ):
            await channel.exchange_delete(exchange)
