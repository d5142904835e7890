"""A store or broker that is away is 503 with a Retry-After, promptly; a bad filter or page
is 422. The outages are cut in a TCP proxy of this test's own, in front of the shared
PostgreSQL and RabbitMQ, which keep running for everyone else."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from harness.deployment import purge_namespace
from harness.relay import SeverableLink
from services.gateway.service import GatewayService
from shared.config import Settings
from shared.eventstore.migrate import upgrade
from shared.messaging import create_broker
from shared.runtime import Runtime
from shared.telemetry import Telemetry

pytestmark = [pytest.mark.rabbitmq, pytest.mark.postgres]


def _through(url: str, port: int) -> str:
    return url.replace(":5432/", f":{port}/").replace(":5672/", f":{port}/")


@contextlib.asynccontextmanager
async def _gateway(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    runtime = Runtime(
        settings, Telemetry.create(settings, "test"), create_broker(settings.broker_url)
    )
    gateway = GatewayService(runtime, port=0)
    await gateway.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gateway.port}") as http:
            yield http
    finally:
        await gateway.stop()
        await runtime.close()


@pytest.fixture
async def proxies(
    rabbitmq_url: str, postgres_url: str
) -> AsyncIterator[tuple[SeverableLink, SeverableLink]]:
    assert ":5672/" in rabbitmq_url, "the proxy assumes RabbitMQ's port"
    assert ":5432/" in postgres_url, "the proxy assumes PostgreSQL's port"
    broker, database = SeverableLink("127.0.0.1", 5672), SeverableLink("127.0.0.1", 5432)
    await broker.restore()
    await database.restore()
    yield broker, database
    await broker.close()
    await database.close()


@pytest.fixture
async def gateway(
    tmp_path: Path,
    namespace: str,
    rabbitmq_url: str,
    postgres_url: str,
    proxies: tuple[SeverableLink, SeverableLink],
) -> AsyncIterator[httpx.AsyncClient]:
    await upgrade(postgres_url)
    broker, database = proxies
    settings = Settings(
        home=tmp_path,
        namespace=namespace,
        broker_url=_through(rabbitmq_url, broker.port),
        database_url=_through(postgres_url, database.port),
    )
    try:
        async with _gateway(settings) as http:
            yield http
    finally:
        await purge_namespace(rabbitmq_url, namespace)


async def test_a_read_during_a_database_outage_is_503_with_retry_after(
    gateway: httpx.AsyncClient, proxies: tuple[SeverableLink, SeverableLink]
) -> None:
    assert (await gateway.get("/v1/evaluations")).status_code == 200
    await proxies[1].sever()

    response = await gateway.get("/v1/evaluations")

    assert response.status_code == 503, response.text
    assert int(response.headers["Retry-After"]) > 0
    assert "event store" in response.json()["detail"]


async def test_a_write_during_a_broker_outage_is_503_promptly(
    gateway: httpx.AsyncClient, proxies: tuple[SeverableLink, SeverableLink]
) -> None:
    await proxies[0].sever()
    started = time.monotonic()

    response = await gateway.post(
        "/v1/evaluations", json={"model": "squeezenet", "framework": "onnxruntime"}
    )

    assert response.status_code == 503, response.text
    assert time.monotonic() - started < 3, "answered within the gateway's bound, not after 10 s"
    assert int(response.headers["Retry-After"]) > 0


@pytest.mark.parametrize(
    "query",
    ["/v1/evaluations?status=bogus", "/v1/experiments?status=bogus"]
    + [
        f"/v1/{listing}?{parameter}={value}"
        for listing in ("evaluations", "experiments")
        for parameter, value in (("offset", 9223372036854775808), ("offset", -1), ("limit", 0))
    ],
)
async def test_a_bad_filter_or_page_is_422_naming_it(
    gateway: httpx.AsyncClient, query: str
) -> None:
    response = await gateway.get(query)

    assert response.status_code == 422, response.text
    named = query.split("?")[1].split("=")[0]
    assert [named] == [e["loc"][-1] for e in response.json()["detail"]]


@pytest.mark.parametrize(
    ("scenario", "field"),
    [
        ({"seed": False}, "seed"),
        ({"iterations": "5"}, "iterations"),
        ({"target_qps": True}, "target_qps"),
    ],
)
async def test_a_number_written_as_a_boolean_or_a_string_is_422_naming_it(
    gateway: httpx.AsyncClient, scenario: dict[str, object], field: str
) -> None:
    response = await gateway.post(
        "/v1/evaluations",
        json={"model": "squeezenet", "framework": "onnxruntime", "scenario": scenario},
    )

    assert response.status_code == 422, response.text
    assert [["body", "scenario", field]] == [e["loc"] for e in response.json()["detail"]]
