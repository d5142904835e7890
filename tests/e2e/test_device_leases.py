"""Fair comparisons: the members of an experiment on one host are measured one at a time, each
holding the device it measures, and only ``concurrent`` runs them together, labelled.

The digits CNN on onnxruntime, pytorch, tensorflow and opencl (PoCL, on the same cores), as
``dlscope run --framework all`` runs it embedded, and as a deployment runs it with every
service and worker in its own process on RabbitMQ and PostgreSQL. What shows it is what the
store keeps: each member's ``evaluation.measured`` names the device it held and when."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import datetime
from itertools import combinations, pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest

from dlscope.cli.outcome import COMPLETED
from dlscope.zoo import BuiltModel
from harness.deployment import throwaway_deployment
from harness.waiting import experiment_outcome, models_listed
from services.workers.devices import cpu_device
from services.workers.leases import DeviceLeases
from shared.config import REPOSITORY_ROOT
from shared.eventstore import EventStore
from shared.messages import evaluation_stream
from tests.conftest import POSTGRES_ADMIN_DSN, register_model, runnable

pytestmark = [pytest.mark.e2e]

# OpenCL only where its device compiles kernels here (see tests.conftest.opencl_problem).
FRAMEWORKS = runnable(("onnxruntime", "pytorch", "tensorflow", "opencl"))
# Each member's measurement lasts a while (a second of timed queries, then the accuracy
# pass): members run together cannot miss each other.
SCENARIO = {"iterations": 20, "min_duration_s": 1.0, "warmup": 2, "batch_size": 32}
CONTENTION = "measured_under_contention"


@pytest.fixture(scope="module")
def zoo(digits_zoo: list[BuiltModel]) -> list[BuiltModel]:
    return digits_zoo


def dlscope(environment: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlscope", *arguments],
        env={**environment, "COLUMNS": "250"},
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )


def window(lease: dict[str, Any]) -> tuple[datetime, datetime]:
    return datetime.fromisoformat(lease["acquired_at"]), datetime.fromisoformat(
        lease["released_at"]
    )


def overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    (a_in, a_out), (b_in, b_out) = window(a), window(b)
    return a_in < b_out and b_in < a_out


def one_at_a_time(leases: list[dict[str, Any]]) -> None:
    """Every member held the same device, and no two held it at once."""
    assert len(leases) == len(FRAMEWORKS)
    assert {(lease["host"], lease["device"]) for lease in leases} == {
        (leases[0]["host"], leases[0]["device"])
    }
    assert leases[0]["device"].startswith("cpu")  # PoCL's device is the CPU's cores
    assert all(lease["held"] for lease in leases)
    in_turn = sorted(leases, key=lambda lease: window(lease)[0])
    for before, after in pairwise(in_turn):
        assert window(before)[1] <= window(after)[0], (before, after)


def together(leases: list[dict[str, Any]]) -> None:
    """No lease held; the measurements' own windows overlap."""
    assert len(leases) == len(FRAMEWORKS)
    assert not any(lease["held"] for lease in leases)
    assert any(overlap(a, b) for a, b in combinations(leases, 2))


async def stored_leases(database_url: str, members: list[str]) -> list[dict[str, Any]]:
    """Each member's evaluation.measured lease, as the event store keeps it."""
    found = []
    async with EventStore.from_url(database_url) as store:
        for member in members:
            events = await store.stream_events(evaluation_stream(uuid.UUID(member)))
            (measured,) = [e.payload for e in events if e.type == "evaluation.measured"]
            found.append(measured["lease"])
    return found


