"""A store or broker that is away is 503 with a Retry-After, promptly; a bad filter or page
is 422. The outages are cut in a TCP proxy of this test's own, in front of the shared
PostgreSQL and RabbitMQ, which keep running for everyone else."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from services.gateway.service import GatewayService
from shared.config import Settings
from shared.eventstore.migrate import upgrade
from shared.messaging import create_broker
from shared.runtime import Runtime
from shared.telemetry import Telemetry

pytestmark = [pytest.mark.rabbitmq, pytest.mark.postgres]


class Proxy:
    """Forwards 127.0.0.1:<port> to a server until ``cut()``: then every connection is
    closed and new ones are refused, as when the server is stopped."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        self._writers |= {writer, upstream_writer}
        try:
            await asyncio.gather(
                self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer)
            )
        finally:
            for w in (writer, upstream_writer):
                self._writers.discard(w)
                w.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()


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
async def proxies(rabbitmq_url: str, postgres_url: str) -> AsyncIterator[tuple[Proxy, Proxy]]:
    assert ":5672/" in rabbitmq_url, "the proxy assumes RabbitMQ's port"
    assert ":5432/" in postgres_url, "the proxy assumes PostgreSQL's port"
    broker, database = Proxy("127.0.0.1", 5672), Proxy("127.0.0.1", 5432)
    await broker.start()
    await database.start()
    yield broker, database
    await broker.cut()
    await database.cut()


@pytest.fixture
async def gateway(
    tmp_path: Path,
    namespace: str,
    rabbitmq_url: str,
    postgres_url: str,
    proxies: tuple[Proxy, Proxy],
) -> AsyncIterator[httpx.AsyncClient]:
    await upgrade(postgres_url)
    broker, database = proxies
    settings = Settings(
        home=tmp_path,
        namespace=namespace,
        broker_url=_through(rabbitmq_url, broker.port),
        database_url=_through(postgres_url, database.port),
    )
    async with _gateway(settings) as http:
        yield http


async def test_a_read_during_a_database_outage_is_503_with_retry_after(
    gateway: httpx.AsyncClient, proxies: tuple[Proxy, Proxy]
) -> None:
    assert (await gateway.get("/v1/evaluations")).status_code == 200
    await proxies[1].cut()

    response = await gateway.get("/v1/evaluations")

    assert response.status_code == 503, response.text
    assert int(response.headers["Retry-After"]) > 0
    assert "event store" in response.json()["detail"]


async def test_a_write_during_a_broker_outage_is_503_promptly(
    gateway: httpx.AsyncClient, proxies: tuple[Proxy, Proxy]
) -> None:
    await proxies[0].cut()
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
