"""dlscope on three hosts, simulated with Linux network namespaces (``harness.multihost``):
each host has its own name, network and view of the files, and reaches the control plane
only over its link. One experiment fans out to every host at once and compares them; a host
cut off mid-job is noticed by its missed heartbeats and its member fails with the reason
while the rest is compared; the model reaches every host by URL, never as a path."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

import aio_pika
import httpx
import orjson
import pytest
import yaml

from harness.multihost import Fleet, fleet, hosts_missing
from harness.waiting import eventually
from shared.artifacts import locate
from shared.config import REPOSITORY_ROOT
from tests.conftest import POSTGRES_ADMIN_DSN, register_model

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.rabbitmq,
    pytest.mark.postgres,
    pytest.mark.skipif(hosts_missing() is not None, reason=str(hosts_missing())),
]

MODEL = "squeezenet-elsewhere"
HOSTS = 3


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, rabbitmq_url: str) -> Iterator[Fleet]:
    workdir = tmp_path_factory.mktemp("multihost")
    with fleet(rabbitmq_url, POSTGRES_ADMIN_DSN, workdir, hosts=HOSTS) as started:
        asyncio.run(_ready_with_model(started))
        yield started


async def _ready_with_model(running: Fleet) -> None:
    """Every host's worker online, and a model registered from a file that only the control
    plane's host has (the hosts see an empty directory where it lies)."""
    graph = running.private / "models" / "squeezenet.onnx"
    graph.parent.mkdir()
    shutil.copyfile(locate("pkg://onnx/backend/test/data/light/light_squeezenet.onnx"), graph)
    manifest = yaml.safe_load((REPOSITORY_ROOT / "manifests/models/squeezenet.yaml").read_text())
    manifest.update(
        name=MODEL,
        version="1.0.0",
        source={"uri": graph.as_uri(), "sha256": hashlib.sha256(graph.read_bytes()).hexdigest()},
    )
    async with httpx.AsyncClient(base_url=running.gateway_url, timeout=30) as http:
        await running.ready(http)
        registered = await register_model(http, manifest)
        assert registered.status_code == 201, registered.text

        async def listed() -> bool:
            return (await http.get(f"/v1/models/{MODEL}/1.0.0")).status_code == 200

        await eventually(listed, timeout=60)


@pytest.fixture
async def http(running: Fleet) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=running.gateway_url, timeout=30) as client:
        yield client


async def request_experiment(http: httpx.AsyncClient, scenario: dict[str, Any]) -> str:
    response = await http.post(
        "/v1/experiments",
        json={"model": MODEL, "frameworks": ["onnxruntime"], "scenario": scenario},
    )
    assert response.status_code == 202, response.text
    experiment_id: str = response.json()["id"]
    return experiment_id


async def experiment(http: httpx.AsyncClient, experiment_id: str, *statuses: str) -> Any:
    async def reached() -> Any:
        response = await http.get(f"/v1/experiments/{experiment_id}")
        body = response.json()
        return body if response.status_code == 200 and body["status"] in statuses else None

    return await eventually(reached, timeout=90)


async def events(http: httpx.AsyncClient, evaluation_id: str) -> list[dict[str, Any]]:
    response = await http.get(f"/v1/evaluations/{evaluation_id}/events")
    return response.json() if response.status_code == 200 else []  # type: ignore[no-any-return]


async def test_one_experiment_fans_out_to_every_host_and_compares_them(
    running: Fleet, http: httpx.AsyncClient
) -> None:
    # A copy of every job as it goes to the workers: what a remote worker is told.
    connection = await aio_pika.connect(running.control_plane.broker_url)
    async with connection:
        channel = await connection.channel()
        jobs = await channel.get_exchange(f"{running.control_plane.namespace}.jobs")
        copies = await channel.declare_queue(exclusive=True)
        await copies.bind(jobs, "job.#")

        experiment_id = await request_experiment(
            http, {"iterations": 40, "min_duration_s": 0, "warmup": 2}
        )
        compared = await experiment(http, experiment_id, "compared", "failed")
        assert compared["status"] == "compared", compared

        sent = []
        while (message := await copies.get(fail=False, no_ack=True)) is not None:
            sent.append(orjson.loads(message.body))

    comparison = compared["comparison"]
    results = comparison["evaluations"]
    assert comparison["complete"] is True
    assert comparison["failures"] == []
    assert [r["status"] for r in results] == ["completed"] * HOSTS
    # Three hosts, each under its own name, each its own worker.
    assert sorted(r["host"] for r in results) == sorted(h.name for h in running.hosts.hosts)
    assert len({r["agent_id"] for r in results}) == HOSTS
    # The same graph on the same framework: every pair agrees.
    assert comparison["parity_ok"] is True
    for result in results:
        started = next(
            e for e in await events(http, result["evaluation_id"]) if e["type"].endswith("started")
        )
        assert started["payload"]["host"] == result["host"]
        assert started["payload"]["environment"]["host"] == result["host"]

    # Each host was sent the model by URL of the registry's artifact server, never as a path
    # of the control plane's host; each fetched it and verified it into its own cache.
    artifact_url = running.control_plane.artifact_url
    assert len(sent) == HOSTS
    for job in sent:
        source = job["payload"]["manifest"]["source"]["uri"]
        assert source.startswith(f"{artifact_url}/sha256/"), source
        assert "file://" not in orjson.dumps(job).decode()
        assert str(running.private) not in orjson.dumps(job).decode()
    digest = source.split("/")[-2]
    for host in running.hosts.hosts:
        cache = running.workdir / "hosts" / host.name / "home" / "artifacts" / "sha256" / digest
        assert (cache / "squeezenet.onnx").is_file()

    # The fleet, as the API and the CLI show it: each host's agent, idle again, one job done.
    async def idle() -> Any:
        agents = (await http.get("/v1/agents")).json()
        return agents if all(a["state"] == "online" for a in agents) else None

    fleet_now = {a["host"]: a for a in await eventually(idle, timeout=60)}
    assert set(fleet_now) == {r["host"] for r in results}
    for result in results:
        agent = fleet_now[result["host"]]
        assert agent["agent_id"] == result["agent_id"]
        assert (agent["framework"], agent["hardware"]) == ("onnxruntime", "cpu")
        assert agent["framework_version"] == result["framework_version"]
        assert agent["device"]  # the CPU model the worker announced
        assert agent["current_job"] is None
        assert agent["last_heartbeat"] is not None
        assert (agent["jobs_done"], agent["jobs_failed"]) == (1, 0)
    listed = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dlscope", "agents", "--gateway", running.gateway_url,
        stdout=asyncio.subprocess.PIPE, env={**os.environ, "COLUMNS": "250"},
    )  # fmt: skip
    table, _ = await listed.communicate()
    assert listed.returncode == 0
    for host in running.hosts.hosts:
        line = next(row for row in table.decode().splitlines() if host.name in row)
        assert "onnxruntime" in line
        assert "online" in line


