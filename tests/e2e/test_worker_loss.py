"""A worker killed mid-evaluation (kill -9, as when a host dies), with every service its own
process on RabbitMQ and PostgreSQL: the job is taken up by another worker of its kind, the
evaluation completes within a bounded time, and the history records both attempts."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from harness.deployment import SERVICES, Deployment, fresh_database, purge_namespace
from harness.waiting import evaluation_outcome, eventually
from tests.conftest import POSTGRES_ADMIN_DSN

pytestmark = [pytest.mark.e2e, pytest.mark.rabbitmq, pytest.mark.postgres]

# The scenario's own length; the worker's death may cost at most the redelivery, the second
# worker's start of the job and the analysis on top of a full second run.
SCENARIO_S = 6.0
BOUND_S = 2 * SCENARIO_S + 30.0


@pytest.fixture
def two_workers(
    tmp_path_factory: pytest.TempPathFactory, rabbitmq_url: str
) -> Iterator[Deployment]:
    database_url, drop_database = asyncio.run(fresh_database(POSTGRES_ADMIN_DSN))
    deployed = Deployment(
        broker_url=rabbitmq_url,
        database_url=database_url,
        namespace=f"e{uuid.uuid4().hex[:12]}",
        workdir=tmp_path_factory.mktemp("worker-loss"),
    )
    deployed.migrate()
    try:
        for service in SERVICES:
            if service != "workers":
                deployed.start(service)
        deployed.start_worker("worker-a", "onnxruntime", "agent-a")
        deployed.start_worker("worker-b", "onnxruntime", "agent-b")
        asyncio.run(_two_online(deployed))
        yield deployed
    finally:
        deployed.stop_all()
        asyncio.run(drop_database())
        asyncio.run(purge_namespace(rabbitmq_url, deployed.namespace))


async def _two_online(deployment: Deployment) -> None:
    async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=30) as http:
        await deployment.ready(http)

        async def both() -> bool:
            agents = (await http.get("/v1/agents")).json()
            return {a["agent_id"] for a in agents if a["status"] == "online"} >= {
                "agent-a",
                "agent-b",
            }

        await eventually(both, timeout=60)


async def _events(http: httpx.AsyncClient, evaluation_id: str) -> list[dict[str, Any]]:
    """The evaluation's events; none while the recorder has not stored it yet (404)."""
    response = await http.get(f"/v1/evaluations/{evaluation_id}/events")
    if response.status_code == 404:
        return []
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()
    return events


async def test_a_worker_killed_mid_evaluation_loses_nothing(two_workers: Deployment) -> None:
    async with httpx.AsyncClient(base_url=two_workers.gateway_url, timeout=30) as http:
        response = await http.post(
            "/v1/evaluations",
            json={
                "model": "squeezenet",
                "framework": "onnxruntime",
                "scenario": {
                    "iterations": 1000000,
                    "min_duration_s": SCENARIO_S,
                    "max_duration_s": SCENARIO_S,
                    "warmup": 0,
                },
            },
        )
        assert response.status_code == 202, response.text
        evaluation_id = response.json()["id"]

        async def first_start() -> dict[str, Any] | None:
            started = [
                e for e in await _events(http, evaluation_id) if e["type"].endswith("started")
            ]
            return started[0] if started else None

        first = await eventually(first_start, timeout=60)
        victim = first["payload"]["agent_id"]
        assert first["payload"]["attempt"] == 1
        two_workers.kill("worker-a" if victim == "agent-a" else "worker-b")
        killed_at = time.monotonic()

        evaluation = await evaluation_outcome(http, evaluation_id, timeout=BOUND_S)
        elapsed = time.monotonic() - killed_at
        print(f"worker killed -> evaluation {evaluation['status']} in {elapsed:.1f} s")
        assert evaluation["status"] == "completed", evaluation["error"]
        assert elapsed < BOUND_S

        events = await _events(http, evaluation_id)
        types = [e["type"] for e in events]
        # Both attempts are history: each start with its own agent and environment; one
        # measurement, one completion — no duplicates.
        starts = [e["payload"] for e in events if e["type"] == "evaluation.started"]
        assert [s["attempt"] for s in starts] == [1, 2]
        assert starts[0]["agent_id"] == victim != starts[1]["agent_id"]
        assert starts[1]["environment"]["host"]
        assert types.count("evaluation.measured") == 1
        assert types.count("evaluation.completed") == 1
        assert "evaluation.failed" not in types
        measured = next(e["payload"] for e in events if e["type"] == "evaluation.measured")
        assert measured["agent_id"] == starts[1]["agent_id"]
        assert measured["attempt"] == 2
        assert len({e["event_id"] for e in events}) == len(events)
