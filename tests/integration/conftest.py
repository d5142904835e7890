"""What the integration tests share: every service in this process, behind the gateway, on
the embedded stack (memory broker, SQLite) or on RabbitMQ + PostgreSQL."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from dlscope.embedded import all_services
from harness.deployment import purge_namespace
from harness.waiting import evaluation_outcome, eventually
from shared.config import Settings
from shared.messaging import create_broker
from shared.runtime import Runtime, Service, running
from shared.telemetry import Telemetry
from tests.conftest import fresh_database


class Stack:
    def __init__(self, runtime: Runtime, http: httpx.AsyncClient, services: list[Service]):
        self.runtime = runtime
        self.http = http
        self.services = services

    async def listed(self, name: str, version: str) -> bool:
        response = await self.http.get(f"/v1/models/{name}")
        return response.status_code == 200 and version in {m["version"] for m in response.json()}

    async def evaluate(self, model: str, version: str = "*", **extra: Any) -> dict[str, Any]:
        response = await self.http.post(
            "/v1/evaluations",
            json={
                "model": model,
                "version": version,
                "framework": "onnxruntime",
                "scenario": {"iterations": 3, "min_duration_s": 0, "warmup": 0},
                **extra,
            },
        )
        assert response.status_code == 202, response.text
        return await evaluation_outcome(self.http, response.json()["id"])


# The two stacks every such test runs on: in-process, and the real services.
STACKS = [
    "embedded",
    pytest.param("rabbitmq+postgres", marks=[pytest.mark.rabbitmq, pytest.mark.postgres]),
]


def stack_settings(
    request: pytest.FixtureRequest, tmp_path: Path, namespace: str, **overrides: Any
) -> Settings:
    """Settings for the stack ``request.param`` names (one of ``STACKS``), with
    ``overrides`` (e.g. a faster heartbeat)."""
    if request.param == "embedded":
        return Settings(home=tmp_path, namespace=namespace, **overrides)
    return Settings(
        home=tmp_path,
        namespace=namespace,
        broker_url=request.getfixturevalue("rabbitmq_url"),
        database_url=request.getfixturevalue("postgres_url"),
        **overrides,
    )


@contextlib.asynccontextmanager
async def started_stack(settings: Settings, *, embedded: bool) -> AsyncIterator[Stack]:
    """Every service and the gateway in this process on ``settings``, ready (the built-in
    zoo listed); its broker namespace purged afterwards."""
    runtime = Runtime(
        settings, Telemetry.create(settings, "test"), create_broker(settings.broker_url)
    )
    services = all_services(runtime, [("onnxruntime", "cpu")], gateway=("127.0.0.1", 0))
    headers = {"Authorization": f"Bearer {settings.api_token}"} if settings.api_token else {}
    try:
        async with running(services):
            port = services[-1].port  # type: ignore[attr-defined]
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", timeout=30, headers=headers
            ) as http:
                stack = Stack(runtime, http, services)
                await eventually(lambda: stack.listed("squeezenet", "1.0.1"))
                yield stack
    finally:
        await runtime.close()
        if not embedded:
            await purge_namespace(settings.broker_url, settings.namespace)


@pytest.fixture(params=STACKS)
async def any_stack(
    request: pytest.FixtureRequest, tmp_path: Path, namespace: str
) -> AsyncIterator[Stack]:
    """Every service and the gateway in this process: embedded, then on RabbitMQ + Postgres."""
    settings = stack_settings(request, tmp_path, namespace)
    async with started_stack(settings, embedded=request.param == "embedded") as stack:
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=STACKS)
async def module_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """``any_stack`` started once for a module whose tests only read from it, or each add
    only what no other test of the module looks at (its own evaluation, a refused request):
    a stack starts in seconds, and such a module has a dozen tests on each. Its tests run on
    the module's event loop (``pytest.mark.asyncio(loop_scope="module")``)."""
    with module_stack_settings(request, tmp_path_factory) as settings:
        async with started_stack(settings, embedded=request.param == "embedded") as stack:
            yield stack


@contextlib.contextmanager
def module_stack_settings(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """``stack_settings`` for a stack that serves a whole module: a home, a namespace and
    (on PostgreSQL) a database of its own, so that it may outlive the module's other tests'
    stacks without seeing them or being seen."""
    home = tmp_path_factory.mktemp("stack")
    namespace = f"t{uuid.uuid4().hex[:12]}"
    if request.param == "embedded":
        yield Settings(home=home, namespace=namespace)
        return
    with fresh_database() as database_url:
        broker_url = request.getfixturevalue("rabbitmq_url")
        yield Settings(
            home=home, namespace=namespace, broker_url=broker_url, database_url=database_url
        )
