"""One evaluation is one trace, from the HTTP request down to the framework's layers: every
service its own OS process on RabbitMQ + PostgreSQL, exporting over OTLP/HTTP to a collector
in this test (which decodes the protobuf, as Jaeger would). resnet50 at trace level
``framework`` on ONNX Runtime: gateway -> scheduler -> worker -> the profiled queries -> the
ONNX Runtime nodes, with their op types and shapes, placed inside their query. Then the
digits CNN on ONNX Runtime, PyTorch, TensorFlow and the OpenCL engine: each traced down to
its layers, and their stored layer summaries lined up."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from dlscope.zoo import BuiltModel
from harness.deployment import Deployment, fresh_database, purge_namespace, throwaway_deployment
from harness.waiting import evaluation_outcome, eventually, models_listed
from tests.conftest import POSTGRES_ADMIN_DSN, register_model, runnable

pytestmark = [pytest.mark.e2e, pytest.mark.rabbitmq, pytest.mark.postgres]


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


class Collector(ThreadingHTTPServer):
    """A stand-in OTLP/HTTP collector: keeps every span it is sent, decoded."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[Span] = []
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def trace(self, trace_id: str) -> list[Span]:
        with self.lock:
            return [span for span in self.spans if span.trace_id == trace_id]


class _Handler(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        received = [
            Span(
                trace_id=span.trace_id.hex(),
                span_id=span.span_id.hex(),
                parent_id=span.parent_span_id.hex(),
                name=span.name,
                start_ns=span.start_time_unix_nano,
                end_ns=span.end_time_unix_nano,
                attributes={a.key: _value(a.value) for a in span.attributes},
            )
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]
        with self.server.lock:
            self.server.spans += received
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, rabbitmq_url: str, collector: Collector
) -> Iterator[Deployment]:
    database_url, drop_database = asyncio.run(fresh_database(POSTGRES_ADMIN_DSN))
    deployed = Deployment(
        broker_url=rabbitmq_url,
        database_url=database_url,
        namespace=f"e{uuid.uuid4().hex[:12]}",
        workdir=tmp_path_factory.mktemp("deployment"),
    )
    with pytest.MonkeyPatch.context() as patch:
        # Every service process exports its spans to the collector.
        patch.setenv("DLSCOPE_OTLP_ENDPOINT", collector.endpoint)
        deployed.migrate()
        try:
            deployed.start_all()
            asyncio.run(_ready(deployed))
            yield deployed
        finally:
            deployed.stop_all()
            asyncio.run(drop_database())
            asyncio.run(purge_namespace(rabbitmq_url, deployed.namespace))


async def _ready(deployment: Deployment) -> None:
    async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=30) as http:
        await deployment.ready(http)


@pytest.fixture
async def http(deployment: Deployment) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=30) as client:
        yield client


def _ancestors(span: Span, by_id: dict[str, Span]) -> list[Span]:
    """``span``'s parent, its parent's parent, ... up to the root."""
    chain = []
    while span.parent_id in by_id:
        span = by_id[span.parent_id]
        chain.append(span)
    return chain


async def test_resnet50_at_framework_level_is_one_trace_down_to_its_nodes(
    http: httpx.AsyncClient, collector: Collector
) -> None:
    response = await http.post(
        "/v1/evaluations",
        json={
            "model": "resnet50",
            "framework": "onnxruntime",
            "scenario": {"iterations": 8, "min_duration_s": 0, "warmup": 0},
            "trace_level": "framework",
            "trace_queries": 2,
        },
    )
    assert response.status_code == 202, response.text
    accepted = response.json()
    evaluation = await evaluation_outcome(http, accepted["id"], timeout=240)
    assert evaluation["status"] == "completed", evaluation["error"]
    assert evaluation["trace_id"] == accepted["trace_id"]

    def nodes() -> list[Span]:
        return [
            span
            for span in collector.trace(accepted["trace_id"])
            if span.attributes.get("dlscope.trace_level") == "framework"
            and "dlscope.layer.op_type" in span.attributes
        ]

    async def exported() -> list[Span] | None:
        # Each process exports in batches, every few seconds: wait for the whole tree.
        found = nodes()
        by_id = {span.span_id: span for span in collector.trace(accepted["trace_id"])}
        return found if found and not _ancestors(found[0], by_id)[-1].parent_id else None

    found = await eventually(exported, timeout=60)
    spans = collector.trace(accepted["trace_id"])
    by_id = {span.span_id: span for span in spans}

    # Every node span descends, through its query and its pass, from the worker's job,
    # the scheduler's decision and the gateway's HTTP request: one tree.
    chain = _ancestors(found[0], by_id)
    assert chain[0].name.startswith("query ")
    assert chain[1].name == "trace pass: framework"
    services = [span.attributes.get("dlscope.service") for span in chain]
    assert services.index("worker") < services.index("scheduler")
    assert chain[-1].parent_id == ""  # the root
    assert chain[-1].attributes.get("http.request.method") == "POST"
    assert chain[-1].attributes.get("url.path") == "/v1/evaluations"

    # The nodes carry ONNX Runtime's op types and shapes, and lie within their query.
    assert {span.attributes["dlscope.layer.op_type"] for span in found} >= {"Conv", "MaxPool"}
    conv = next(span for span in found if span.attributes["dlscope.layer.op_type"] == "Conv")
    assert conv.attributes["dlscope.layer.input_shapes"]
    assert conv.attributes["dlscope.layer.output_shapes"]
    for span in found:
        query = by_id[span.parent_id]
        assert query.start_ns <= span.start_ns <= query.end_ns
    queries = {span.parent_id for span in found}
    assert len(queries) == 2  # trace_queries: each of the two profiled queries

    # The result reports what the level cost, and the store keeps the layers.
    (framework,) = [o for o in evaluation["result"]["tracing"] if o["level"] == "framework"]
    assert framework["captured"]
    assert framework["overhead"] > 0
    assert framework["spans"] == len(found) + 3  # the pass and its two queries
    layers = (await http.get(f"/v1/evaluations/{accepted['id']}/layers")).json()
    assert layers["passes"][0]["layers_total"] == len(found) // 2


