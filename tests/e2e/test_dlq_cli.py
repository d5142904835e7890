"""``dlscope dlq`` and ``dlscope db check`` as a user types them, against RabbitMQ."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest

from harness.deployment import purge_namespace
from shared.config import REPOSITORY_ROOT, Settings
from shared.messages import Envelope, EvaluationFailed, Topology, encode, evaluation_stream
from shared.messaging import Bus
from shared.messaging.amqp import AmqpBroker
from shared.telemetry import Telemetry

pytestmark = [pytest.mark.e2e, pytest.mark.rabbitmq]


def dlscope(environment: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    return subprocess.run(
        [sys.executable, "-m", "dlscope", *arguments],
        env={**clean, "COLUMNS": "200", **environment},
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


class Deployment:
    def __init__(self, url: str, namespace: str, channel: aio_pika.abc.AbstractChannel) -> None:
        self.topology = Topology(namespace)
        self.env = {"DLSCOPE_BROKER_URL": url, "DLSCOPE_NAMESPACE": namespace}
        self.channel = channel

    async def dead_letter(self, routing_key: str, body: bytes, reason: str, **extra: str) -> None:
        """As a service's refusal puts it there: the original key, the reason in a header."""
        dlx = await self.channel.get_exchange(self.topology.dlx)
        await dlx.publish(
            aio_pika.Message(body, headers={"x-dlscope-reason": reason, **extra}),
            routing_key=routing_key,
        )

    async def depth(self) -> int:
        queue = await self.channel.declare_queue(self.topology.dead_letters, passive=True)
        return queue.declaration_result.message_count or 0


@pytest.fixture
async def deployment(rabbitmq_url: str, namespace: str) -> AsyncIterator[Deployment]:
    # The exchanges and the dead-letter queue, as any service declares them on start.
    broker = AmqpBroker(rabbitmq_url)
    bus = Bus(
        broker,
        topology=Topology(namespace),
        telemetry=Telemetry.create(Settings(), "test"),
        service="test",
    )
    await bus.start()
    try:
        async with await aio_pika.connect(rabbitmq_url) as connection:
            yield Deployment(rabbitmq_url, namespace, await connection.channel())
    finally:
        await broker.close()
        await purge_namespace(rabbitmq_url, namespace)


def failed(evaluation_id: uuid.UUID) -> Envelope:
    return Envelope.wrap(
        EvaluationFailed(evaluation_id=evaluation_id, stage="predictor", reason="boom"),
        stream_id=evaluation_stream(evaluation_id),
        correlation_id=evaluation_id,
    )


async def test_list_show_and_replay_the_dead_letters(deployment: Deployment) -> None:
    # Given three dead letters: a valid event refused by two services while the store was
    # down, and a body that is not JSON at all
    good = failed(uuid.uuid4())
    reason = "failed 3 times; last error: StoreUnavailable: the event store is unavailable"
    for _ in range(2):
        await deployment.dead_letter("evaluation.failed", encode(good), reason)
    await deployment.dead_letter("agent.heartbeat", b"\x00garbage", "InvalidMessage: not JSON")
    # and something listening on the events exchange, as the services do
    listener = await deployment.channel.declare_queue(exclusive=True)
    await listener.bind(deployment.topology.events, "#")

    # When listed, the count, the grouping by routing key and reason, and the newest show
    listed = dlscope(deployment.env, "dlq", "list")
    assert listed.returncode == 0, listed.stderr
    assert "3 dead letters (2 distinct event ids" in listed.stdout
    assert "StoreUnavailable" in listed.stdout
    assert str(good.event_id) in listed.stdout
    # and listing takes nothing away
    assert await deployment.depth() == 3

    # When one is shown, its envelope, its headers and each copy's reason
    shown = dlscope(deployment.env, "dlq", "show", str(good.event_id))
    assert shown.returncode == 0, shown.stderr
    assert "copy 2 of 2" in shown.stdout
    assert '"evaluation.failed"' in shown.stdout
    assert "x-dlscope-reason" in shown.stdout
    missing = dlscope(deployment.env, "dlq", "show", str(uuid.uuid4()))
    assert missing.returncode == 1
    assert "no dead letter has event id" in missing.stderr

    # When everything is replayed
    replayed = dlscope(deployment.env, "dlq", "replay", "--all")
    assert replayed.returncode == 0, replayed.stderr
    assert "replayed 1 events (2 dead-letter copies removed" in replayed.stdout
    assert "1 still refused by the wire contracts" in replayed.stdout

    # Then the event went back to the events exchange once, under its routing key, without
    # the headers of its first life, and the garbage stayed in the dead-letter queue
    async with asyncio.timeout(10):
        while (message := await listener.get(fail=False, no_ack=True)) is None:
            await asyncio.sleep(0.05)
    assert message.routing_key == "evaluation.failed"
    assert Envelope.model_validate_json(message.body).event_id == good.event_id
    assert "x-dlscope-reason" not in message.headers
    assert await listener.get(fail=False, no_ack=True) is None
    assert await deployment.depth() == 1


