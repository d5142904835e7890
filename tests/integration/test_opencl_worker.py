"""The OpenCL worker behind the services, as a user reaches it: resnet50 (an ONNX model of
the zoo) evaluated on `--framework opencl` at trace level `hardware` over RabbitMQ +
PostgreSQL, with the device it ran on announced, one query's per-layer kernel times in the
result, the same layers as framework-level spans and their kernel launches as hardware-level
spans in the evaluation's trace."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dlscope.embedded import all_services
from harness.deployment import purge_namespace
from harness.waiting import evaluation_outcome, eventually
from shared.config import Settings
from shared.messaging import create_broker
from shared.runtime import Runtime, running
from shared.telemetry import Telemetry
from tests.conftest import opencl_problem

# Emulated on the CPU's OpenCL device, which must compile kernels here.
UNUSABLE = opencl_problem("fpga")
pytestmark = [
    pytest.mark.rabbitmq,
    pytest.mark.postgres,
    pytest.mark.skipif(UNUSABLE is not None, reason=f"OpenCL runs nothing here: {UNUSABLE}"),
]


@pytest.fixture
async def deployment(
    namespace: str, postgres_url: str, rabbitmq_url: str, tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, InMemorySpanExporter]]:
    settings = Settings(
        broker_url=rabbitmq_url, database_url=postgres_url, namespace=namespace, home=tmp_path
    )
    spans = InMemorySpanExporter()
    runtime = Runtime(
        settings,
        Telemetry.create(settings, "test", extra_processor=SimpleSpanProcessor(spans)),
        create_broker(settings.broker_url),
    )
    services = all_services(runtime, [("opencl", "fpga")], gateway=("127.0.0.1", 0))
    try:
        async with running(services):
            port = services[-1].port  # type: ignore[attr-defined]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
                yield http, spans
    finally:
        await runtime.close()
        await purge_namespace(rabbitmq_url, namespace)


async def test_resnet50_runs_on_the_emulated_fpga_with_per_layer_kernel_times(
    deployment: tuple[httpx.AsyncClient, InMemorySpanExporter],
) -> None:
    http, spans = deployment

    async def opencl_agent() -> dict[str, Any] | None:
        agents = (await http.get("/v1/agents")).json()
        return next((a for a in agents if a["framework"] == "opencl"), None)

    agent = await eventually(opencl_agent, timeout=60)
    # The worker announces the OpenCL device; without a board, the CPU emulates the FPGA.
    device = agent["capabilities"]["opencl"]
    assert device["emulated"] is True
    assert device["compute_units"] >= 1

    response = await http.post(
        "/v1/evaluations",
        json={
            "model": "resnet50",
            "framework": "opencl",
            "hardware": "fpga",
            "scenario": {"iterations": 3, "min_duration_s": 0, "warmup": 0},
            "trace_level": "hardware",
            "trace_queries": 1,
        },
    )
    assert response.status_code == 202, response.text
    accepted = response.json()
    evaluation = await evaluation_outcome(http, accepted["id"], timeout=240)
    assert evaluation["status"] == "completed", evaluation["error"]
    layers = evaluation["result"]["layers"]
    assert {layer["op_type"] for layer in layers} >= {"Conv", "MaxPool", "Gemm"}
    assert all(layer["end_ns"] >= layer["start_ns"] >= layer["submit_ns"] for layer in layers)

    # The same layers, as framework-level spans of the evaluation's one trace, and their
    # kernels as hardware-level spans.
    def spans_at(level: str) -> list[Any]:
        return [
            span
            for span in spans.get_finished_spans()
            if format(span.context.trace_id, "032x") == accepted["trace_id"]
            and span.attributes
            and span.attributes.get("dlscope.trace_level") == level
            and "dlscope.layer.node" in span.attributes
        ]

    framework = spans_at("framework")
    assert sorted(span.attributes["dlscope.layer.node"] for span in framework) == sorted(
        layer["node"] for layer in layers
    )
    kernels = spans_at("hardware")
    assert len(kernels) >= len(framework)
    assert {span.attributes["dlscope.layer.node"] for span in kernels} == {
        layer["node"] for layer in layers
    }
    levels = {outcome["level"]: outcome for outcome in evaluation["result"]["tracing"]}
    assert levels["hardware"]["captured"]
    assert levels["framework"]["captured"]
    assert levels["library"]["reason"]
