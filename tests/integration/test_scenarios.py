"""Every MLPerf scenario, chosen per evaluation in the HTTP body or a message published
straight to the broker, on the embedded stack and on RabbitMQ + PostgreSQL: the result
carries statistics with intervals, the verdict with its reasons, and the harness overhead;
the loadgen driver leaves LoadGen's logs next to the result."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from harness.waiting import evaluation_outcome, eventually
from shared.messages import Envelope, EvaluationRequested, Scenario, evaluation_stream
from tests.conftest import register_model
from tests.integration.conftest import Stack
from tests.integration.test_accuracy import centroid_classifier, manifest_for

# Small runs: squeezenet takes ~10 ms a query here.
QUICK = {"min_duration_s": 0, "warmup": 0}


async def evaluate(stack: Stack, scenario: dict[str, Any], **extra: Any) -> dict[str, Any]:
    evaluation = await stack.evaluate("squeezenet", scenario=scenario, **extra)
    assert evaluation["status"] == "completed", evaluation["error"]
    return evaluation


def codes(result: dict[str, Any]) -> set[str]:
    return {reason["code"] for reason in result["verdict"]["reasons"]}


async def test_the_server_scenario_judges_its_latency_bound(any_stack: Stack) -> None:
    server = {"name": "server", "target_qps": 20, "iterations": 8, **QUICK}
    loose = (await evaluate(any_stack, {**server, "latency_bound_ms": 5_000}))["result"]
    assert loose["scenario"]["name"] == "server"
    assert loose["headline"] == "p99"
    assert loose["count"] >= 8
    assert "latency_bound_missed" not in codes(loose)
    # 8 queries cannot back a p99: reported as a bound, and the verdict says so.
    assert loose["statistics"][0]["headline"]["kind"] == "bound"

    tight = (await evaluate(any_stack, {**server, "latency_bound_ms": 0.001}))["result"]
    assert tight["verdict"]["status"] == "INVALID"
    assert "latency_bound_missed" in codes(tight)


@pytest.fixture
async def centroids(any_stack: Stack, tmp_path: Path) -> Stack:
    """The stack, with a small model whose batch dimension is free registered on it."""
    centroid_classifier(tmp_path / "centroids.onnx")
    registered = await register_model(any_stack.http, manifest_for(tmp_path / "centroids.onnx"))
    assert registered.status_code == 201, registered.text
    await eventually(lambda: any_stack.listed("digits-centroids", "1.0.0"))
    return any_stack


async def test_multi_stream_queries_draw_the_samples_asked_for(centroids: Stack) -> None:
    evaluation = await centroids.evaluate(
        "digits-centroids",
        dataset="digits",
        split="test",
        scenario={"name": "multi-stream", "samples_per_query": 3, "iterations": 700, **QUICK},
    )
    assert evaluation["status"] == "completed", evaluation["error"]
    result = evaluation["result"]
    assert (result["headline"], result["batch_size"]) == ("p99", 3)
    # 700 queries back a p99 (MLPerf asks for 662): an estimate, with its interval.
    headline = result["statistics"][0]["headline"]
    assert headline["kind"] == "estimate"
    assert headline["interval"]["low"] <= headline["value_ns"] <= headline["interval"]["high"]


async def test_a_multi_stream_query_larger_than_the_dataset_is_refused_before_any_work(
    centroids: Stack,
) -> None:
    evaluation = await centroids.evaluate(
        "digits-centroids",
        dataset="digits",
        split="test",
        scenario={"name": "multi-stream", "samples_per_query": 361, **QUICK},
    )
    assert evaluation["status"] == "failed"
    assert evaluation["error"].startswith("validation: dataset digits@1.0.0: multi-stream")
    assert "this one has 360" in evaluation["error"]


async def test_a_sweep_reports_latency_and_throughput_per_batch_size(centroids: Stack) -> None:
    evaluation = await centroids.evaluate(
        "digits-centroids",
        scenario={"name": "batch-sweep", "batch_sizes": [1, 16], "iterations": 64, **QUICK},
    )
    assert evaluation["status"] == "completed", evaluation["error"]
    phases = evaluation["result"]["statistics"]
    assert [p["samples_per_query"] for p in phases] == [1, 16]
    assert all(p["count"] >= 64 and p["throughput"]["per_s"] > 0 for p in phases)


async def test_offline_by_a_message_published_straight_to_the_broker(centroids: Stack) -> None:
    # What a client without HTTP sends: the documented evaluation.requested message.
    request = EvaluationRequested(
        evaluation_id=uuid.uuid4(),
        model="digits-centroids",
        framework="onnxruntime",
        scenario=Scenario(name="offline", batch_size=32, iterations=512, **QUICK),
    )
    bus = centroids.runtime.bus("test")
    await bus.start()
    try:
        await bus.publish(
            Envelope.wrap(
                request,
                stream_id=evaluation_stream(request.evaluation_id),
                correlation_id=request.evaluation_id,
            )
        )
    finally:
        await bus.stop()

    evaluation = await evaluation_outcome(centroids.http, request.evaluation_id)
    assert evaluation["status"] == "completed", evaluation["error"]
    result = evaluation["result"]
    assert result["scenario"]["name"] == "offline"
    assert result["batch_size"] == 32
    assert result["count"] * 32 >= 512  # every sample issued
    assert result["throughput_per_s"] > 0


@pytest.mark.parametrize("scenario", ["single-stream", "offline"])
async def test_the_loadgen_driver_writes_mlperf_logs_next_to_the_result_and_is_valid(
    centroids: Stack, tmp_path: Path, scenario: str
) -> None:
    evaluation = await centroids.evaluate(
        "digits-centroids",
        scenario={
            "name": scenario,
            "driver": "loadgen",
            "batch_size": 1 if scenario == "single-stream" else 16,
            "iterations": 256,
            "min_duration_s": 0.2,
        },
    )
    assert evaluation["status"] == "completed", evaluation["error"]
    (phase,) = evaluation["result"]["loadgen"]
    assert phase["result"] == "VALID"
    logs = Path(phase["output_dir"])
    assert logs.is_relative_to(tmp_path / "results")  # under the worker's DLSCOPE_HOME
    summary = (logs / "mlperf_log_summary.txt").read_text()
    assert "Result is : VALID" in summary
    assert (logs / "mlperf_log_detail.txt").stat().st_size > 0


async def test_an_impossible_scenario_is_refused_by_the_gateway(any_stack: Stack) -> None:
    for scenario, named in (
        ({"name": "server", "target_qps": 0}, "target_qps"),
        ({"name": "server", "latency_bound_ms": 0}, "latency_bound_ms"),
        ({"name": "sideways"}, "scenario"),
    ):
        response = await any_stack.http.post(
            "/v1/evaluations",
            json={"model": "squeezenet", "framework": "onnxruntime", "scenario": scenario},
        )
        assert response.status_code == 422, scenario
        assert named in response.text
