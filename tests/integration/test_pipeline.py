"""Every service, in this process, on the real RabbitMQ and PostgreSQL: an evaluation submitted
over HTTP is scheduled, run, analysed and recorded, as one trace."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import orjson
import pytest
import yaml
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dlscope.embedded import all_services
from harness.deployment import purge_namespace
from harness.waiting import evaluation_outcome, eventually
from shared.config import REPOSITORY_ROOT, Settings
from shared.eventstore import EventStore
from shared.messaging import create_broker
from shared.runtime import Runtime, running
from shared.telemetry import Telemetry
from tests.conftest import LIFECYCLE

pytestmark = [pytest.mark.rabbitmq, pytest.mark.postgres]


@dataclass
class Stack:
    http: httpx.AsyncClient
    spans: InMemorySpanExporter
    settings: Settings


def manifests_with_wrong_checksum(tmp_path: Path) -> Path:
    """The built-in manifests plus one whose sha256 does not match its file."""
    directory = tmp_path / "manifests"
    shutil.copytree(REPOSITORY_ROOT / "manifests", directory)
    data = yaml.safe_load((directory / "models" / "squeezenet.yaml").read_text())
    data.update(name="tampered", source={**data["source"], "sha256": "0" * 64})
    (directory / "models" / "tampered.yaml").write_text(yaml.safe_dump(data))
    return directory


@pytest.fixture
async def stack(
    namespace: str, postgres_url: str, rabbitmq_url: str, tmp_path: Path
) -> AsyncIterator[Stack]:
    settings = Settings(
        broker_url=rabbitmq_url,
        database_url=postgres_url,
        namespace=namespace,
        home=tmp_path / "home",
        manifests_dir=manifests_with_wrong_checksum(tmp_path),
    )
    spans = InMemorySpanExporter()
    runtime = Runtime(
        settings,
        Telemetry.create(settings, "test", extra_processor=SimpleSpanProcessor(spans)),
        create_broker(settings.broker_url),
    )
    services = all_services(runtime, [("onnxruntime", "cpu")], gateway=("127.0.0.1", 0))
    try:
        async with running(services):
            gateway = services[-1]
            base_url = f"http://127.0.0.1:{gateway.port}"  # type: ignore[attr-defined]
            async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
                await eventually(lambda: _has_online_agent(http))
                yield Stack(http, spans, settings)
    finally:
        await runtime.close()
        await purge_namespace(rabbitmq_url, namespace)


async def _has_online_agent(http: httpx.AsyncClient) -> bool:
    agents = (await http.get("/v1/agents")).json()
    return any(a["status"] == "online" for a in agents)


async def submit(http: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    payload = {
        "model": "squeezenet",
        "framework": "onnxruntime",
        "scenario": {"iterations": 20, "min_duration_s": 0},
    }
    response = await http.post("/v1/evaluations", json={**payload, **body})
    assert response.status_code == 202, response.text
    accepted: dict[str, Any] = response.json()
    return accepted


async def test_an_evaluation_runs_through_every_service_as_one_trace(stack: Stack) -> None:
    accepted = await submit(stack.http)
    # No exporter configured: no link to a Jaeger nobody started.
    assert accepted["trace_url"] is None
    assert accepted["status_url"] == f"/v1/evaluations/{accepted['id']}"  # on this gateway

    evaluation = await evaluation_outcome(stack.http, accepted["id"])
    assert evaluation["status"] == "completed", evaluation["error"]
    result = evaluation["result"]
    assert result["count"] == 20
    assert 0 < result["min_ms"] <= result["p50_ms"] <= result["p90_ms"] <= result["max_ms"]
    assert evaluation["model_version"] == "1.0.1"  # the constraint '*' resolved

    events = (await stack.http.get(f"/v1/evaluations/{accepted['id']}/events")).json()
    assert [e["type"] for e in events] == LIFECYCLE
    assert [e["version"] for e in events] == [1, 2, 3, 4, 5]
    assert {e["trace_id"] for e in events} == {accepted["trace_id"]}
    measured = events[3]["payload"]
    assert len(measured["run"]["phases"][0]["latencies_ns"]) == 20  # raw latencies are kept
    # The statistics come with intervals, the verdict with reasons, and the harness overhead.
    assert result["scenario"]["name"] == "single-stream"
    assert result["statistics"][0]["median"]["interval"] is not None
    # 20 queries cannot back a p90 (MLPerf's early stopping asks for 64): a bound, said so.
    assert result["statistics"][0]["headline"]["kind"] == "bound"
    assert "headline_is_bound" in {r["code"] for r in result["verdict"]["reasons"]}
    assert result["harness_overhead_ns"] >= 0

    # Every service took part in that one trace.
    services = {
        span.attributes.get("dlscope.service")
        for span in stack.spans.get_finished_spans()
        if format(span.context.trace_id, "032x") == accepted["trace_id"] and span.attributes
    }
    assert {"gateway", "scheduler", "registry", "worker", "analyzer", "recorder"} <= services


async def test_an_evaluation_without_a_matching_worker_fails_with_what_exists(stack: Stack) -> None:
    accepted = await submit(stack.http, hardware="gpu")
    evaluation = await evaluation_outcome(stack.http, accepted["id"])
    assert evaluation["status"] == "failed"
    assert evaluation["error"].startswith(
        "scheduling: no online worker offers onnxruntime * on gpu"
    )
    assert "(onnxruntime 1.31.1 on cpu)" in evaluation["error"]


async def test_a_model_whose_checksum_does_not_match_fails_and_the_worker_carries_on(
    stack: Stack,
) -> None:
    tampered = await evaluation_outcome(
        stack.http, (await submit(stack.http, model="tampered"))["id"]
    )
    assert tampered["status"] == "failed"
    assert tampered["error"].startswith("artifact: ")
    assert (
        "sha256 mismatch: the file is not the one the manifest pins (sha256 0000"
        in (tampered["error"])
    )

    after = await evaluation_outcome(stack.http, (await submit(stack.http))["id"])
    assert after["status"] == "completed"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "no-such-model", "framework": "onnxruntime"}, "model"),
        ({"model": "squeezenet", "version": ">=7", "framework": "onnxruntime"}, "version"),
        ({"model": "squeezenet", "framework": "caffe"}, "framework"),
        ({"model": "squeezenet"}, "framework"),
        ({"model": "squeezenet", "framework": "onnxruntime", "colour": "red"}, "colour"),
        (
            {
                "model": "squeezenet",
                "framework": "onnxruntime",
                "scenario": {"iterations": 0, "min_duration_s": 0},
            },
            "scenario",
        ),
    ],
)
async def test_a_bad_request_is_refused_naming_the_field(
    stack: Stack, body: dict[str, Any], field: str
) -> None:
    response = await stack.http.post("/v1/evaluations", json=body)
    assert response.status_code == 422
    assert field in response.json()["detail"][0]["loc"]
    assert (await stack.http.get("/v1/evaluations")).json() == []  # nothing half-started


async def test_a_body_that_is_not_json_is_refused(stack: Stack) -> None:
    response = await stack.http.post(
        "/v1/evaluations", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 422


async def test_a_poison_message_is_dead_lettered_and_the_services_keep_working(
    stack: Stack, rabbitmq_url: str
) -> None:
    connection = await aio_pika.connect(rabbitmq_url)
    async with connection:
        channel = await connection.channel()
        events = await channel.get_exchange(f"{stack.settings.namespace}.events")
        await events.publish(
            aio_pika.Message(b'{"type": "evaluation.requested", "payload": "garbage"}'),
            routing_key="evaluation.requested",
        )
        dead_letters = await channel.get_queue(f"{stack.settings.namespace}.dead-letters")

        async def dead_lettered() -> aio_pika.abc.AbstractIncomingMessage | None:
            return await dead_letters.get(fail=False, no_ack=True)

        # Both consumers of evaluation.requested (scheduler, recorder) reject it.
        message = await eventually(dead_lettered)
        assert "invalid envelope" in str(message.headers["x-dlscope-reason"])
        assert message.routing_key == "evaluation.requested"

    evaluation = await evaluation_outcome(stack.http, (await submit(stack.http))["id"])
    assert evaluation["status"] == "completed"


async def test_rebuilt_projections_equal_the_live_ones(stack: Stack) -> None:
    for accepted in [await submit(stack.http), await submit(stack.http, hardware="gpu")]:
        await evaluation_outcome(stack.http, accepted["id"])
    before = (await stack.http.get("/v1/evaluations")).json()
    agents_before = (await stack.http.get("/v1/agents")).json()

    async with EventStore.from_url(stack.settings.resolved_database_url) as store:
        replayed = await store.rebuild_projections()
        assert replayed == await store.count_events()

    assert (await stack.http.get("/v1/evaluations")).json() == before
    assert (await stack.http.get("/v1/agents")).json() == agents_before


async def test_readiness_and_the_openapi_document(stack: Stack) -> None:
    assert (await stack.http.get("/readyz")).json() == {
        "ready": True,
        "checks": {"broker": True, "event_store": True},
    }
    paths = (await stack.http.get("/openapi.json")).json()["paths"]
    assert {"/v1/evaluations", "/v1/evaluations/{evaluation_id}", "/v1/agents"} <= set(paths)
    models = (await stack.http.get("/v1/models")).json()
    assert "squeezenet" in {m["name"] for m in models}


async def test_an_unknown_evaluation_is_not_found(stack: Stack) -> None:
    response = await stack.http.get(f"/v1/evaluations/{uuid.uuid4()}")
    assert response.status_code == 404


async def test_a_client_follows_an_evaluation_as_server_sent_events(stack: Stack) -> None:
    # Timed for 1.5 s: the gateway hears that step long before the measurement is published.
    accepted = await submit(stack.http, scenario={"min_duration_s": 1.5, "max_duration_s": 30})
    url = f"/v1/evaluations/{accepted['id']}/events"
    received: list[tuple[str, dict[str, Any], bool]] = []  # type, data, has an id
    async with stack.http.stream("GET", url, headers={"accept": "text/event-stream"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        event_type, has_id = "", False
        async for line in response.aiter_lines():  # the server ends the stream at the outcome
            if line.startswith("id: "):
                has_id = True
            elif line.startswith("event: "):
                event_type = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = orjson.loads(line.removeprefix("data: "))
                received.append((event_type, data, has_id))
                has_id = False
    stored = [(t, d) for t, d, has_id in received if has_id]
    assert [t for t, _ in stored] == LIFECYCLE
    assert [d["version"] for _, d in stored] == [1, 2, 3, 4, 5]

    # Between started and measured, the worker's steps, which are not stored (no id). They
    # reach the gateway apart from the stored events, in no order with them: the stream holds
    # a step until it has sent started, sends every step heard before the measurement ahead
    # of it, and drops any heard later (streaming.follow). So this order holds however far
    # the store lags; what is not promised is a step the gateway never heard (a notification
    # the broker could not take is dropped, not retried).
    kinds = [t for t, _, _ in received]
    told = [d for t, d, has_id in received if t == "evaluation.progress"]
    assert all(not has_id for t, _, has_id in received if t == "evaluation.progress")
    first, last = (
        kinds.index("evaluation.progress"),
        len(kinds) - kinds[::-1].index("evaluation.progress"),
    )
    assert kinds.index("evaluation.started") < first
    assert last <= kinds.index("evaluation.measured")  # never a step after its measurement
    timed = [d for d in told if d["part"] == "timed queries"]
    assert timed, [d["part"] or d["phase"] for d in told]
    assert timed[0]["phase"] == "running the scenario"
    assert timed[0]["evaluation_id"] == accepted["id"]
    assert 1.5 <= timed[0]["expected_s"] <= timed[0]["limit_s"] == 30

    # Reconnecting with Last-Event-ID resumes after the events already seen.
    headers = {"accept": "text/event-stream", "last-event-id": "3"}
    async with stack.http.stream("GET", url, headers=headers) as response:
        resumed = [line async for line in response.aiter_lines() if line.startswith("event: ")]
    assert resumed == ["event: evaluation.measured", "event: evaluation.completed"]
