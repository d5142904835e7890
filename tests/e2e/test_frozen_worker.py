"""A worker frozen mid-evaluation (SIGSTOP, as a stalled host or a paused VM), with every
service its own process on RabbitMQ and PostgreSQL: the scheduler declares it offline and
fails the evaluation; when the worker is resumed it finishes, learns its attempt no longer
stands, and records its result as a late measurement. The failure is the evaluation's one
outcome, before and after."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psutil
import pytest

from harness.deployment import SERVICES, Deployment, fresh_database, purge_namespace
from harness.waiting import evaluation_outcome, eventually
from tests.conftest import POSTGRES_ADMIN_DSN

pytestmark = [pytest.mark.e2e, pytest.mark.rabbitmq, pytest.mark.postgres]

# Long enough to be caught mid-run; the worker heartbeats every second (Deployment), so the
# scheduler declares it offline about three seconds into the freeze.
SCENARIO_S = 6.0
OUTCOMES = ("evaluation.completed", "evaluation.failed")


@pytest.fixture
def one_worker(tmp_path_factory: pytest.TempPathFactory, rabbitmq_url: str) -> Iterator[Deployment]:
    database_url, drop_database = asyncio.run(fresh_database(POSTGRES_ADMIN_DSN))
    deployed = Deployment(
        broker_url=rabbitmq_url,
        database_url=database_url,
        namespace=f"e{uuid.uuid4().hex[:12]}",
        workdir=tmp_path_factory.mktemp("frozen-worker"),
    )
    deployed.migrate()
    try:
        for service in SERVICES:
            if service != "workers":
                deployed.start(service)
        deployed.start_worker("worker-a", "onnxruntime", "agent-a")
        asyncio.run(_ready(deployed))
        yield deployed
    finally:
        for process in _tree(deployed, "worker-a"):  # never leave it stopped
            process.send_signal(signal.SIGCONT)
        deployed.stop_all()
        asyncio.run(drop_database())
        asyncio.run(purge_namespace(rabbitmq_url, deployed.namespace))


async def _ready(deployment: Deployment) -> None:
    async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=30) as http:
        await deployment.ready(http)


def _tree(deployment: Deployment, name: str) -> list[psutil.Process]:
    """The worker's process and its framework process (and whatever that started)."""
    popen = deployment.processes.get(name)
    if popen is None or popen.poll() is not None:
        return []
    worker = psutil.Process(popen.pid)
    return [worker, *worker.children(recursive=True)]


async def _events(http: httpx.AsyncClient, evaluation_id: str) -> list[dict[str, Any]]:
    response = await http.get(f"/v1/evaluations/{evaluation_id}/events")
    if response.status_code == 404:
        return []
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()
    return events


async def test_a_worker_frozen_past_its_failure_records_its_result_as_late(
    one_worker: Deployment,
) -> None:
    async with httpx.AsyncClient(base_url=one_worker.gateway_url, timeout=30) as http:
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

        async def evaluation() -> dict[str, Any]:
            body: dict[str, Any] = (await http.get(f"/v1/evaluations/{evaluation_id}")).json()
            return body

        async def running() -> bool:
            return (await evaluation()).get("status") == "running"

        # Given the worker caught mid-evaluation and frozen, with its framework process
        await eventually(running, timeout=60)
        frozen = _tree(one_worker, "worker-a")
        assert len(frozen) >= 2, "the worker and its framework process"
        for process in frozen:
            process.send_signal(signal.SIGSTOP)
        try:
            # When the scheduler declares it offline: the evaluation fails (no other worker)
            outcome = await evaluation_outcome(http, evaluation_id, timeout=30)
        finally:
            # and the worker is resumed
            for process in frozen:
                process.send_signal(signal.SIGCONT)
        assert outcome["status"] == "failed", outcome
        assert outcome["error"].startswith("agent: agent agent-a"), outcome["error"]

        # Then the worker finishes and reports what it measured, as late
        async def reported() -> list[dict[str, Any]] | None:
            events = await _events(http, evaluation_id)
            types = {e["type"] for e in events}
            done = {"evaluation.late_measurement", "evaluation.measured"} & types
            return events if done else None

        events = await eventually(reported, timeout=SCENARIO_S + 60)

        # and once the worker is idle again, nothing more came of it
        async def idle() -> bool:
            agents = (await http.get("/v1/agents")).json()
            return any(
                a["agent_id"] == "agent-a" and a["status"] == "online" and not a["busy"]
                for a in agents
            )

        await eventually(idle, timeout=30)
        events = await _events(http, evaluation_id)
        types = [e["type"] for e in events]
        print("stream:", types)

        # The evaluation is failed, with its error and no result, and stays so
        final = await evaluation()
        assert final["status"] == "failed", final
        assert final["error"] == outcome["error"]
        assert final["result"] is None
        # One outcome in the stream; the late result is recorded as what it is
        assert [t for t in types if t in OUTCOMES] == ["evaluation.failed"]
        assert "evaluation.measured" not in types
        (late,) = [e["payload"] for e in events if e["type"] == "evaluation.late_measurement"]
        assert (late["agent_id"], late["attempt"]) == ("agent-a", 1)
        assert "no longer stands: the evaluation has already failed" in late["reason"]
        assert late["measurement"]["run"]["phases"][0]["latencies_ns"]
        # No further attempt ran after the failure
        starts = [e["payload"] for e in events if e["type"] == "evaluation.started"]
        assert [s["attempt"] for s in starts] == [1]
