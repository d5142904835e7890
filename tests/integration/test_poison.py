"""Malformed messages on every exchange, on RabbitMQ + PostgreSQL: each is dead-lettered with
its reason, none creates or fails an evaluation nobody requested, none is stored, and a real
evaluation still completes afterwards."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aio_pika
import orjson
import pytest

from harness.waiting import eventually
from shared.eventstore import EventStore
from shared.messages import Envelope, EvaluationRequested, Topology, encode
from tests.integration.conftest import STACKS, Stack

# A durable-queue, fresh-database stack of every service: RabbitMQ's dead-letter queue is the
# witness. (The embedded broker keeps its dead letters inside the process.)
pytestmark = pytest.mark.parametrize("any_stack", [STACKS[1]], indirect=True)

# Routing keys and the type a message under each should have.
EVENT_KEYS = {
    "evaluation.requested": "evaluation.requested",
    "evaluation.measured": "evaluation.measured",
    "evaluation.failed": "evaluation.failed",
    "experiment.requested": "experiment.requested",
    "agent.heartbeat": "agent.heartbeat",
}
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
JOB_KEYS = {
    "job.onnxruntime.cpu": "job.evaluate",
    "rpc.registry.resolve": "registry.resolve",
    "rpc.scheduler.attempt": "scheduler.attempt",
    "progress.evaluation": "evaluation.progress",
}


@dataclass(frozen=True)
class Poison:
    exchange: str
    routing_key: str
    kind: str
    body: bytes
    # Unique to this message: found in its dead-letter copies, never in the store.
    marker: str
    # The evaluation (or experiment) it names, which nobody requested.
    names: uuid.UUID


def poisons(topology: Topology) -> list[Poison]:
    made: list[Poison] = []
    for exchange, keys in ((topology.events, EVENT_KEYS), (topology.jobs, JOB_KEYS)):
        for key, type_ in keys.items():
            for kind in ("not JSON", "not an envelope", "unknown type", "invalid payload"):
                names, event_id = uuid.uuid4(), uuid.uuid4()
                marker = str(event_id)
                field = "experiment_id" if type_.startswith("experiment.") else "evaluation_id"
                if kind == "not JSON":
                    body = f"\xff{{not json {marker}".encode("latin-1")
                elif kind == "not an envelope":
                    body = orjson.dumps({"marker": marker, field: str(names), "type": type_})
                else:
                    envelope = Envelope(
                        event_id=event_id,
                        type="evaluation.exploded" if kind == "unknown type" else type_,
                        stream_id=f"evaluation-{names}",
                        correlation_id=names,
                        # A payload naming an evaluation (or experiment) nobody requested
                        payload={field: str(names), "agent_id": "agent-x", "unexpected": 1},
                    )
                    body = encode(envelope)
                made.append(Poison(exchange, key, kind, body, marker, names))
    return made


@pytest.fixture
async def channel(rabbitmq_url: str) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
    async with await aio_pika.connect(rabbitmq_url) as connection:
        yield await connection.channel()


async def test_poison_on_every_exchange_is_dead_lettered_and_makes_no_evaluation(
    any_stack: Stack, channel: aio_pika.abc.AbstractChannel
) -> None:
    topology = any_stack.runtime.topology
    sent = poisons(topology)

    # When each is published where the services listen
    for poison in sent:
        exchange = await channel.get_exchange(poison.exchange)
        await exchange.publish(aio_pika.Message(poison.body), routing_key=poison.routing_key)

    # Then each is dead-lettered, under its routing key, with the reason
    dead_letters = await channel.declare_queue(topology.dead_letters, passive=True)
    refused: dict[str, list[aio_pika.abc.AbstractIncomingMessage]] = {p.marker: [] for p in sent}

    async def all_refused() -> bool:
        while (message := await dead_letters.get(no_ack=True, fail=False)) is not None:
            for poison in sent:
                if poison.marker.encode() in message.body:
                    refused[poison.marker].append(message)
        return all(refused.values())

    try:
        await eventually(all_refused)
    except TimeoutError:
        missing = [(p.routing_key, p.kind) for p in sent if not refused[p.marker]]
        raise AssertionError(f"not dead-lettered: {missing}") from None
    for poison in sent:
        for copy in refused[poison.marker]:
            assert copy.routing_key == poison.routing_key
            reason = str((copy.headers or {}).get("x-dlscope-reason", ""))
            assert reason.startswith("InvalidMessage"), (poison.routing_key, poison.kind, reason)

    # and a real evaluation still completes afterwards
    evaluation = await any_stack.evaluate("squeezenet")
    assert evaluation["status"] == "completed", evaluation["error"]

    # and, everything published before that stored by now, nothing was stored for them: no
    # evaluation or experiment row, no event, no failure of an evaluation nobody requested
    async with EventStore.from_url(any_stack.runtime.settings.resolved_database_url) as store:
        for poison in sent:
            assert await store.get_evaluation(poison.names) is None, poison
            assert await store.get_experiment(poison.names) is None, poison
            assert await store.stream_events(f"evaluation-{poison.names}") == [], poison
        stored, after = [], 0
        while page := await store.read_all(after=after, limit=1000):
            stored.extend(page)
            after = page[-1].position
    ours = {str(p.names) for p in sent} | {p.marker for p in sent}
    leaked = [
        (event.type, event.stream_id)
        for event in stored
        if ours & set(UUID.findall(f"{event.event_id} {event.stream_id} {event.payload}"))
    ]
    assert leaked == []


async def test_non_finite_and_out_of_range_numbers_over_amqp_are_dead_lettered_with_reasons(
    any_stack: Stack, channel: aio_pika.abc.AbstractChannel
) -> None:
    # The numbers a hostile client writes straight onto the broker, each in an otherwise
    # valid request: what the gateway refuses with a 422 (tests/integration/test_gateway_bounds
    # .py), the broker's consumers refuse with a reasoned dead letter, and nothing is stored.
    topology = any_stack.runtime.topology
    cases = {
        "max_duration_s: 1e309": ('"max_duration_s":60.0', '"max_duration_s":1e309', "infinity"),
        "max_duration_s: NaN": ('"max_duration_s":60.0', '"max_duration_s":NaN', "JSON value"),
        "seed: 2^64": ('"seed":0', f'"seed":{2**64}', "seed"),
        "seed: 2^63": ('"seed":0', f'"seed":{2**63}', "seed"),
        "iterations: -1": ('"iterations":1024', '"iterations":-1', "iterations"),
        "schema_version: 2^31": (
            '"schema_version":1',
            f'"schema_version":{2**31}',
            "schema_version",
        ),
    }
    sent: dict[str, tuple[uuid.UUID, str]] = {}
    exchange = await channel.get_exchange(topology.events)
    for case, (valid, hostile, named) in cases.items():
        names = uuid.uuid4()
        envelope = Envelope.wrap(
            EvaluationRequested(evaluation_id=names, model="squeezenet", framework="onnxruntime"),
            stream_id=f"evaluation-{names}",
            correlation_id=names,
        )
        body = encode(envelope).decode()
        assert valid in body, (case, body)
        await exchange.publish(
            aio_pika.Message(body.replace(valid, hostile, 1).encode()),
            routing_key=EvaluationRequested.TYPE,
        )
        sent[str(names)] = (names, named)

    dead_letters = await channel.declare_queue(topology.dead_letters, passive=True)
    reasons: dict[str, list[str]] = {key: [] for key in sent}

    async def all_refused() -> bool:
        while (message := await dead_letters.get(no_ack=True, fail=False)) is not None:
            for key in sent:
                if key.encode() in message.body:
                    reasons[key].append(str((message.headers or {}).get("x-dlscope-reason")))
        return all(reasons.values())

    await eventually(all_refused)
    for key, (_, named) in sent.items():
        for reason in reasons[key]:
            assert reason.startswith("InvalidMessage"), reason
            assert named in reason, (named, reason)
    # and none of them is an evaluation, once a real one has gone through after them
    evaluation = await any_stack.evaluate("squeezenet")
    assert evaluation["status"] == "completed", evaluation["error"]
    for names, _ in sent.values():
        assert (await any_stack.http.get(f"/v1/evaluations/{names}")).status_code == 404
