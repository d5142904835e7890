"""The gateway's OpenAPI document matches what it does: schemathesis, every check, against
the real gateway on RabbitMQ + PostgreSQL finds no server error and no spec violation. The
same of the registry's artifact server, with a file it serves and one it must not."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dlscope.embedded import all_services
from harness.deployment import purge_namespace
from services.registry.artifacts import ArtifactServer
from services.registry.catalog import Catalog
from shared.artifacts import SourcePolicy, sha256_of
from shared.config import Settings
from shared.manifests import ModelManifest
from shared.messaging import create_broker
from shared.runtime import Runtime, running
from shared.telemetry import Telemetry

pytestmark = [pytest.mark.rabbitmq, pytest.mark.postgres]

SCHEMATHESIS = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
# Small enough for a couple of minutes on two cores; the seed makes a failure repeatable.
MAX_EXAMPLES = 12
SEED = 20240611
CONFIG = Path(__file__).with_name("schemathesis.toml")


async def _gateway(
    tmp_path: Path, namespace: str, rabbitmq_url: str, postgres_url: str, token: str | None
) -> AsyncIterator[str]:
    """Every service but the workers, and the gateway: the base URL. Without workers no
    evaluation that schemathesis requests is measured; each is only recorded."""
    settings = Settings(
        home=tmp_path,
        namespace=namespace,
        broker_url=rabbitmq_url,
        database_url=postgres_url,
        api_token=token,
        rpc_timeout_s=5,
    )
    runtime = Runtime(
        settings, Telemetry.create(settings, "test"), create_broker(settings.broker_url)
    )
    services = all_services(runtime, [], gateway=("127.0.0.1", 0))
    try:
        async with running(services):
            yield f"http://127.0.0.1:{services[-1].port}"  # type: ignore[attr-defined]
    finally:
        await runtime.close()
        await purge_namespace(settings.broker_url, namespace)


@pytest.fixture(params=[None, "s3cret"], ids=["no-token", "token"])
async def gateway_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    namespace: str,
    rabbitmq_url: str,
    postgres_url: str,
) -> AsyncIterator[tuple[str, str | None]]:
    async for url in _gateway(tmp_path, namespace, rabbitmq_url, postgres_url, request.param):
        yield url, request.param


@pytest.mark.timeout(300)
async def test_schemathesis_finds_no_server_error_and_no_spec_violation(
    gateway_url: tuple[str, str | None], tmp_path: Path
) -> None:
    url, token = gateway_url
    await _schemathesis(url, token, tmp_path)


@pytest.fixture(params=[None, "s3cret"], ids=["no-token", "token"])
async def artifact_server_url(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, str | None]]:
    """An artifact server whose catalog pins a file it serves (in its store) and a file of
    its host it must not serve (as an old registration in the log might name)."""
    store = tmp_path / "uploads"
    served = store / "sha256" / "x" / "net.onnx"
    served.parent.mkdir(parents=True)
    served.write_bytes(b"graph" * 1000)
    catalog = Catalog()
    for number, path in enumerate((served, Path("/etc/passwd"))):
        catalog.learn(_model(f"m{number}", path))
    settings = Settings(home=tmp_path, api_token=request.param)
    server = ArtifactServer(
        catalog.file,
        servable=SourcePolicy(roots=(store,)).servable,
        settings=settings,
        host="127.0.0.1",
        port=0,
    )
    await server.start()
    try:
        yield f"http://127.0.0.1:{server.port}", request.param
    finally:
        await server.stop()


def _model(name: str, path: Path) -> ModelManifest:
    return ModelManifest.model_validate(
        {
            "name": name,
            "version": "1.0.0",
            "framework": {"name": "onnxruntime"},
            "inputs": [{"name": "x", "shape": [1]}],
            "outputs": [{"name": "y", "shape": [1]}],
            "source": {"uri": path.as_uri(), "sha256": sha256_of(path)},
        }
    )


@pytest.mark.timeout(300)
async def test_schemathesis_finds_nothing_wrong_with_the_artifact_server(
    artifact_server_url: tuple[str, str | None], tmp_path: Path
) -> None:
    url, token = artifact_server_url
    await _schemathesis(url, token, tmp_path)


async def _schemathesis(url: str, token: str | None, tmp_path: Path) -> None:
    assert SCHEMATHESIS is not None, "schemathesis is in the dev extras: pip install -e '.[dev]'"
    command = [
        SCHEMATHESIS,
        "--config-file",
        str(CONFIG),
        "run",
        f"{url}/openapi.json",
        "--checks",
        "all",
        # Writes are asynchronous: 202 Accepted, and the evaluation or experiment can be read
        # once the recorder has stored its first event; until then it is 404 "(yet)", as
        # documented, which this check takes for a resource lost right after its creation.
        "--exclude-checks",
        "ensure_resource_availability",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--generation-deterministic",
        "--request-timeout",
        "20",
        "--no-color",
        *(["--header", f"Authorization: Bearer {token}"] if token else []),
    ]
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    report = output.decode(errors="replace")
    assert process.returncode == 0, report
    assert "500 Internal Server Error" not in report