async def test_hosts_measure_in_parallel_each_holding_its_own_device(
    running: Fleet, http: httpx.AsyncClient
) -> None:
    # A device lease is a host's: the hosts (which share this machine's /tmp, under host
    # names of their own) do not wait for each other, so their timed windows overlap.
    experiment_id = await request_experiment(
        http, {"iterations": 40, "min_duration_s": 2, "max_duration_s": 10, "warmup": 2}
    )
    compared = await experiment(http, experiment_id, "compared", "failed")
    assert compared["status"] == "compared", compared
    leases = {}
    for member in compared["members"]:
        (measured,) = [
            e["payload"]
            for e in await events(http, member["evaluation_id"])
            if e["type"] == "evaluation.measured"
        ]
        leases[member["host"]] = measured["lease"]
    assert set(leases) == {h.name for h in running.hosts.hosts}
    for host, lease in leases.items():
        assert (lease["host"], lease["held"]) == (host, True)
        assert lease["device"].startswith("cpu")
    windows = [
        (datetime.fromisoformat(lease["acquired_at"]), datetime.fromisoformat(lease["released_at"]))
        for lease in leases.values()
    ]
    # One instant when every host held its device at once.
    assert max(start for start, _ in windows) < min(end for _, end in windows), leases


async def test_a_host_cut_off_mid_job_fails_its_member_and_the_rest_is_compared(
    running: Fleet, http: httpx.AsyncClient
) -> None:
    experiment_id = await request_experiment(
        http,
        {"iterations": 1_000_000, "min_duration_s": 6, "max_duration_s": 6, "warmup": 0},
    )
    scheduled = await experiment(http, experiment_id, "scheduled", "compared", "failed")
    members = {m["host"]: m for m in scheduled["members"]}
    assert set(members) == {h.name for h in running.hosts.hosts}
    victim = running.hosts.hosts[1]
    lost = members[victim.name]

    async def started() -> bool:
        return any(e["type"].endswith("started") for e in await events(http, lost["evaluation_id"]))

    await eventually(started, timeout=60)

    async def busy() -> Any:
        agents = {a["agent_id"]: a for a in (await http.get("/v1/agents")).json()}
        return agents[lost["agent_id"]] if agents[lost["agent_id"]]["state"] == "busy" else None

    assert (await eventually(busy, timeout=60))["current_job"] == lost["evaluation_id"]
    running.hosts.cut(victim)
    cut_at = time.monotonic()

    compared = await experiment(http, experiment_id, "compared", "failed")
    print(f"host cut off -> experiment compared in {time.monotonic() - cut_at:.1f} s")
    assert compared["status"] == "compared", compared
    results = {r["host"]: r for r in compared["comparison"]["evaluations"]}
    assert results[victim.name]["status"] == "failed"
    error = results[victim.name]["error"]
    print(error)
    # Noticed by missed heartbeats, named with its agent and host; no other agent may run
    # a member pinned to it, so it fails rather than waiting for the experiment's deadline.
    assert error.startswith("agent: "), error
    assert f"on host {victim.name} went offline (missed 3 heartbeats" in error
    assert "pinned to" in error
    others = [h.name for h in running.hosts.hosts if h != victim]
    assert [results[h]["status"] for h in others] == ["completed", "completed"]
    assert compared["comparison"]["complete"] is True
    assert [f["agent_id"] for f in compared["comparison"]["failures"]] == [lost["agent_id"]]

    agents = {a["agent_id"]: a for a in (await http.get("/v1/agents")).json()}
    assert agents[lost["agent_id"]]["state"] == "offline"
    assert agents[lost["agent_id"]]["current_job"] is None
    # The host is left cut off; its worker cannot say goodbye, so it is not waited for.
    running.hosts.stop(running.workers.pop(lost["agent_id"]), grace_s=1)
