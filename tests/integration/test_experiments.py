"""Experiments through every service in this process, embedded and on RabbitMQ + PostgreSQL:
one HTTP request evaluates a model on an onnxruntime and a pytorch worker in parallel, and
the analyzer compares them. Also: bad inputs fail an evaluation and the worker carries on.

The model is a linear classifier of the 8x8 digits, fitted here by least squares in a
fraction of a second and written twice, with the same weights: as an ONNX graph and as
TorchScript, two exports of one model (same version, tensors and training data)."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
import pytest_asyncio
import torch
from onnx import TensorProto, helper, numpy_helper

from dlscope.embedded import all_services
from dlscope.zoo.export import export_torchscript
from harness.deployment import purge_namespace
from harness.waiting import evaluation_outcome, eventually, experiment_outcome
from services.scheduler import SchedulerService
from shared.config import REPOSITORY_ROOT, Settings
from shared.datasets import load_dataset
from shared.eventstore import EventStore
from shared.manifests import DatasetManifest, ModelManifest, load_manifest
from shared.messages import (
    AgentOnline,
    Envelope,
    RunEvaluation,
    Scenario,
    agent_stream,
    evaluation_stream,
    experiment_stream,
    job_key,
)
from shared.messaging import create_broker
from shared.runtime import Runtime, running
from shared.telemetry import Telemetry
from tests.conftest import register_model
from tests.integration.conftest import STACKS, Stack, module_stack_settings, stack_settings

DIGITS_MANIFEST = REPOSITORY_ROOT / "manifests" / "datasets" / "digits.yaml"


def fit_linear_classifier() -> tuple[np.ndarray, np.ndarray]:
    """Least-squares weights from the digits train split to one-hot labels."""
    digits = load_manifest(DIGITS_MANIFEST)
    assert isinstance(digits, DatasetManifest)
    train = load_dataset(digits, "train")
    assert train.labels is not None
    x = np.stack(train.samples).reshape(len(train), 64) / 16.0
    x = np.hstack([x, np.ones((len(x), 1))])
    targets = np.eye(10)[train.labels]
    solution = np.linalg.lstsq(x, targets, rcond=None)[0]
    return solution[:64].astype(np.float32), solution[64].astype(np.float32)


def write_onnx(path: Path, weights: np.ndarray, bias: np.ndarray) -> None:
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["input"], ["flat"], axis=1),
            helper.make_node("MatMul", ["flat", "weights"], ["scores"]),
            helper.make_node("Add", ["scores", "bias"], ["logits"]),
        ],
        "digits-linear",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 10])],
        [numpy_helper.from_array(weights, "weights"), numpy_helper.from_array(bias, "bias")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)


def write_torchscript(path: Path, weights: np.ndarray, bias: np.ndarray) -> None:
    linear = torch.nn.Linear(64, 10)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(weights.T.copy()))
        linear.bias.copy_(torch.from_numpy(bias))
    model = torch.nn.Sequential(torch.nn.Flatten(), linear).eval()
    export_torchscript(model, torch.zeros(2, 1, 8, 8), path)


def manifest(name: str, framework: str, path: Path, needs: str = "*") -> dict[str, Any]:
    return {
        "name": name,
        "version": "1.0.0",
        "task": "image-classification",
        "framework": {"name": framework, "version": needs},
        "inputs": [
            {
                "name": "input",
                "shape": [-1, 1, 8, 8],
                "layout": "NCHW",
                "steps": [
                    {"op": "normalize", "mean": [0.0], "std": [1.0], "scale": 16.0},
                    {"op": "layout", "to": "NCHW"},
                    {"op": "cast", "dtype": "float32"},
                ],
            }
        ],
        "outputs": [{"name": "logits", "shape": [-1, 10]}],
        "source": {"uri": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()},
        "attributes": {"training_dataset": "digits@1.0.0 train split"},
    }


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("linear")
    weights, bias = fit_linear_classifier()
    files = {"onnx": directory / "linear.onnx", "torch": directory / "linear.pt"}
    write_onnx(files["onnx"], weights, bias)
    write_torchscript(files["torch"], weights, bias)
    return files


@pytest.fixture(params=STACKS)
async def stack(
    request: pytest.FixtureRequest, tmp_path: Path, namespace: str, model_files: dict[str, Path]
) -> AsyncIterator[Stack]:
    """Every service, an onnxruntime and a pytorch worker; the two exports registered."""
    settings = stack_settings(request, tmp_path, namespace)
    async with started(settings, model_files) as stack:
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=STACKS)
async def refusing(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    model_files: dict[str, Path],
) -> AsyncIterator[Stack]:
    """``stack`` once for the module's tests that only send what is refused or not found:
    no experiment ever starts on it (they check that too)."""
    with module_stack_settings(request, tmp_path_factory) as settings:
        async with started(settings, model_files) as stack:
            yield stack


@contextlib.asynccontextmanager
async def started(settings: Settings, model_files: dict[str, Path]) -> AsyncIterator[Stack]:
    runtime = Runtime(
        settings, Telemetry.create(settings, "test"), create_broker(settings.broker_url)
    )
    workers = [("onnxruntime", "cpu"), ("pytorch", "cpu")]
    services = all_services(runtime, workers, gateway=("127.0.0.1", 0))  # type: ignore[arg-type]
    try:
        async with running(services):
            port = services[-1].port  # type: ignore[attr-defined]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
                stack = Stack(runtime, http, services)
                for name, framework, file in (
                    ("linear", "onnxruntime", "onnx"),
                    ("linear-torch", "pytorch", "torch"),
                ):
                    body = manifest(name, framework, model_files[file])
                    response = await register_model(http, body)
                    assert response.status_code == 201, response.text
                await eventually(lambda: frameworks_online(stack, {"onnxruntime", "pytorch"}))
                await eventually(lambda: stack.listed("linear-torch", "1.0.0"))
                yield stack
    finally:
        await runtime.close()
        if settings.broker_url != "memory://":
            await purge_namespace(settings.broker_url, settings.namespace)


async def frameworks_online(stack: Stack, frameworks: set[str]) -> bool:
    agents = (await stack.http.get("/v1/agents")).json()
    return {a["framework"] for a in agents if a["status"] == "online"} >= frameworks


async def run_experiment(stack: Stack, **body: Any) -> dict[str, Any]:
    response = await stack.http.post("/v1/experiments", json=body)
    assert response.status_code == 202, response.text
    return await experiment_outcome(stack.http, response.json()["id"])


SCENARIO = {"iterations": 5, "min_duration_s": 0, "warmup": 1, "batch_size": 32}


async def test_one_request_evaluates_the_model_on_every_framework_and_compares_them(
    stack: Stack,
) -> None:
    response = await stack.http.post(
        "/v1/experiments",
        json={"model": "linear", "dataset": "digits", "split": "test", "scenario": SCENARIO},
    )
    assert response.status_code == 202, response.text
    accepted = response.json()
    # The pytorch export joined the model named: same version, tensors and training data
    assert accepted["models"] == [
        {"model": "linear", "version": "==1.0.0"},
        {"model": "linear-torch", "version": "==1.0.0"},
    ]
    assert accepted["status_url"] == f"/v1/experiments/{accepted['id']}"

    experiment = await experiment_outcome(stack.http, accepted["id"])
    assert experiment["status"] == "compared", experiment["error"]
    assert [m["framework"] for m in experiment["members"]] == ["onnxruntime", "pytorch"]
    assert {m["status"] for m in experiment["members"]} == {"completed"}

    comparison = experiment["comparison"]
    assert comparison["complete"] is True
    assert comparison["failures"] == []
    for result in comparison["evaluations"]:
        latency = result["latency"]
        assert latency["count"] == 5
        assert 0 < latency["p50_ms"] <= latency["p90_ms"] <= latency["p99_ms"]
        assert latency["throughput_per_s"] > 0
        assert result["accuracy"]["samples"] == 360
    top1 = {r["accuracy"]["top1"] for r in comparison["evaluations"]}
    assert len(top1) == 1  # the same weights: the same answers
    assert top1.pop() > 0.8
    (pair,) = comparison["parity"]
    assert pair["comparable"] is True
    assert pair["within_tolerance"] is True
    assert pair["top1_agreement"] == 1.0
    assert pair["max_abs_error"] < 1e-4
    assert comparison["parity_ok"] is True

    listed = (await stack.http.get("/v1/experiments")).json()
    assert accepted["id"] in {e["id"] for e in listed}

    # Each member is an ordinary evaluation, tagged with its experiment, pinned to its agent.
    member = experiment["members"][1]
    events = (await stack.http.get(f"/v1/evaluations/{member['evaluation_id']}/events")).json()
    assert events[0]["payload"]["experiment_id"] == accepted["id"]
    assert events[0]["payload"]["agent_id"] == member["agent_id"]
    fingerprint = events[-1]["payload"]["result"]["fingerprint"]
    assert fingerprint["inputs"]["kind"] == "dataset"
    assert fingerprint["inputs"]["batch_size"] == 32

    async with EventStore.from_url(stack.runtime.settings.resolved_database_url) as store:
        stored = await store.stream_events(experiment_stream(uuid.UUID(accepted["id"])))
    assert [e.type for e in stored] == [
        "experiment.requested",
        "experiment.scheduled",
        "experiment.compared",
    ]
    # One trace, from the HTTP request to the comparison.
    assert {e.trace_id for e in stored} == {accepted["trace_id"]}


async def test_each_member_of_a_traced_experiment_has_its_own_layers_measured_in_turn(
    stack: Stack,
) -> None:
    body = {"model": "linear", "scenario": {"iterations": 3, "min_duration_s": 0, "warmup": 0}}
    response = await stack.http.post(
        "/v1/experiments", json={**body, "trace_level": "framework", "trace_queries": 2}
    )
    assert response.status_code == 202, response.text
    # Each member's profiled pass comes after its timed one, both while it holds the device.
    experiment = await experiment_outcome(stack.http, response.json()["id"], timeout=120)
    assert experiment["status"] == "compared", experiment["error"]
    windows = []
    for member in experiment["members"]:
        path = f"/v1/evaluations/{member['evaluation_id']}"
        layers = (await stack.http.get(f"{path}/layers")).json()
        assert layers["framework"] == member["framework"]
        assert layers["trace_level"] == "framework"
        (profiled,) = layers["passes"]
        assert profiled["queries"] == 2
        assert profiled["top"]
        events = (await stack.http.get(f"{path}/events")).json()
        (measured,) = [e["payload"] for e in events if e["type"] == "evaluation.measured"]
        windows.append((measured["lease"]["acquired_at"], measured["lease"]["released_at"]))
    # One after another, each holding the device while it was measured and profiled.
    (first, second) = sorted(windows)
    assert first[1] <= second[0]


async def test_without_a_dataset_parity_is_measured_on_seeded_synthetic_inputs(
    stack: Stack,
) -> None:
    experiment = await run_experiment(
        stack,
        models=["linear-torch", "linear"],
        frameworks=["onnxruntime", "pytorch"],
        scenario={"iterations": 3, "min_duration_s": 0, "warmup": 0},
    )
    assert experiment["status"] == "compared", experiment["error"]
    comparison = experiment["comparison"]
    # Listed: the first is the reference
    assert comparison["evaluations"][0]["model"] == "linear-torch"
    assert comparison["parity_ok"] is True
    member = comparison["evaluations"][0]["evaluation_id"]
    result = (await stack.http.get(f"/v1/evaluations/{member}")).json()["result"]
    inputs = result["fingerprint"]["inputs"]
    assert (inputs["kind"], inputs["batch_size"]) == ("synthetic", 4)


async def test_a_framework_whose_worker_is_missing_is_skipped_and_named(
    stack: Stack, model_files: dict[str, Path]
) -> None:
    # A third export, for a framework no worker here runs.
    body = manifest("linear-tf", "tensorflow", model_files["onnx"])
    assert (await register_model(stack.http, body)).status_code == 201
    await eventually(lambda: stack.listed("linear-tf", "1.0.0"))

    experiment = await run_experiment(
        stack, model="linear", scenario={"iterations": 3, "min_duration_s": 0}
    )
    assert experiment["status"] == "compared", experiment["error"]
    assert [m["framework"] for m in experiment["members"]] == ["onnxruntime", "pytorch"]
    (skipped,) = experiment["skipped"]
    assert skipped["framework"] == "tensorflow"
    assert skipped["reason"].startswith("no online worker offers tensorflow * on cpu")
    assert experiment["comparison"]["failures"] == [skipped]
    assert experiment["comparison"]["parity_ok"] is True


@pytest.mark.parametrize(
    ("body", "where", "message"),
    [
        ({}, "body", "name the model with 'model', or list the models with 'models'"),
        (
            {"model": "linear", "models": ["linear"]},
            "body",
            "name the model with 'model', or list the models with 'models'",
        ),
        ({"model": "no-such-model"}, "model", "unknown model 'no-such-model'"),
        ({"models": ["linear", "nope"]}, "models", "unknown model 'nope'"),
        (
            {"model": "squeezenet", "frameworks": ["pytorch"]},
            "frameworks",
            "has no export for pytorch; its exports: squeezenet (onnxruntime)",
        ),
        ({"model": "linear", "frameworks": ["caffe"]}, "frameworks", "Input should be"),
        ({"model": "linear", "tolerance": {"atol": -1}}, "tolerance", "greater than or equal"),
        ({"model": "linear", "dataset": "mnist-9000"}, "dataset", "unknown dataset"),
        (
            {"model": "linear", "framework_version": "newest"},
            "framework_version",
            "'newest' is not a version constraint",
        ),
        ({"models": ["linear", "linear"]}, "models", "each model may be listed once"),
    ],
)
@pytest.mark.asyncio(loop_scope="module")
async def test_a_bad_experiment_is_refused_with_a_clear_message(
    refusing: Stack, body: dict[str, Any], where: str, message: str
) -> None:
    response = await refusing.http.post("/v1/experiments", json=body)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert where in detail["loc"]
    assert message in detail["msg"]
    assert (await refusing.http.get("/v1/experiments")).json() == []  # nothing half-started


@pytest.mark.asyncio(loop_scope="module")
async def test_an_unknown_experiment_is_not_found(refusing: Stack) -> None:
    response = await refusing.http.get(f"/v1/experiments/{uuid.uuid4()}")
    assert response.status_code == 404


async def test_past_its_deadline_an_experiment_compares_what_finished(
    stack: Stack, model_files: dict[str, Path]
) -> None:
    body = manifest("linear-tf", "tensorflow", model_files["onnx"])
    assert (await register_model(stack.http, body)).status_code == 201
    await eventually(lambda: stack.listed("linear-tf", "1.0.0"))
    # A tensorflow worker that announced itself, then went silent: its member never ends.
    bus = stack.runtime.bus("test")
    await bus.start()
    await bus.publish(
        Envelope.wrap(
            AgentOnline(
                agent_id="ghost",
                # On this host: the model is a file here, out of reach of a worker elsewhere.
                host=socket.gethostname(),
                framework="tensorflow",
                framework_version="2.21.0",
                hardware="cpu",
                heartbeat_interval_s=600,
            ),
            stream_id=agent_stream("ghost"),
            correlation_id=uuid.uuid4(),
        )
    )
    scheduler = next(s for s in stack.services if isinstance(s, SchedulerService))

    async def ghost_known() -> bool:
        return "ghost" in {a.agent_id for a in scheduler.agents.online(time.monotonic())}

    await eventually(ghost_known)
    await bus.stop()
    experiment = await run_experiment(
        stack,
        models=["linear", "linear-torch", "linear-tf"],
        scenario={"iterations": 3, "min_duration_s": 0},
        timeout_s=3,
    )
    assert experiment["status"] == "compared", experiment["error"]
    comparison = experiment["comparison"]
    assert comparison["complete"] is False
    statuses = {r["framework"]: r["status"] for r in comparison["evaluations"]}
    assert statuses == {"onnxruntime": "completed", "pytorch": "completed", "tensorflow": "missing"}
    (missing,) = comparison["failures"]
    assert missing["agent_id"] == "ghost"
    assert missing["reason"] == "timeout: no outcome within 3 s of the experiment being scheduled"
    assert comparison["parity_ok"] is True


# --- bad input: the evaluation fails with the reason, the worker takes the next job ---------


async def evaluate(stack: Stack, **body: Any) -> dict[str, Any]:
    response = await stack.http.post(
        "/v1/evaluations",
        json={"scenario": {"iterations": 3, "min_duration_s": 0, "warmup": 0}, **body},
    )
    assert response.status_code == 202, response.text
    return await evaluation_outcome(stack.http, response.json()["id"])


async def test_a_model_in_a_format_the_framework_cannot_load_fails_and_the_worker_carries_on(
    stack: Stack, model_files: dict[str, Path]
) -> None:
    # An ONNX graph registered as a pytorch model.
    body = manifest("linear-mislabelled", "pytorch", model_files["onnx"])
    assert (await register_model(stack.http, body)).status_code == 201
    await eventually(lambda: stack.listed("linear-mislabelled", "1.0.0"))

    broken = await evaluate(stack, model="linear-mislabelled", framework="pytorch")
    assert broken["status"] == "failed"
    assert broken["error"].startswith(
        "predictor: pytorch cannot load linear-mislabelled@1.0.0 as TorchScript"
    )
    after = await evaluate(stack, model="linear-torch", framework="pytorch")
    assert after["status"] == "completed", after["error"]


async def test_a_framework_version_the_model_rules_out_fails_with_the_reason(
    stack: Stack, model_files: dict[str, Path]
) -> None:
    body = manifest("linear-future", "onnxruntime", model_files["onnx"], needs=">=99")
    assert (await register_model(stack.http, body)).status_code == 201
    await eventually(lambda: stack.listed("linear-future", "1.0.0"))

    refused = await evaluate(stack, model="linear-future", framework="onnxruntime")
    assert refused["status"] == "failed"
    assert refused["error"].startswith(
        "scheduling: no online worker offers onnxruntime * on cpu "
        "(the model needs onnxruntime >=99); available: "
    )
    after = await evaluate(stack, model="linear", framework="onnxruntime")
    assert after["status"] == "completed", after["error"]


async def test_a_job_that_reaches_a_worker_of_the_wrong_version_fails_and_the_worker_carries_on(
    stack: Stack, model_files: dict[str, Path]
) -> None:
    # As when the shared queue hands a job to a worker of another version: straight to it.
    registered = manifest("linear", "onnxruntime", model_files["onnx"])
    evaluation_id = uuid.uuid4()
    job = RunEvaluation(
        evaluation_id=evaluation_id,
        manifest=ModelManifest.model_validate(registered),
        framework="onnxruntime",
        framework_version=">=99",
        hardware="cpu",
        scenario=Scenario(iterations=3, min_duration_s=0, warmup=0),
    )
    bus = stack.runtime.bus("test")
    await bus.start()
    await bus.publish(
        Envelope.wrap(
            job, stream_id=evaluation_stream(evaluation_id), correlation_id=evaluation_id
        ),
        exchange=stack.runtime.topology.jobs,
        routing_key=job_key("onnxruntime", "cpu"),
    )
    await bus.stop()

    # The job was sent without a request, so it makes no evaluation row: its failure is read
    # from the evaluation's stream.
    async def failed() -> dict[str, Any] | None:
        got = await stack.http.get(f"/v1/evaluations/{evaluation_id}/events")
        events: list[dict[str, Any]] = got.json() if got.status_code == 200 else []
        return next((e["payload"] for e in events if e["type"] == "evaluation.failed"), None)

    failure = await eventually(failed)
    assert failure["stage"] == "validation"
    assert failure["reason"].startswith("onnxruntime 1.31.1 on agent ")
    assert failure["reason"].endswith("does not satisfy '>=99', the version the request asks for")
    after = await evaluate(stack, model="linear", framework="onnxruntime")
    assert after["status"] == "completed", after["error"]
