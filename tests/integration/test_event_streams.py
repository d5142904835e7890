"""Following an evaluation as server-sent events through the gateway, embedded and on
RabbitMQ + PostgreSQL: an id that is no evaluation ends its stream within seconds with a 404
event, however many clients ask, instead of holding each connection for an hour; an id
just accepted is followed to its outcome."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import orjson
import pytest

from services.gateway.streaming import UNKNOWN_GRACE_S
from tests.integration.conftest import Stack

SSE = {"accept": "text/event-stream"}

# One stack a module (tests/integration/conftest.py): each test follows ids of its own.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture
def any_stack(module_stack: Stack) -> Stack:
    return module_stack


async def frames(stack: Stack, evaluation_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Every frame of the stream, (event, data), until the server ends it."""
    received = []
    url = f"/v1/evaluations/{evaluation_id}/events"
    async with stack.http.stream("GET", url, headers=SSE) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                received.append((event, orjson.loads(line.removeprefix("data: "))))
    return received


async def test_a_stream_of_an_unknown_id_ends_with_a_404_within_seconds(any_stack: Stack) -> None:
    unknown = [str(uuid.uuid4()) for _ in range(20)]
    began = time.monotonic()
    async with asyncio.timeout(UNKNOWN_GRACE_S + 15):
        streams = await asyncio.gather(*(frames(any_stack, i) for i in unknown))
    assert time.monotonic() - began >= UNKNOWN_GRACE_S  # the grace was given
    for evaluation_id, received in zip(unknown, streams, strict=True):
        assert received == [("error", {"status": 404, "detail": f"no evaluation {evaluation_id}"})]


async def test_a_stream_opened_as_the_evaluation_is_accepted_follows_it(any_stack: Stack) -> None:
    response = await any_stack.http.post(
        "/v1/evaluations",
        json={
            "model": "squeezenet",
            "framework": "onnxruntime",
            "scenario": {"iterations": 3, "min_duration_s": 0, "warmup": 0},
        },
    )
    assert response.status_code == 202, response.text
    async with asyncio.timeout(60):
        received = await frames(any_stack, response.json()["id"])
    events = [event for event, _ in received if event != "evaluation.progress"]
    assert events[0] == "evaluation.requested"
    assert events[-1] == "evaluation.completed"
    assert "error" not in events
