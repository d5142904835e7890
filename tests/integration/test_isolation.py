"""Every framework runs in its own process: a native crash, an exit or a hang there is a
failed call naming the cause, and the worker (and every other framework) lives on."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from dlscope.embedded import all_services
from harness.deployment import purge_namespace
from services.workers import WorkerService
from services.workers.handover import FrameworkCall, FrameworkOptions
from services.workers.isolation import FrameworkCrashed, FrameworkProcess
from shared.errors import ConfigurationError, PredictorError
from shared.messaging import create_broker
from shared.runtime import Runtime, running
from shared.telemetry import Telemetry
from tests.conftest import opencl_problem
from tests.integration.conftest import STACKS, stack_settings

FAULTS = "tests.integration.faults"


def fault(name: str) -> FrameworkCall[Any]:
    """A function of tests/integration/faults.py, called in the framework process."""
    return FrameworkCall(f"{FAULTS}:{name}", object)


@pytest.fixture
async def onnxruntime(tmp_path: Path) -> AsyncIterator[FrameworkProcess]:
    process = FrameworkProcess(
        "onnxruntime", "cpu", options=FrameworkOptions(home=tmp_path), deadline_s=20
    )
    try:
        yield process
    finally:
        await process.close()


async def test_the_framework_is_imported_in_its_own_process(
    onnxruntime: FrameworkProcess,
) -> None:
    described = await onnxruntime.start()
    assert described.version.count(".") >= 1
    assert described.pid == onnxruntime.pid != os.getpid()
    assert await onnxruntime.call(fault("pid")) == described.pid


async def test_an_abort_is_a_failure_naming_the_signal_what_it_did_and_its_last_words(
    onnxruntime: FrameworkProcess,
) -> None:
    first = (await onnxruntime.start()).pid
    with pytest.raises(FrameworkCrashed) as crash:
        await onnxruntime.call(fault("abort"))
    message = str(crash.value)
    assert "the onnxruntime process was killed by SIGABRT while building the program" in message
    assert "about to abort, as a native library would" in message
    # The next call gets a fresh process: one crash does not end the framework's worker.
    assert await onnxruntime.call(fault("pid")) != first


async def test_an_exit_names_its_status(onnxruntime: FrameworkProcess) -> None:
    with pytest.raises(FrameworkCrashed, match=r"exited with status 3 .*exiting with 3"):
        await onnxruntime.call(fault("exit_with"), 3)


async def test_a_hang_past_the_deadline_is_killed_and_named(tmp_path: Path) -> None:
    process = FrameworkProcess(
        "onnxruntime", "cpu", options=FrameworkOptions(home=tmp_path), deadline_s=1.5
    )
    try:
        with pytest.raises(
            FrameworkCrashed, match=r"did not finish within 1.5 s while waiting forever"
        ):
            await process.call(fault("hang"))
        assert await process.call(fault("pid")) > 0
    finally:
        await process.close()


async def test_a_framework_error_is_an_ordinary_failure_and_keeps_the_process(
    onnxruntime: FrameworkProcess,
) -> None:
    first = (await onnxruntime.start()).pid
    with pytest.raises(PredictorError, match="ValueError: the framework refused the input"):
        await onnxruntime.call(fault("fail"))
    assert await onnxruntime.call(fault("pid")) == first


async def test_a_framework_that_is_not_installed_stops_its_worker_with_the_reason(
    tmp_path: Path,
) -> None:
    process = FrameworkProcess("tensorrt", "gpu", options=FrameworkOptions(home=tmp_path))
    with pytest.raises(ConfigurationError, match="framework 'tensorrt' cannot run here"):
        await process.start()
    assert process.pid is None


def test_a_framework_process_dies_with_its_worker_when_that_is_killed(tmp_path: Path) -> None:
    # A worker killed by kill -9 cannot stop its framework process: the kernel does, through
    # the parent-death signal the framework process asked for.
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import asyncio, sys, time\n"
            "from pathlib import Path\n"
            "from services.workers.handover import FrameworkOptions\n"
            "from services.workers.isolation import FrameworkProcess\n"
            "options = FrameworkOptions(home=Path(sys.argv[1]))\n"
            "process = FrameworkProcess('onnxruntime', 'cpu', options=options)\n"
            "print(asyncio.run(process.start()).pid, flush=True)\n"
            "time.sleep(600)\n",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        framework = psutil.Process(int(worker.stdout.readline()))
        assert framework.is_running()
    finally:
        worker.kill()
        worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()
    framework.wait(timeout=30)  # psutil.TimeoutExpired if it outlived its worker
    assert not framework.is_running()


# Through a worker, on the embedded stack and on RabbitMQ + PostgreSQL.


@pytest.fixture(params=STACKS)
async def two_frameworks(
    request: pytest.FixtureRequest, tmp_path: Path, namespace: str
) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, WorkerService]]]:
    settings = stack_settings(request, tmp_path, namespace)
    runtime = Runtime(
        settings, Telemetry.create(settings, "test"), create_broker(settings.broker_url)
    )
    services = all_services(
        runtime, [("onnxruntime", "cpu"), ("opencl", "cpu")], gateway=("127.0.0.1", 0)
    )
    workers: dict[str, WorkerService] = {
        s.framework: s for s in services if isinstance(s, WorkerService)
    }
    try:
        async with running(services):
            port = services[-1].port  # type: ignore[attr-defined]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
                yield http, workers
    finally:
        await runtime.close()
        if request.param != "embedded":
            await purge_namespace(settings.broker_url, namespace)


async def _poll(http: httpx.AsyncClient, path: str, done: Any) -> dict[str, Any]:
    body: Any = None
    try:
        async with asyncio.timeout(120):
            while True:
                response = await http.get(path)
                if response.status_code == 200 and done(body := response.json()):
                    return dict(body)
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"{path} never got there; last seen: {body}") from None


@pytest.mark.skipif(
    opencl_problem("cpu") is not None,
    reason=f"the crashing member is OpenCL's, which runs nothing here: {opencl_problem('cpu')}",
)
async def test_a_crash_in_one_framework_fails_its_member_and_the_others_are_compared(
    two_frameworks: tuple[httpx.AsyncClient, dict[str, WorkerService]],
) -> None:
    http, workers = two_frameworks
    response = await http.post(
        "/v1/experiments",
        json={
            "models": ["squeezenet"],
            "frameworks": ["onnxruntime", "opencl"],
            # Long enough that the crash lands while it measures.
            "scenario": {"iterations": 1000000, "min_duration_s": 6, "max_duration_s": 6},
        },
    )
    assert response.status_code == 202, response.text
    experiment = response.json()["id"]
    victim = workers["opencl"].process
    # Once the opencl member measures, its framework process is killed (kill -9, as the
    # kernel's OOM killer would); the onnxruntime member runs on.
    members = await _poll(
        http,
        f"/v1/experiments/{experiment}",
        lambda body: len(body.get("members") or []) == 2,
    )
    by_framework = {m["framework"]: m["evaluation_id"] for m in members["members"]}
    async with asyncio.timeout(60):
        while victim.phase != "running the scenario":
            await asyncio.sleep(0.05)
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    failed = await _poll(
        http,
        f"/v1/evaluations/{by_framework['opencl']}",
        lambda body: body["status"] == "failed",
    )
    assert failed["error"].startswith(
        "predictor: the opencl process was killed by SIGKILL (kill -9, or the kernel's "
        "out-of-memory killer) while running the scenario"
    )
    compared = await _poll(
        http, f"/v1/experiments/{experiment}", lambda body: body["status"] in ("compared", "failed")
    )
    survivor = await _poll(
        http,
        f"/v1/evaluations/{by_framework['onnxruntime']}",
        lambda body: body["status"] in ("completed", "failed"),
    )
    assert survivor["status"] == "completed"
    assert compared["status"] == "compared"
