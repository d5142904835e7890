"""`pip install '.[onnxruntime]'` into a fresh virtualenv, as a user installs a worker host:
no torch, no TensorFlow, no OpenCL, and an onnxruntime worker that serves a deployment and
runs `dlscope run` on its own. A framework that is not installed is named with its extra.

The install is real (a wheel built from this tree, its dependencies from the package
registry, ~30 s with pip's cache warm); bench/install_size.py measures it against the
full install.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from dlscope.cli.outcome import COMPLETED
from harness.deployment import (
    SERVICES,
    Deployment,
    copy_package_sources,
    fresh_database,
    purge_namespace,
)
from harness.waiting import evaluation_outcome
from services.workers.availability import framework_module
from tests.conftest import POSTGRES_ADMIN_DSN

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

# pip's words for a registry it cannot reach: then there is nothing to test here.
UNREACHABLE = (
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ReadTimeoutError",
)


@dataclass(frozen=True)
class Install:
    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "venv" / "bin"

    @property
    def environment(self) -> dict[str, str]:
        # Nothing of this checkout may leak in: the install must stand alone.
        return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(
        self, *command: str, home: Path, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / command[0]), *command[1:]],
            capture_output=True,
            text=True,
            cwd=self.root,
            env={**self.environment, "DLSCOPE_HOME": str(home)},
            timeout=timeout,
        )


@pytest.fixture(scope="module")
def onnxruntime_install(tmp_path_factory: pytest.TempPathFactory) -> Install:
    root = tmp_path_factory.mktemp("fresh-install")
    source = root / "source"
    copy_package_sources(source)
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True)
    result = subprocess.run(
        [str(root / "venv" / "bin" / "pip"), "install", "--quiet", f"{source}[onnxruntime]"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=840,
    )
    if result.returncode != 0:
        reason = next(
            (
                line
                for line in result.stderr.splitlines()
                if any(word in line for word in UNREACHABLE)
            ),
            None,
        )
        if reason is not None:
            pytest.skip(f"the package registry cannot be reached: {reason.strip()}")
        pytest.fail(f"pip install '.[onnxruntime]' failed:\n{result.stderr[-4000:]}")
    return Install(root)


def test_the_onnxruntime_extra_brings_onnxruntime_and_no_other_framework(
    onnxruntime_install: Install,
) -> None:
    probe = (
        "import importlib.util, json, services; print(json.dumps({'services': services.__file__,"
        " **{m: importlib.util.find_spec(m) is not None for m in"
        " ('onnxruntime', 'onnx', 'torch', 'tensorflow', 'pyopencl', 'mlperf_loadgen')}}))"
    )
    result = onnxruntime_install.run("python", "-c", probe, home=onnxruntime_install.root)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    # Imported from the install, not from this checkout.
    assert Path(found.pop("services")).is_relative_to(onnxruntime_install.root / "venv")
    assert found == {
        "onnxruntime": True,
        "onnx": True,
        "torch": False,
        "tensorflow": False,
        "pyopencl": False,
        "mlperf_loadgen": False,
    }


def test_dlscope_run_evaluates_the_built_in_model_from_the_wheel(
    onnxruntime_install: Install, tmp_path: Path
) -> None:
    # The zoo's manifests and the migrations travel in the wheel: no checkout needed.
    result = onnxruntime_install.run(
        "dlscope",
        "run",
        "squeezenet",
        "-n",
        "20",
        "--warmup",
        "0",
        "--json",
        str(tmp_path / "run.json"),
        home=tmp_path / "home",
    )
    assert result.returncode in COMPLETED, result.stdout + result.stderr
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["evaluation"]["status"] == "completed"
    assert run["evaluation"]["framework"] == "onnxruntime"


@pytest.mark.rabbitmq
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "opencl"])
def test_a_worker_for_a_framework_not_installed_names_its_extra_and_stays_up(
    onnxruntime_install: Install, framework: str, tmp_path: Path, rabbitmq_url: str
) -> None:
    log = tmp_path / "worker.log"
    with log.open("wb") as output:
        worker = subprocess.Popen(
            [str(onnxruntime_install.bin / "dlscope"), "serve", "worker", "--framework", framework],
            env={
                **onnxruntime_install.environment,
                "DLSCOPE_HOME": str(tmp_path),
                "DLSCOPE_BROKER_URL": rabbitmq_url,
                "DLSCOPE_NAMESPACE": f"fresh{uuid.uuid4().hex[:8]}",
            },
            cwd=onnxruntime_install.root,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    hint = (
        f"is not installed here (no module '{framework_module(framework)}'): "
        f"pip install 'dlscope[{framework}]'"
    )
    try:
        # It says what to install, and is up: announced (with the reason) and heartbeating.
        deadline = time.monotonic() + 120
        while hint not in log.read_text() and worker.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        assert worker.poll() is None, log.read_text()[-2000:]
    finally:
        worker.terminate()
        worker.wait(timeout=60)


@pytest.fixture
async def control_plane(tmp_path: Path, rabbitmq_url: str) -> AsyncIterator[Deployment]:
    """Every service but the workers, from this checkout, on RabbitMQ and PostgreSQL."""
    database_url, drop_database = await fresh_database(POSTGRES_ADMIN_DSN)
    deployment = Deployment(
        broker_url=rabbitmq_url,
        database_url=database_url,
        namespace=f"fresh{uuid.uuid4().hex[:8]}",
        workdir=tmp_path,
        frameworks=("onnxruntime",),
    )
    try:
        await asyncio.to_thread(deployment.migrate)
        for service in SERVICES:
            if service != "workers":
                deployment.start(service)
        yield deployment
    finally:
        await asyncio.to_thread(deployment.stop_all)
        await drop_database()
        await purge_namespace(rabbitmq_url, deployment.namespace)


def spawn_worker(install: Install, deployment: Deployment, agent_id: str) -> None:
    """An onnxruntime worker from ``install`` joining ``deployment`` (stopped with it)."""
    with (deployment.workdir / "fresh-worker.log").open("ab") as log:
        deployment.processes["fresh-worker"] = subprocess.Popen(
            [
                str(install.bin / "dlscope"),
                "serve",
                "worker",
                "--framework",
                "onnxruntime",
                "--agent-id",
                agent_id,
            ],
            env={
                **install.environment,
                **{k: v for k, v in deployment.environment.items() if k.startswith("DLSCOPE_")},
                "DLSCOPE_HOME": str(deployment.workdir / "fresh-home"),
            },
            cwd=install.root,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


@pytest.mark.rabbitmq
@pytest.mark.postgres
async def test_a_worker_from_the_onnxruntime_install_serves_a_deployment(
    onnxruntime_install: Install, control_plane: Deployment
) -> None:
    agent_id = f"fresh-{uuid.uuid4().hex[:6]}"
    spawn_worker(onnxruntime_install, control_plane, agent_id)
    async with httpx.AsyncClient(base_url=control_plane.gateway_url, timeout=30) as http:
        await control_plane.ready(http)
        response = await http.post(
            "/v1/evaluations",
            json={
                "model": "squeezenet",
                "framework": "onnxruntime",
                "scenario": {"iterations": 20, "min_duration_s": 0, "warmup": 0},
            },
        )
        assert response.status_code == 202, response.text
        evaluation = await evaluation_outcome(http, response.json()["id"], timeout=180)
    assert evaluation["status"] == "completed", evaluation.get("error")
    assert evaluation["agent_id"] == agent_id
    assert evaluation["result"]["count"] == 20