async def test_a_job_goes_back_to_the_jobs_exchange_and_one_queue_can_be_targeted(
    deployment: Deployment,
) -> None:
    job = failed(uuid.uuid4())
    other = failed(uuid.uuid4())
    await deployment.dead_letter("job.onnxruntime.cpu", encode(job), "failed 3 times")
    await deployment.dead_letter("evaluation.failed", encode(other), "failed 3 times")
    jobs = await deployment.channel.declare_queue(exclusive=True)
    await jobs.bind(deployment.topology.jobs, "job.#")
    recorder = await deployment.channel.declare_queue(deployment.topology.queue("recorder"))

    assert dlscope(deployment.env, "dlq", "replay", str(job.event_id)).returncode == 0
    to_one = dlscope(deployment.env, "dlq", "replay", "--all", "--queue", "recorder")
    assert to_one.returncode == 0, to_one.stderr

    async with asyncio.timeout(10):
        while (message := await jobs.get(fail=False, no_ack=True)) is None:
            await asyncio.sleep(0.05)
        assert message.routing_key == "job.onnxruntime.cpu"
        while (direct := await recorder.get(fail=False, no_ack=True)) is None:
            await asyncio.sleep(0.05)
    # Straight to the queue, saying where it was first published
    assert direct.headers["x-dlscope-routing-key"] == "evaluation.failed"
    assert direct.headers["x-dlscope-exchange"] == deployment.topology.events
    assert await deployment.depth() == 0


def test_user_errors_name_the_problem(tmp_path: Path, rabbitmq_url: str) -> None:
    embedded = dlscope({"DLSCOPE_HOME": str(tmp_path)}, "dlq", "list")
    assert embedded.returncode == 2
    assert "only inside the process" in embedded.stderr
    nothing = dlscope({"DLSCOPE_BROKER_URL": rabbitmq_url}, "dlq", "replay")
    assert nothing.returncode == 2
    assert "--all" in nothing.stderr
    unknown = dlscope(
        {"DLSCOPE_BROKER_URL": rabbitmq_url, "DLSCOPE_NAMESPACE": f"n{uuid.uuid4().hex[:8]}"},
        "dlq",
        "list",
    )
    assert unknown.returncode == 1
    assert "has no dead-letter queue" in unknown.stderr
    unreachable = dlscope({"DLSCOPE_BROKER_URL": "amqp://guest:guest@127.0.0.1:1/"}, "dlq", "list")
    assert unreachable.returncode == 1
    assert "cannot connect to RabbitMQ" in unreachable.stderr
    assert "Traceback" not in embedded.stderr + nothing.stderr + unknown.stderr + unreachable.stderr


async def test_db_check_finds_and_quarantines_what_the_contracts_refuse(tmp_path: Path) -> None:
    from shared.eventstore import EventStore, upgrade

    environment = {"DLSCOPE_HOME": str(tmp_path)}
    url = f"sqlite+aiosqlite:///{tmp_path / 'dlscope.db'}"
    environment["DLSCOPE_DATABASE_URL"] = url
    await upgrade(url)
    good = failed(uuid.uuid4())
    bogus = good.model_copy(
        update={"event_id": uuid.uuid4(), "type": "totally.unknown.type", "payload": {}}
    )
    async with EventStore.from_url(url) as store:
        await store.append([good, bogus])

    checked = dlscope(environment, "db", "check")
    assert checked.returncode == 1
    assert "1 stored events would not be admitted" in checked.stdout
    assert "totally.unknown.type" in checked.stdout
    assert "--quarantine" in checked.stderr

    moved = dlscope(environment, "db", "check", "--quarantine")
    assert moved.returncode == 0, moved.stderr
    assert "moved 1 into the quarantine table" in moved.stdout
    clean = dlscope(environment, "db", "check")
    assert clean.returncode == 0
    assert "all 1 stored events are admitted" in clean.stdout


async def test_a_letter_goes_back_to_the_queue_that_refused_it_alone(
    deployment: Deployment,
) -> None:
    # Given an event the recorder refused (the store was down) but the analyzer handled
    event = failed(uuid.uuid4())
    recorder = await deployment.channel.declare_queue(deployment.topology.queue("recorder"))
    analyzer = await deployment.channel.declare_queue(exclusive=True)
    await analyzer.bind(deployment.topology.events, "#")
    await deployment.dead_letter(
        "evaluation.failed",
        encode(event),
        "StoreUnavailable",
        **{"x-dlscope-queue": recorder.name},
    )
    shown = dlscope(deployment.env, "dlq", "show", str(event.event_id))
    assert f"replays to: queue '{recorder.name}', which refused it" in shown.stdout

    # When it is replayed
    replayed = dlscope(deployment.env, "dlq", "replay", str(event.event_id))
    assert replayed.returncode == 0, replayed.stderr

    # Then the recorder gets it again, and the analyzer, which had it, does not
    async with asyncio.timeout(10):
        while (message := await recorder.get(fail=False, no_ack=True)) is None:
            await asyncio.sleep(0.05)
    assert Envelope.model_validate_json(message.body).event_id == event.event_id
    assert "x-dlscope-queue" not in message.headers
    assert await analyzer.get(fail=False, no_ack=True) is None
    assert await deployment.depth() == 0


async def test_a_letter_no_queue_would_take_stays_in_the_dead_letters(
    deployment: Deployment,
) -> None:
    # Given a dead event that says no queue it came from, and nothing bound to its key
    event = failed(uuid.uuid4())
    await deployment.dead_letter("evaluation.failed", encode(event), "StoreUnavailable")

    # When it is replayed to the events exchange, which routes it nowhere
    replayed = dlscope(deployment.env, "dlq", "replay", str(event.event_id))

    # Then the replay fails saying why, and the letter is still there to replay later
    assert replayed.returncode == 1
    assert "no queue takes routing key 'evaluation.failed'" in replayed.stderr
    assert "Traceback" not in replayed.stderr
    assert await deployment.depth() == 1
