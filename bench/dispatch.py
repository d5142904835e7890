"""Dispatch latency: from ``POST /v1/evaluations`` to the worker starting the evaluation.

Every service runs as its own process on the local RabbitMQ and PostgreSQL (loopback). Each
evaluation is submitted only after the previous one finished, so the figure is the pipeline's
latency (gateway -> registry -> scheduler -> registry -> worker), not queueing. "The worker
starting" is the ``occurred_at`` of its ``evaluation.started`` event (same host, same clock).
The bench hears only that event and the outcome, as they happen; the other events' times are
read from the event store after the run, so that receiving them does not take CPU from the
services while they dispatch (two cores here).

Where the time goes, from the events' own ``occurred_at`` (each set as its service publishes
it): ``gateway`` from the POST to ``evaluation.requested``, ``scheduler`` from there to
``evaluation.scheduled``, ``worker`` from there to ``evaluation.started`` (the job's hop, the
worker's acceptance and its capture of the environment).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime
from typing import Any

import aio_pika
import httpx
import orjson

from bench.common import POSTGRES_ADMIN_DSN, RABBITMQ_URL, percentiles
from harness.deployment import Deployment, throwaway_deployment
from shared.eventstore import EventStore
from shared.messages import evaluation_stream

__all__ = ["run"]

WARMUP = 10


async def run(evaluations: int = 200, *, warmup: int = WARMUP) -> dict[str, Any]:
    """``evaluations`` timed after ``warmup`` untimed (tests/bench: 3 after 1)."""
    async with throwaway_deployment(RABBITMQ_URL, POSTGRES_ADMIN_DSN, prefix="bench") as deployment:
        deployment.start_all()
        return await _measure(deployment, evaluations, warmup)


async def _measure(deployment: Deployment, evaluations: int, warmup: int) -> dict[str, Any]:
    body = {
        "model": "squeezenet",
        "framework": "onnxruntime",
        "scenario": {"iterations": 1, "min_duration_s": 0, "warmup": 0},
    }
    async with (
        httpx.AsyncClient(base_url=deployment.gateway_url, timeout=30) as http,
        await aio_pika.connect(deployment.broker_url) as connection,
    ):
        await deployment.ready(http)
        channel = await connection.channel()
        events = await channel.get_exchange(f"{deployment.namespace}.events")
        watch = await channel.declare_queue(exclusive=True)
        for key in (
            "evaluation.started",
            "evaluation.completed",
            "evaluation.failed",
        ):
            await watch.bind(events, key)
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            await inbox.put(orjson.loads(message.body))
            await message.ack()

        await watch.consume(on_message)

        to_started: list[float] = []
        to_accepted: list[float] = []
        # (evaluation, when its POST was sent, when its worker started)
        dispatched: list[tuple[uuid.UUID, float, float]] = []
        for i in range(warmup + evaluations):
            sent = time.time()
            response = await http.post("/v1/evaluations", json=body)
            accepted = time.time()
            evaluation_id = response.json()["id"]
            at: dict[str, float] = {}
            while True:  # until this evaluation's outcome
                event = await asyncio.wait_for(inbox.get(), 30)
                if event["correlation_id"] != evaluation_id:
                    continue
                kind = event["type"].removeprefix("evaluation.")
                if kind == "failed":
                    raise RuntimeError(f"evaluation failed: {event['payload']['reason']}")
                if kind == "completed":
                    break
                at[kind] = datetime.fromisoformat(event["occurred_at"]).timestamp()
            if i >= warmup and "started" in at:
                to_started.append((at["started"] - sent) * 1e3)
                to_accepted.append((accepted - sent) * 1e3)
                dispatched.append((uuid.UUID(evaluation_id), sent, at["started"]))
    segments = await _segments(deployment, dispatched)
    return {
        "post_to_worker_started": percentiles(to_started),
        "post_to_202": percentiles(to_accepted),
        "segments": {name: percentiles(values) for name, values in segments.items()},
        "targets": {"p50_ms": 10, "p99_ms": 50},
    }


async def _segments(
    deployment: Deployment, dispatched: list[tuple[uuid.UUID, float, float]]
) -> dict[str, list[float]]:
    """Each evaluation's time in the gateway, the scheduler and the worker, from the stored
    ``occurred_at`` of its requested and scheduled events."""
    segments: dict[str, list[float]] = {"gateway": [], "scheduler": [], "worker": []}
    async with EventStore.from_url(deployment.database_url) as store:
        for evaluation_id, sent, started in dispatched:
            at = {
                event.type: event.occurred_at.timestamp()
                for event in await store.stream_events(evaluation_stream(evaluation_id))
            }
            requested, scheduled = at["evaluation.requested"], at["evaluation.scheduled"]
            segments["gateway"].append((requested - sent) * 1e3)
            segments["scheduler"].append((scheduled - requested) * 1e3)
            segments["worker"].append((started - scheduled) * 1e3)
    return segments
