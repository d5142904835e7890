"""dlscope as an operator deploys it: every service its own OS process, on the real RabbitMQ
and PostgreSQL; a user submits over HTTP, or publishes straight to RabbitMQ."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import orjson
import pytest

from harness.deployment import SERVICES, Deployment, fresh_database, purge_namespace
from harness.waiting import evaluation_outcome, eventually
from tests.conftest import LIFECYCLE, POSTGRES_ADMIN_DSN

pytestmark = [pytest.mark.e2e, pytest.mark.rabbitmq, pytest.mark.postgres]


async def _ready(deployment: Deployment) -> None:
    async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=30) as http:
        await deployment.ready(http)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, rabbitmq_url: str) -> Iterator[Deployment]:
    database_url, drop_database = asyncio.run(fresh_database(POSTGRES_ADMIN_DSN))
    deployed = Deployment(
        broker_url=rabbitmq_url,
        database_url=database_url,
        namespace=f"e{uuid.uuid4().hex[:12]}",
        workdir=tmp_path_factory.mktemp("deployment"),
    )
    deployed.migrate()
    try:
        for service in SERVICES:
            deployed.start(service)
        asyncio.run(_ready(deployed))
        yield deployed
    finally:
        deployed.stop_all()
        asyncio.run(drop_database())
        asyncio.run(purge_namespace(rabbitmq_url, deployed.namespace))


@pytest.fixture
async def http(deployment: Deployment) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=30) as client:
        yield client


async def completed(http: httpx.AsyncClient, evaluation_id: str) -> dict[str, Any]:
    evaluation = await evaluation_outcome(http, evaluation_id, timeout=60)
    assert evaluation["status"] == "completed", evaluation["error"]
    return evaluation


async def events_of(http: httpx.AsyncClient, evaluation_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = (
        await http.get(f"/v1/evaluations/{evaluation_id}/events")
    ).json()
    return events


async def test_an_evaluation_submitted_over_http_runs_across_the_processes(
    http: httpx.AsyncClient,
) -> None:
    response = await http.post(
        "/v1/evaluations",
        json={
            "model": "squeezenet",
            "framework": "onnxruntime",
            "hardware": "cpu",
            "scenario": {"iterations": 30, "min_duration_s": 0},
        },
    )
    assert response.status_code == 202, response.text
    accepted = response.json()

    evaluation = await completed(http, accepted["id"])
    assert evaluation["result"]["count"] == 30

    events = await events_of(http, accepted["id"])
    assert [e["type"] for e in events] == LIFECYCLE
    assert [e["version"] for e in events] == list(range(1, 6))
    assert {e["trace_id"] for e in events} == {accepted["trace_id"]}
    # Each step was taken by the process that owns it.
    producers = [e["payload"].get("agent_id") for e in events]
    assert producers[2] == producers[3] == evaluation["agent_id"]


async def test_a_message_published_straight_to_rabbitmq_starts_an_evaluation(
    http: httpx.AsyncClient, deployment: Deployment
) -> None:
    # Exactly the message docs/rabbitmq.md documents, sent with plain aio-pika.
    evaluation_id = str(uuid.uuid4())
    message = {
        "event_id": str(uuid.uuid4()),
        "type": "evaluation.requested",
        "schema_version": 1,
        "stream_id": f"evaluation-{evaluation_id}",
        "occurred_at": "2026-11-21T12:00:00Z",
        "correlation_id": evaluation_id,
        "payload": {
            "evaluation_id": evaluation_id,
            "model": "squeezenet",
            "framework": "onnxruntime",
            "hardware": "cpu",
            "scenario": {"iterations": 25, "min_duration_s": 0},
        },
    }
    connection = await aio_pika.connect(deployment.broker_url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(f"{deployment.namespace}.events")
        await exchange.publish(
            aio_pika.Message(
                orjson.dumps(message),
                content_type="application/json",
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            ),
            routing_key="evaluation.requested",
        )

    evaluation = await completed(http, evaluation_id)
    assert evaluation["result"]["count"] == 25
    events = await events_of(http, evaluation_id)
    assert [e["type"] for e in events] == LIFECYCLE
    # No trace context was sent: the evaluation is still one trace, named by its id.
    assert {e["trace_id"] for e in events} == {uuid.UUID(evaluation_id).hex}


async def test_killing_and_restarting_the_recorder_loses_no_event(
    http: httpx.AsyncClient, deployment: Deployment
) -> None:
    deployment.kill("recorder")
    connection = await aio_pika.connect(deployment.broker_url)
    async with connection:
        channel = await connection.channel()
        events = await channel.get_exchange(f"{deployment.namespace}.events")
        watch = await channel.declare_queue(exclusive=True)
        await watch.bind(events, "evaluation.completed")

        response = await http.post(
            "/v1/evaluations",
            json={
                "model": "squeezenet",
                "framework": "onnxruntime",
                "scenario": {"iterations": 10, "min_duration_s": 0},
            },
        )
        evaluation_id = response.json()["id"]

        # The evaluation finishes while the recorder is down ...
        async def finished() -> bool:
            message = await watch.get(fail=False, no_ack=True)
            return (
                message is not None
                and orjson.loads(message.body)["correlation_id"] == evaluation_id
            )

        await eventually(finished, timeout=60)
        # ... its events wait in the recorder's durable queue, and nothing was recorded.
        backlog = await channel.declare_queue(f"{deployment.namespace}.recorder", passive=True)
        assert backlog.declaration_result.message_count >= len(LIFECYCLE)
        assert (await http.get(f"/v1/evaluations/{evaluation_id}")).status_code == 404

    deployment.start("recorder")
    evaluation = await completed(http, evaluation_id)
    stored = await events_of(http, evaluation_id)
    assert [e["type"] for e in stored] == LIFECYCLE
    assert len({e["event_id"] for e in stored}) == len(stored)
    assert evaluation["result"]["count"] == 10


async def test_the_services_stop_cleanly_on_sigterm(tmp_path: Path, rabbitmq_url: str) -> None:
    database_url, drop_database = await fresh_database(POSTGRES_ADMIN_DSN)
    deployed = Deployment(
        broker_url=rabbitmq_url,
        database_url=database_url,
        namespace=f"e{uuid.uuid4().hex[:12]}",
        workdir=tmp_path,
    )
    try:
        deployed.migrate()
        for service in SERVICES:
            deployed.start(service)
        async with httpx.AsyncClient(base_url=deployed.gateway_url, timeout=30) as client:
            await deployed.ready(client)
        deployed.stop_all()  # raises if a service ignores SIGTERM
        assert "Traceback" not in "".join(deployed.log(s) for s in SERVICES)
    finally:
        deployed.stop_all()
        await drop_database()
        await purge_namespace(rabbitmq_url, deployed.namespace)


@pytest.mark.skipif(
    shutil.which("rabbitmqctl") is None, reason="needs rabbitmqctl to drop connections"
)
@pytest.mark.alone  # every connection: another test worker's too
async def test_the_services_recover_when_the_broker_drops_every_connection(
    http: httpx.AsyncClient,
) -> None:
    # What a broker restart does to its clients; robust connections must reconnect by
    # themselves, with no service restarted.
    dropped = await asyncio.create_subprocess_exec(
        "rabbitmqctl", "close_all_connections", "dlscope test", stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await dropped.communicate()
    assert dropped.returncode == 0, stderr.decode()

    async def accepted() -> dict[str, Any] | None:
        try:
            response = await http.post(
                "/v1/evaluations",
                json={
                    "model": "squeezenet",
                    "framework": "onnxruntime",
                    "scenario": {"iterations": 3, "min_duration_s": 0},
                },
            )
        except httpx.TransportError:
            return None
        body: dict[str, Any] = response.json()
        return body if response.status_code == 202 else None

    evaluation = await completed(http, (await eventually(accepted, timeout=60))["id"])
    assert evaluation["result"]["count"] == 3