# The digits CNN's exports, and dlscope's OpenCL engine running the ONNX one (where its
# device compiles kernels here: see tests.conftest.opencl_problem).
EXPORTS = {
    "onnxruntime": "digits-cnn",
    "pytorch": "digits-cnn-torch",
    "tensorflow": "digits-cnn-tf",
    "opencl": "digits-cnn",
}
DIGITS = {framework: EXPORTS[framework] for framework in runnable(tuple(EXPORTS))}


async def test_the_digits_cnn_is_traced_to_its_layers_on_four_frameworks_which_line_up(
    rabbitmq_url: str,
    collector: Collector,
    digits_zoo: list[BuiltModel],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DLSCOPE_OTLP_ENDPOINT", collector.endpoint)
    zoo = digits_zoo
    async with throwaway_deployment(
        rabbitmq_url, POSTGRES_ADMIN_DSN, prefix="trc", frameworks=tuple(DIGITS)
    ) as deployment:
        deployment.start_all()
        async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=60) as http:
            await deployment.ready(http)  # a worker of every framework is online
            for model in zoo:
                body = model.manifest.model_dump(mode="json")
                assert (await register_model(http, body)).status_code == 201

            await models_listed(http, DIGITS.values(), timeout=60)
            accepted = {}
            for framework, model in DIGITS.items():
                response = await http.post(
                    "/v1/evaluations",
                    json={
                        "model": model,
                        "framework": framework,
                        "scenario": {"iterations": 8, "min_duration_s": 0, "warmup": 0},
                        "trace_level": "framework",
                        "trace_queries": 2,
                    },
                )
                assert response.status_code == 202, response.text
                accepted[framework] = response.json()

            for framework, answer in accepted.items():
                evaluation = await evaluation_outcome(http, answer["id"], timeout=240)
                assert evaluation["status"] == "completed", (framework, evaluation["error"])

                async def rooted(trace_id: str = answer["trace_id"]) -> list[Span] | None:
                    spans = collector.trace(trace_id)
                    by_id = {span.span_id: span for span in spans}
                    layers = [
                        span
                        for span in spans
                        if span.attributes.get("dlscope.trace_level") == "framework"
                        and "dlscope.layer.op_type" in span.attributes
                    ]
                    if not layers or _ancestors(layers[0], by_id)[-1].parent_id:
                        return None
                    return [layers[0], *_ancestors(layers[0], by_id)]

                # The framework's layer, its query, its pass, ... the gateway's request.
                chain = await eventually(rooted, timeout=60)
                assert chain[1].name.startswith("query "), framework
                assert chain[2].name == "trace pass: framework", framework
                assert chain[-1].attributes.get("url.path") == "/v1/evaluations", framework

            first, *others = (answer["id"] for answer in accepted.values())
            response = await http.get(f"/v1/evaluations/{first}/layers", params={"compare": others})
            assert response.status_code == 200, response.text
            comparison = response.json()["comparison"]
            assert [e["framework"] for e in comparison["evaluations"]] == list(DIGITS)
            complete = [row["kind"] for row in comparison["rows"] if all(row["layers"])]
            assert complete == ["conv", "conv", "maxpool", "matmul"]
