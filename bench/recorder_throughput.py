"""Event-store append throughput through the recorder, on RabbitMQ and PostgreSQL.

The recorders' durable queues are filled first (with 5% of the events sent twice, alone, as a
redelivering broker would), then the recorder processes drain them: one recorder on its
single queue, or N recorders each on its partition (``DLSCOPE_RECORDER_PARTITIONS``); the
messages carry the stream header the bus sets, so a consistent-hash exchange spreads them.
Two wire forms: one event per message, and batches (``batch`` > 1): each block of ``batch``
evaluations sends each of its five event types as one message of ``batch`` events, in the
evaluations' order, as ``Bus.publish_batch`` sends events of one type produced together (an
experiment's members, say).
The sustained rate is the number of stored events over the span of their ``recorded_at``
times, so neither the recorders' start-up nor the publisher's speed is counted. Then the
store is checked: every event stored once (zero lost, zero duplicated) and every stream's
versions gap-free.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aio_pika
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from bench.common import POSTGRES_ADMIN_DSN, RABBITMQ_URL
from harness.deployment import Deployment, throwaway_deployment
from harness.quiet import wait_until_quiet
from harness.waiting import eventually
from shared.eventstore import EventStore
from shared.measurement import ScenarioResult, SingleStream, TimedPhase
from shared.measurement.overhead import HarnessOverhead
from shared.measurement.warmup import WarmupReport
from shared.messages import (
    Envelope,
    EvaluationCompleted,
    EvaluationMeasured,
    EvaluationRequested,
    EvaluationScheduled,
    EvaluationStarted,
    LatencySummary,
    Topology,
    encode,
    encode_batch,
    evaluation_stream,
)
from shared.messaging import STREAM_HEADER

__all__ = ["run", "suite"]


def _run(latencies: list[int]) -> ScenarioResult:
    """A single-stream run of these latencies, shaped as a worker reports it."""
    return ScenarioResult(
        scenario=SingleStream(),
        sample_count=1,
        phases=(
            TimedPhase(
                samples_per_query=1,
                first_query_ns=1,
                warmup=WarmupReport(
                    latencies_ns=tuple(latencies[:10]),
                    window_queries=10,
                    window_medians_ns=(float(latencies[0]),),
                    threshold=0.05,
                    steady=False,
                    decided_by="max_windows",
                    duration_ns=sum(latencies[:10]),
                ),
                latencies_ns=tuple(latencies),
                duration_ns=sum(latencies),
                overhead=HarnessOverhead(per_query_ns=0.0, timer_floor_ns=0.0, method="none"),
                stopped_by="minimums",
            ),
        ),
    )


def evaluation_events(rng: random.Random) -> list[Envelope]:
    """The five events of one evaluation, with realistic payloads (200 raw latencies)."""
    evaluation_id = uuid.uuid4()
    requested = Envelope.wrap(
        EvaluationRequested(
            evaluation_id=evaluation_id, model="squeezenet", framework="onnxruntime"
        ),
        stream_id=evaluation_stream(evaluation_id),
        correlation_id=evaluation_id,
    )
    latencies = [rng.randint(2_000_000, 9_000_000) for _ in range(200)]
    summary = LatencySummary(
        count=200,
        batch_size=1,
        mean_ms=5.0,
        std_ms=1.0,
        min_ms=2.0,
        max_ms=9.0,
        p50_ms=5.0,
        p90_ms=7.0,
        p99_ms=8.9,
        throughput_per_s=200.0,
        first_inference_ms=20.0,
        load_ms=15.0,
        warmup_count=10,
    )
    return [
        requested,
        requested.caused(
            EvaluationScheduled(
                evaluation_id=evaluation_id,
                model="squeezenet",
                model_version="1.0.0",
                framework="onnxruntime",
                hardware="cpu",
                agent_id=None,
                candidates=["a"],
            ),
            producer="bench",
        ),
        requested.caused(
            EvaluationStarted(
                evaluation_id=evaluation_id,
                agent_id="a",
                host="h",
                environment={"cpu_model": "x", "cores": 2, "python": "3.11"},
            ),
            producer="bench",
        ),
        requested.caused(
            EvaluationMeasured(
                evaluation_id=evaluation_id,
                agent_id="a",
                load_ns=1,
                run=_run(latencies),
            ),
            producer="bench",
        ),
        requested.caused(
            EvaluationCompleted(evaluation_id=evaluation_id, result=summary), producer="bench"
        ),
    ]


# (name, recorders, events per batch message)
CASES = (("single_events_1_recorder", 1, 1), ("batches_of_50_1_recorder", 1, 50))


async def suite(
    rounds: int = 3, *, evaluations: int = 4000, patience_s: float = 120
) -> dict[str, Any]:
    """Each case in turn, ``rounds`` times, so all see the same machine conditions: each
    ``run`` of ``evaluations``, after waiting up to ``patience_s`` for a quiet machine."""
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in CASES}
    for _ in range(rounds):
        for name, recorders, batch in CASES:
            # Each run starts on a quiet machine: the last one's 21 000 persistent messages
            # and 20 000 rows are still being written back to disk (kernel threads busy for
            # seconds after), and that would be measured with the next one.
            busy = await asyncio.to_thread(wait_until_quiet, patience_s=patience_s)
            result = await run(evaluations, recorders=recorders, batch=batch)
            results[name].append({**result, "machine_busy_before": round(busy, 3)})
    return {
        **results,
        "sustained_events_per_s": {
            name: [_rounded(r["sustained_events_per_s"]) for r in runs]
            for name, runs in results.items()
        },
        "recorder_cpu_per_event_us": {
            name: [r["recorder_cpu_per_event_us"] for r in runs] for name, runs in results.items()
        },
        "median_events_per_s": {
            name: _rounded(statistics.median(r["sustained_events_per_s"] for r in runs))
            for name, runs in results.items()
        },
        "target_events_per_s": 10_000,
    }


def _rounded(rate: float) -> float:
    # A run too small to span two commit times has an infinite rate (_verify): kept as it is.
    return round(rate) if math.isfinite(rate) else rate


async def run(
    evaluations: int = 4000,
    duplicate_share: float = 0.05,
    *,
    recorders: int = 1,
    batch: int = 1,
) -> dict[str, Any]:
    if batch > 1 and recorders > 1:
        raise ValueError("a batch spans streams: partitioned recorders take one event a message")
    rng = random.Random(0)
    per_evaluation = [evaluation_events(rng) for _ in range(evaluations)]
    envelopes = [e for events in per_evaluation for e in events]
    duplicates = rng.sample(envelopes, int(len(envelopes) * duplicate_share))
    messages: list[list[Envelope]] = []
    for start in range(0, evaluations, batch):
        block = per_evaluation[start : start + batch]
        # Type by type, each in the evaluations' order: every stream stays in order.
        messages.extend([events[kind] for events in block] for kind in range(5))
    messages.extend([e] for e in duplicates)
    async with throwaway_deployment(
        RABBITMQ_URL, POSTGRES_ADMIN_DSN, prefix="bench", recorders=recorders
    ) as deployment:
        topology = Topology(deployment.namespace)
        queues = [topology.recorder_queue(i, recorders) for i in range(recorders)]
        # Let the recorders declare their queues and bindings, then stop them and fill the queues.
        deployment.start("recorder")
        await eventually(lambda: _all(queues, _queue_exists), timeout=60)
        deployment.stop_all()
        published = await _publish(deployment, messages)
        backlog = [await _depth(queue) for queue in queues]

        deployment.start("recorder")
        began = time.perf_counter()
        recorders_cpu = _cpu_seconds([p.pid for p in deployment.processes.values()])
        async with EventStore.from_url(deployment.database_url) as store:
            # The recorders' CPU from the first stored event to the last, so their start-up
            # (imports, connecting) is not charged to the events.
            first: tuple[int, float] | None = None
            while (stored := await store.count_events()) < len(envelopes):
                if first is None and stored:
                    first = (stored, recorders_cpu())
                if time.perf_counter() - began > 600:
                    raise TimeoutError(f"{stored} of {len(envelopes)} events stored in 600 s")
                await asyncio.sleep(0.1)
            if first is None:
                first = (0, recorders_cpu())
            cpu_per_event_us = (recorders_cpu() - first[1]) / (stored - first[0]) * 1e6
        wall = time.perf_counter() - began
        # The duplicates are acknowledged as no-ops, after the last new event.
        await eventually(lambda: _all(queues, _drained), timeout=60)
        checks = await _verify(deployment.database_url, envelopes)
    return {
        "recorders": recorders,
        "events_per_batch": batch,
        "recorder_cpu_per_event_us": round(cpu_per_event_us, 1),
        "events": len(envelopes),
        "messages_published": published,
        "duplicates_published": len(duplicates),
        "messages_per_queue": backlog,
        "sustained_events_per_s": checks.pop("events_per_s"),
        "wall_s_including_recorder_start": wall,
        **checks,
        "target_events_per_s": 10_000,
    }


async def _publish(deployment: Deployment, messages: list[list[Envelope]]) -> int:
    async with await aio_pika.connect(deployment.broker_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(f"{deployment.namespace}.events")
        for start in range(0, len(messages), 500):
            await asyncio.gather(
                *(
                    exchange.publish(
                        aio_pika.Message(
                            encode(events[0]) if len(events) == 1 else encode_batch(events),
                            # As the bus sends it: the partitions hash on the stream.
                            headers={STREAM_HEADER: events[0].stream_id},
                            message_id=str(events[0].event_id),
                            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                        ),
                        routing_key=events[0].type,
                    )
                    for events in messages[start : start + 500]
                )
            )
    return len(messages)


def _cpu_seconds(pids: list[int]) -> Callable[[], float]:
    """A reading of the CPU time (user + system) these processes have used so far."""
    tick = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        total = 0
        for pid in pids:
            # Fields 14 and 15 (utime, stime), counted after the command name's parenthesis.
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / tick

    return read


async def _all(queues: list[str], probe: Callable[[str], Awaitable[bool]]) -> bool:
    return all([await probe(queue) for queue in queues])


async def _drained(queue: str) -> bool:
    return await _depth(queue) == 0


async def _queue_exists(queue: str) -> bool:
    return await _depth(queue) >= 0


async def _depth(queue: str) -> int:
    async with await aio_pika.connect(RABBITMQ_URL) as connection:
        channel = await connection.channel()
        try:
            declared = await channel.declare_queue(queue, passive=True)
        except aio_pika.exceptions.ChannelClosed:
            return -1
        return int(declared.declaration_result.message_count or 0)


async def _verify(database_url: str, envelopes: list[Envelope]) -> dict[str, Any]:
    engine = create_async_engine(database_url)
    async with engine.connect() as connection:
        row = (
            await connection.execute(
                sa.text(
                    "SELECT count(*), count(DISTINCT event_id), "
                    "extract(epoch FROM max(recorded_at) - min(recorded_at)) FROM events"
                )
            )
        ).one()
        gaps = (
            await connection.execute(
                sa.text(
                    "SELECT count(*) FROM (SELECT stream_id, max(version) AS v, count(*) AS n "
                    "FROM events GROUP BY stream_id) s WHERE v <> n"
                )
            )
        ).scalar_one()
    await engine.dispose()
    stored, distinct, span_s = int(row[0]), int(row[1]), float(row[2])
    return {
        "stored": stored,
        "lost": len(envelopes) - distinct,
        "duplicated": stored - distinct,
        "streams_with_version_gaps": int(gaps),
        "events_per_s": stored / span_s if span_s else float("inf"),
    }
