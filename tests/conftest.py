"""Fixtures shared by every test layer.

Real services: RabbitMQ and PostgreSQL on 127.0.0.1 (``make test`` starts them). Each test
gets its own broker namespace (exchange and queue prefix) and each session its own Postgres
database, so tests never see each other's messages or rows.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from dlscope.gateway_client import registration
from shared.manifests import Manifest, parse_manifest

RABBITMQ_URL = os.environ.get("DLSCOPE_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
# The events of one evaluation that completes, in the order they are stored.
LIFECYCLE = [
    "evaluation.requested",
    "evaluation.scheduled",
    "evaluation.started",
    "evaluation.measured",
    "evaluation.completed",
]
POSTGRES_ADMIN_DSN = os.environ.get(
    "DLSCOPE_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)


async def register_model(
    http: httpx.AsyncClient, manifest: Manifest | dict[str, Any]
) -> httpx.Response:
    """Register ``manifest`` (naming files of this host) through a gateway as a user does
    with ``dlscope models register --gateway``: the files it names uploaded with it."""
    if isinstance(manifest, dict):
        manifest = parse_manifest(manifest, origin="manifest")
    body, files = registration(manifest)
    if not files:
        return await http.post("/v1/models", json=body)
    parts = [
        ("file", (name, path.read_bytes(), "application/octet-stream"))
        for name, path in files.items()
    ]
    return await http.post(
        "/v1/models",
        files=[("manifest", ("manifest.json", orjson.dumps(body), "application/json")), *parts],
    )


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def rabbitmq_url() -> str:
    return RABBITMQ_URL


def _execute(dsn: str, sql: str) -> None:
    """Run ``sql`` on its own thread and loop, so sync and async fixtures alike can call it."""

    async def execute() -> None:
        connection = await asyncpg.connect(dsn)
        try:
            await connection.execute(sql)
        finally:
            await connection.close()

    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, execute()).result()


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A fresh database for this test session; its SQLAlchemy URL."""
    name = f"dlscope_test_{uuid.uuid4().hex[:10]}"
    _execute(POSTGRES_ADMIN_DSN, f'CREATE DATABASE "{name}"')
    base = POSTGRES_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    try:
        yield f"{base}/{name}"
    finally:
        _execute(POSTGRES_ADMIN_DSN, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_url(postgres_database: str) -> str:
    """The session's database, emptied of dlscope's tables before each test."""
    dsn = postgres_database.replace("postgresql+asyncpg://", "postgresql://")
    _execute(dsn, "DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
    return postgres_database