def test_run_all_frameworks_embedded_measures_the_members_one_at_a_time(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    environment["DLSCOPE_HOME"] = str(tmp_path)
    arguments = ["run", "digits-cnn", "--framework", "all", "--dataset", "digits"]
    arguments += ["--split", "test", "-n", "20", "-b", "32", "--min-duration", "1"]
    database = f"sqlite+aiosqlite:///{tmp_path / 'dlscope.db'}"

    result = dlscope(environment, *arguments, "--json", str(tmp_path / "fair.json"))
    assert result.returncode in COMPLETED, result.stderr + result.stdout
    document = json.loads((tmp_path / "fair.json").read_text())
    members = [e["evaluation_id"] for e in document["evaluations"]]
    assert {e["request"]["framework"] for e in document["evaluations"]} == set(FRAMEWORKS)
    leases = asyncio.run(stored_leases(database, members))
    one_at_a_time(leases)
    assert sorted(document["device_windows"]) == sorted(members)
    shown = " ".join(result.stdout.split())
    device = leases[0]["device"]
    assert f"{device}: members measured one at a time, in the order their workers got" in shown
    for evaluation in document["evaluations"]:
        reasons = {r["code"] for r in evaluation["result"]["verdict"]["reasons"]}
        assert CONTENTION not in reasons

    result = dlscope(environment, *arguments, "--concurrent", "--json", str(tmp_path / "c.json"))
    # Measured together, the members are INVALID for contention (exit 3), as they should be.
    assert result.returncode in COMPLETED, result.stderr + result.stdout
    document = json.loads((tmp_path / "c.json").read_text())
    members = [e["evaluation_id"] for e in document["evaluations"]]
    together(asyncio.run(stored_leases(database, members)))
    for evaluation in document["evaluations"]:
        reasons = {r["code"] for r in evaluation["result"]["verdict"]["reasons"]}
        assert CONTENTION in reasons, evaluation["request"]["framework"]
    assert "members measured together (concurrent)" in " ".join(result.stdout.split())


@pytest.mark.rabbitmq
@pytest.mark.postgres
async def test_a_deployment_measures_the_members_on_one_host_one_at_a_time(
    rabbitmq_url: str,
    zoo: list[BuiltModel],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # This deployment's workers share a lease directory of their own: what they wait for is
    # each other, not another test run on this machine.
    monkeypatch.setenv("DLSCOPE_LEASE_DIR", str(tmp_path / "leases"))
    async with throwaway_deployment(
        rabbitmq_url, POSTGRES_ADMIN_DSN, prefix="lease", frameworks=FRAMEWORKS
    ) as deployment:
        deployment.start_all()
        async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=60) as http:
            await deployment.ready(http)
            for model in zoo:
                registered = await register_model(http, model.manifest.model_dump(mode="json"))
                assert registered.status_code == 201, registered.text

            await models_listed(http, [model.manifest.name for model in zoo], timeout=60)

            fair = await experiment(http, concurrent=False)
            one_at_a_time(await http_leases(http, fair))
            for verdict in await verdicts(http, fair):
                assert CONTENTION not in verdict

            contended = await experiment(http, concurrent=True)
            together(await http_leases(http, contended))
            for verdict in await verdicts(http, contended):
                assert CONTENTION in verdict

            environment = {**deployment.environment, "DLSCOPE_GATEWAY_URL": deployment.gateway_url}
            shown = await asyncio.to_thread(
                dlscope, environment, "submit", "digits-cnn", "--framework", "all", "-n", "10"
            )
            assert shown.returncode in COMPLETED, shown.stderr + shown.stdout
            assert "members measured one at a time, in the order their workers got the device" in (
                " ".join(shown.stdout.split())
            )


async def experiment(http: httpx.AsyncClient, *, concurrent: bool) -> list[str]:
    """The members of a compared experiment of the digits CNN on every framework."""
    body = {"model": "digits-cnn", "dataset": "digits", "split": "test", "scenario": SCENARIO}
    response = await http.post("/v1/experiments", json={**body, "concurrent": concurrent})
    assert response.status_code == 202, response.text

    done = await experiment_outcome(http, response.json()["id"], timeout=300)
    assert done["status"] == "compared", done["error"]
    assert done["comparison"]["failures"] == []
    assert {m["framework"] for m in done["members"]} == set(FRAMEWORKS)
    return [m["evaluation_id"] for m in done["members"]]


async def http_leases(http: httpx.AsyncClient, members: list[str]) -> list[dict[str, Any]]:
    found = []
    for member in members:
        events = (await http.get(f"/v1/evaluations/{member}/events")).json()
        (measured,) = [e["payload"] for e in events if e["type"] == "evaluation.measured"]
        found.append(measured["lease"])
    return found


async def verdicts(http: httpx.AsyncClient, members: list[str]) -> list[set[str]]:
    found = []
    for member in members:
        result = (await http.get(f"/v1/evaluations/{member}")).json()["result"]
        found.append({reason["code"] for reason in result["verdict"]["reasons"]})
    return found


def test_concurrent_with_one_framework_is_accepted_and_said_to_mean_little(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    environment["DLSCOPE_HOME"] = str(tmp_path)
    result = dlscope(
        environment,
        *["run", "squeezenet", "-n", "5", "--min-duration", "0", "--warmup", "0"],
        *["--concurrent", "--json", str(tmp_path / "one.json")],
    )
    assert result.returncode in COMPLETED, result.stderr + result.stdout
    said = " ".join(result.stderr.split())
    assert "warning: --concurrent runs an experiment's members together; with one framework" in said
    evaluation = json.loads((tmp_path / "one.json").read_text())["evaluation"]
    reasons = {r["code"] for r in evaluation["result"]["verdict"]["reasons"]}
    assert CONTENTION in reasons


async def test_a_run_without_a_terminal_says_whose_lease_it_waits_for_and_when_it_got_it(
    tmp_path: Path,
) -> None:
    # The test holds the CPU's lease as another run would; the run's stderr is a pipe.
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    environment.update(DLSCOPE_HOME=str(tmp_path), DLSCOPE_LEASE_DIR=str(tmp_path / "leases"))
    device = cpu_device(os.sched_getaffinity(0))
    other = uuid.uuid4()
    leases = DeviceLeases(tmp_path / "leases", host="here")
    arguments = ("run", "squeezenet", "-n", "5", "--warmup", "0", "--trace-level", "none")
    async with leases.hold(device, evaluation_id=other, agent_id="another-run"):
        running = asyncio.create_task(asyncio.to_thread(dlscope, environment, *arguments))
        await asyncio.sleep(8)  # started, scheduled, and waiting for the device
    result = await running
    assert result.returncode in COMPLETED, result.stderr
    said = result.stderr.splitlines()
    waiting = [line for line in said if "waiting for the device" in line]
    assert len(waiting) == 1, said  # one line, though no row is drawn without a terminal
    assert waiting[0].startswith(
        f"squeezenet on onnxruntime: waiting for the device {device.name}, held by evaluation "
        f"{str(other)[:8]} on agent another-run (at most "
    )
    assert any(line.startswith("squeezenet on onnxruntime: got the device after") for line in said)
