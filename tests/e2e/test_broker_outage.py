"""RabbitMQ gone for 10 s while 20 evaluations run, every service its own process: a POST
meanwhile answers 503 at once (with a Retry-After), and once the broker is back every
evaluation completes with each of its events stored exactly once; nothing is dead-lettered.

The shared RabbitMQ serves other tests and is never stopped: the services reach it through a
link of the test's own (``SeverableLink``), and the outage is that link severed. To them it
is the broker going away: every connection reset mid-stream, every new one refused, and
whatever they had not acknowledged handed back to its queue by RabbitMQ, as at a stop.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from harness.deployment import SERVICES, Deployment, purge_namespace
from harness.relay import SeverableLink
from harness.waiting import evaluation_outcome, eventually
from shared.messages import Topology
from shared.messaging import create_broker
from tests.conftest import LIFECYCLE

pytestmark = [pytest.mark.e2e, pytest.mark.rabbitmq, pytest.mark.postgres]

EVALUATIONS = 20
# The outage the issue describes: a duration to hold, not a guess at how long a thing takes.
OUTAGE_S = 10.0
# "Promptly": the gateway gives up publishing within its 2 s bound, with room for a busy
# machine; far below the 10 s the first wave's gateway took to answer 500.
PROMPT_S = 4.0


@pytest.fixture
async def deployment(
    tmp_path_factory: pytest.TempPathFactory, rabbitmq_url: str, postgres_url: str
) -> AsyncIterator[tuple[Deployment, SeverableLink]]:
    broker = urlsplit(rabbitmq_url)
    link = SeverableLink(broker.hostname or "127.0.0.1", broker.port or 5672)
    await link.restore()
    through_link = urlunsplit(
        broker._replace(netloc=f"{broker.username}:{broker.password}@{link.url_netloc}")
    )
    deployed = Deployment(
        broker_url=through_link,
        database_url=postgres_url,
        namespace=f"b{uuid.uuid4().hex[:12]}",
        workdir=tmp_path_factory.mktemp("broker-outage"),
    )
    await asyncio.to_thread(deployed.migrate)
    try:
        for service in SERVICES:
            deployed.start(service)
        async with httpx.AsyncClient(base_url=deployed.gateway_url, timeout=30) as http:
            await deployed.ready(http)
        yield deployed, link
    finally:
        # In a thread: the link is carried by this event loop, and a service stopping says
        # goodbye to the broker through it (cancelling its consumers, closing its channels).
        # Blocking the loop meanwhile left each of those calls unanswered until its timeout.
        await asyncio.to_thread(deployed.stop_all)
        await link.close()
        await purge_namespace(rabbitmq_url, deployed.namespace)


async def _submit(http: httpx.AsyncClient) -> httpx.Response:
    return await http.post(
        "/v1/evaluations",
        json={
            "model": "squeezenet",
            "framework": "onnxruntime",
            "scenario": {"iterations": 200, "min_duration_s": 0, "warmup": 0},
        },
    )


async def test_a_broker_outage_costs_no_evaluation(
    deployment: tuple[Deployment, SeverableLink], rabbitmq_url: str
) -> None:
    deployed, link = deployment
    async with httpx.AsyncClient(base_url=deployed.gateway_url, timeout=30) as http:
        accepted = [await _submit(http) for _ in range(EVALUATIONS)]
        assert all(r.status_code == 202 for r in accepted), [r.text for r in accepted]
        ids = [str(r.json()["id"]) for r in accepted]

        async def started() -> bool:
            response = await http.get(f"/v1/evaluations/{ids[0]}")
            return response.status_code == 200 and response.json()["status"] in (
                "running",
                "completed",
            )

        # The outage hits work in flight: the first has started, nineteen are to come.
        await eventually(started, timeout=120)
        await link.sever()
        # A write needs the broker: refused at once, with a Retry-After, not after 10 s.
        began = time.monotonic()
        refused = await _submit(http)
        answered_in = time.monotonic() - began
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"]
        assert answered_in < PROMPT_S, f"503 after {answered_in:.1f} s"
        await asyncio.sleep(OUTAGE_S - answered_in)
        await link.restore()

        for evaluation_id in ids:
            evaluation = await evaluation_outcome(http, evaluation_id, timeout=300)
            assert evaluation["status"] == "completed", evaluation["error"]
            events = (await http.get(f"/v1/evaluations/{evaluation_id}/events")).json()
            assert max(Counter(e["event_id"] for e in events).values()) == 1
            # A job the outage handed back to its queue before it started may run as a
            # second attempt: its lifecycle then shows that attempt, once.
            types = [e["type"] for e in events]
            assert [t for t in types if t != "evaluation.started"] == [
                t for t in LIFECYCLE if t != "evaluation.started"
            ], types
            assert 1 <= types.count("evaluation.started") <= 2, types

    broker = create_broker(rabbitmq_url)
    await broker.connect()
    try:
        assert await broker.queue_depth(Topology(deployed.namespace).dead_letters) == 0
    finally:
        await broker.close()
