"""The command line against a running deployment (``--gateway``/DLSCOPE_GATEWAY_URL), as a
user drives one: every command that can run embedded works the same over HTTP.

The deployment is ``dlscope up`` in its own home; the commands run with another home, so
nothing they show can come from a store they read themselves.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from dlscope.cli.outcome import COMPLETED
from harness.relay import free_port
from harness.squeezenet import squeezenet_copy, squeezenet_file
from harness.waiting import eventually
from shared.config import REPOSITORY_ROOT

pytestmark = pytest.mark.e2e

SQUEEZENET = squeezenet_file()
MANIFEST = squeezenet_copy("their-net", "a copy of squeezenet registered over HTTP")


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[str]:
    """``dlscope up`` with an ONNX Runtime worker, its URL once the worker is online."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    environment["DLSCOPE_HOME"] = str(tmp_path / "deployment")
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "dlscope", "up", "--port", str(port)),
        env=environment,
        cwd=REPOSITORY_ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:

            async def online() -> bool:
                try:
                    agents = (await http.get("/v1/agents")).json()
                except httpx.HTTPError:
                    return False  # not listening yet
                return any(a["status"] == "online" for a in agents)

            await eventually(online, timeout=120, what="the deployment's worker online")
        yield url
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)


def dlscope(home: Path, gateway: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    environment.update(DLSCOPE_HOME=str(home), DLSCOPE_GATEWAY_URL=gateway, COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "dlscope", *arguments],
        env=environment,
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


async def test_models_submit_layers_and_report_go_to_the_deployment(
    gateway: str, tmp_path: Path
) -> None:
    home = tmp_path / "user"
    files = tmp_path / "files"
    files.mkdir()
    shutil.copy(SQUEEZENET, files / "net.onnx")
    (files / "net.yaml").write_text(MANIFEST)

    def run(*arguments: str) -> subprocess.CompletedProcess[str]:
        return dlscope(home, gateway, *arguments)

    registered = await asyncio.to_thread(run, "models", "register", str(files / "net.yaml"))
    assert registered.returncode == 0, registered.stderr
    assert "their-net@1.0.0: registered" in registered.stdout
    again = await asyncio.to_thread(run, "models", "register", str(files / "net.yaml"))
    assert "their-net@1.0.0: already registered, unchanged" in again.stdout
    listed = await asyncio.to_thread(run, "models", "list", "--framework", "onnxruntime")
    assert "their-net" in listed.stdout
    assert "a copy of squeezenet registered over HTTP" in listed.stdout

    result_file = tmp_path / "submitted.json"
    submitted = await asyncio.to_thread(
        run,
        *("submit", "their-net", "-n", "20", "--min-duration", "0.5"),
        *("--trace-level", "framework", "--json", str(result_file)),
    )
    assert submitted.returncode in COMPLETED, submitted.stderr + submitted.stdout
    evaluation = json.loads(result_file.read_text())
    assert evaluation["status"] == "completed"
    assert evaluation["model"] == "their-net"
    shown = " ".join(submitted.stdout.split())
    assert f"evaluation {evaluation['id']} accepted" in shown
    assert "p50 (ms)" in shown
    assert f"full result written to {result_file}" in shown
    # The layers, as `dlscope layers` ranks them; no link to a Jaeger this deployment lacks.
    assert "by median µs per query" in shown
    assert "time per op type" in shown
    assert "16686" not in shown

    layers = await asyncio.to_thread(run, "layers", evaluation["id"], "--top", "3")
    assert layers.returncode == 0, layers.stderr
    assert "time per op type" in layers.stdout
    assert "Conv" in layers.stdout  # squeezenet's convolutions, profiled by the deployment

    base = tmp_path / "their-report"
    report = await asyncio.to_thread(run, "report", evaluation["id"], "-o", str(base))
    assert report.returncode == 0, report.stderr
    for suffix in ("html", "csv", "md"):
        assert "their-net" in base.with_name(f"their-report.{suffix}").read_text()

    deprecated = await asyncio.to_thread(
        run, "models", "deprecate", "their-net", "1.0.0", "--reason", "superseded"
    )
    assert deprecated.returncode == 0, deprecated.stderr
    assert "their-net" not in (await asyncio.to_thread(run, "models", "list")).stdout
    with_old = await asyncio.to_thread(run, "models", "list", "--deprecated")
    assert "1.0.0 (deprecated)" in with_old.stdout

    # Nothing was read from, or written to, a store of the user's own home.
    assert not (home / "dlscope.db").exists()


async def test_a_gateway_that_refuses_is_said_to_refuse(gateway: str, tmp_path: Path) -> None:
    unknown = await asyncio.to_thread(
        dlscope, tmp_path, gateway, "submit", "no-such-model", "-n", "5"
    )
    assert unknown.returncode == 2
    said = " ".join(unknown.stderr.split())
    assert "the gateway refused the evaluation (422)" in said
    assert "no-such-model" in said
    gone = await asyncio.to_thread(dlscope, tmp_path, "http://127.0.0.1:9", "models", "list")
    assert gone.returncode == 2
    assert "cannot reach the gateway at http://127.0.0.1:9" in " ".join(gone.stderr.split())
