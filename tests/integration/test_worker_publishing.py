"""A worker whose broker blips when its measurement is done publishes the measurement once
the broker is back: the job is not handed back and measured again, nothing is lost."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dlscope.embedded import all_services
from harness.waiting import evaluation_outcome
from services.workers.handover import MEASURE_JOB, FrameworkCall
from services.workers.isolation import FrameworkProcess
from shared.config import Settings
from shared.errors import BrokerUnavailable
from shared.messages import Envelope
from shared.messaging import MemoryBroker
from shared.messaging.bus import Bus
from shared.runtime import Runtime, running
from shared.telemetry import Telemetry
from tests.conftest import LIFECYCLE

REFUSALS = 3


@pytest.fixture
async def http(tmp_path: Path, namespace: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(home=tmp_path, namespace=namespace)
    runtime = Runtime(settings, Telemetry.create(settings, "test"), MemoryBroker())
    services = all_services(runtime, [("onnxruntime", "cpu")], gateway=("127.0.0.1", 0))
    try:
        async with running(services):
            port = services[-1].port  # type: ignore[attr-defined]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                yield client
    finally:
        await runtime.close()


async def test_a_measurement_is_published_when_the_broker_is_back(
    http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused: list[str] = []
    publish = Bus.publish

    async def unreliable(self: Bus, envelope: Envelope, **options: Any) -> Envelope:
        # The broker is away just when the measurement is ready, for three tries.
        if envelope.type == "evaluation.measured" and len(refused) < REFUSALS:
            refused.append(envelope.type)
            raise BrokerUnavailable("publishing: connection reset (injected)")
        return await publish(self, envelope, **options)

    monkeypatch.setattr(Bus, "publish", unreliable)
    measured: list[str] = []
    call = FrameworkProcess.call

    async def counted(
        self: FrameworkProcess, function: FrameworkCall[Any], *arguments: Any, **options: Any
    ) -> Any:
        if function == MEASURE_JOB:
            measured.append(function.target)
        return await call(self, function, *arguments, **options)

    monkeypatch.setattr(FrameworkProcess, "call", counted)
    accepted = (
        await http.post(
            "/v1/evaluations",
            json={
                "model": "squeezenet",
                "framework": "onnxruntime",
                "scenario": {"iterations": 3, "min_duration_s": 0},
            },
        )
    ).json()
    body = await evaluation_outcome(http, accepted["id"], timeout=120)
    assert body["status"] == "completed", body["error"]
    assert len(refused) == REFUSALS
    assert len(measured) == 1, "the job was measured again instead of published late"
    events = (await http.get(f"/v1/evaluations/{accepted['id']}/events")).json()
    # Measured once, by one attempt: published late, not measured again.
    assert [e["type"] for e in events] == LIFECYCLE
