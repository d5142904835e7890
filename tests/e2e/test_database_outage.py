"""PostgreSQL stopped for 45 s while evaluations run, every service its own process on
RabbitMQ: reads answer 503 meanwhile, and once the database is back every evaluation
completes with each of its events stored exactly once (the recorder waits the outage out
instead of dead-lettering what it could not store), and the recorder is back at work within
10 s of the database."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import httpx
import pytest

from harness.deployment import SERVICES, Deployment, purge_namespace
from harness.postgres import PrivatePostgres, private_postgres, private_postgres_missing
from harness.waiting import evaluation_outcome, eventually
from shared.messages import Topology
from shared.messaging import create_broker
from tests.conftest import LIFECYCLE

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.rabbitmq,
    pytest.mark.postgres,
    pytest.mark.skipif(
        private_postgres_missing() is not None, reason=str(private_postgres_missing())
    ),
]

EVALUATIONS = 10
DURING_OUTAGE = 3
# The outage the issue describes; what the test waits for is the database being away, so
# this is a duration to hold, not a guess at how long something takes.
OUTAGE_S = 45.0
# How soon after the database is back the recorder must be storing again (issue 42).
RESUMPTION_S = 10.0


@pytest.fixture
async def deployment(
    tmp_path_factory: pytest.TempPathFactory, rabbitmq_url: str
) -> AsyncIterator[tuple[Deployment, PrivatePostgres]]:
    with private_postgres() as postgres:
        deployed = Deployment(
            broker_url=rabbitmq_url,
            database_url=postgres.url,
            namespace=f"o{uuid.uuid4().hex[:12]}",
            workdir=tmp_path_factory.mktemp("outage"),
        )
        await asyncio.to_thread(deployed.migrate)
        try:
            for service in SERVICES:
                deployed.start(service)
            async with httpx.AsyncClient(base_url=deployed.gateway_url, timeout=30) as http:
                await deployed.ready(http)
            yield deployed, postgres
        finally:
            deployed.stop_all()
            await purge_namespace(rabbitmq_url, deployed.namespace)


async def _submit(http: httpx.AsyncClient) -> str:
    response = await http.post(
        "/v1/evaluations",
        json={
            "model": "squeezenet",
            "framework": "onnxruntime",
            "scenario": {"iterations": 20, "min_duration_s": 0, "warmup": 0},
        },
    )
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


async def test_a_database_outage_costs_no_event(
    deployment: tuple[Deployment, PrivatePostgres], rabbitmq_url: str
) -> None:
    deployed, postgres = deployment
    async with httpx.AsyncClient(base_url=deployed.gateway_url, timeout=30) as http:
        before = [await _submit(http) for _ in range(EVALUATIONS)]
        await asyncio.to_thread(postgres.stop)
        # Reads need the database: 503 with a Retry-After, not a 500 or a hang.
        read = await http.get(f"/v1/evaluations/{before[0]}")
        assert read.status_code == 503, read.text
        assert read.headers["Retry-After"]
        # Writes need only the broker: accepted, and recorded once the database is back.
        during = [await _submit(http) for _ in range(DURING_OUTAGE)]
        # /readyz tells why
        readiness = await http.get("/readyz")
        assert readiness.status_code == 503
        assert readiness.json()["checks"]["event_store"] is False
        await asyncio.sleep(OUTAGE_S)
        await asyncio.to_thread(postgres.start)
        back = time.monotonic()

        # The first evaluation requested during the outage is stored as soon as the
        # recorder's next probe of the database gets through: within 10 s of its return,
        # whatever the outage's length (issue 42: it took 23 s when probes were 30 s apart).
        async def recorded() -> bool:
            return (await http.get(f"/v1/evaluations/{during[0]}")).status_code == 200

        await eventually(recorded, timeout=60)
        assert time.monotonic() - back <= RESUMPTION_S

        for evaluation_id in before + during:
            evaluation = await evaluation_outcome(http, evaluation_id, timeout=180)
            assert evaluation["status"] == "completed", evaluation["error"]
            events = (await http.get(f"/v1/evaluations/{evaluation_id}/events")).json()
            assert [e["type"] for e in events] == LIFECYCLE
            assert max(Counter(e["event_id"] for e in events).values()) == 1

    # Nothing was given up on: the dead-letter queue is empty.
    broker = create_broker(rabbitmq_url)
    await broker.connect()
    try:
        topology = Topology(deployed.namespace)
        assert await broker.queue_depth(topology.dead_letters) == 0
    finally:
        await broker.close()
