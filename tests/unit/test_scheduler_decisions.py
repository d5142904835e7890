"""The scheduler's decision for one request, without a broker or a registry: what it refuses
(and at which stage, saying why), where it sends the job, and what the job carries."""

from __future__ import annotations

import uuid

import pytest

from services.scheduler import AgentDirectory
from services.scheduler.decisions import (
    Dispatch,
    Refusal,
    checked_dataset,
    checked_model,
    dispatch,
)
from shared.config import REPOSITORY_ROOT
from shared.manifests import DatasetManifest, ModelManifest, load_manifest
from shared.messages import AgentOnline, EvaluationRequested, job_key

SQUEEZENET = load_manifest(REPOSITORY_ROOT / "manifests" / "models" / "squeezenet.yaml")
DIGITS = load_manifest(REPOSITORY_ROOT / "manifests" / "datasets" / "digits.yaml")
assert isinstance(SQUEEZENET, ModelManifest)
assert isinstance(DIGITS, DatasetManifest)


def request(**overrides: object) -> EvaluationRequested:
    return EvaluationRequested.model_validate(
        {
            "evaluation_id": uuid.uuid4(),
            "model": "squeezenet",
            "framework": "onnxruntime",
            **overrides,
        }
    )


def agents(*online: tuple[str, str, str]) -> AgentDirectory:
    """Agents online at 0: (agent id, framework, host)."""
    directory = AgentDirectory(missed_heartbeats=3)
    for agent_id, framework, host in online:
        announced = AgentOnline.model_validate(
            {
                "agent_id": agent_id,
                "host": host,
                "framework": framework,
                "framework_version": "1.31.1",
                "hardware": "cpu",
                "heartbeat_interval_s": 5.0,
            }
        )
        directory.observe(announced, now=0)
    return directory


@pytest.mark.parametrize(
    ("asked", "resolved", "said"),
    [
        ({}, "no model 'squeezenet' in the registry", "no model 'squeezenet' in the registry"),
        ({}, DIGITS, "'squeezenet' is a dataset, not a model"),
        (
            {"framework": "tensorflow"},
            SQUEEZENET,
            f"model {SQUEEZENET.ref} is for onnxruntime; it cannot run on tensorflow",
        ),
    ],
)
def test_a_model_the_request_cannot_run_is_refused_at_validation(
    asked: dict[str, object], resolved: object, said: str
) -> None:
    checked = checked_model(request(**asked), resolved)  # type: ignore[arg-type]
    assert checked == Refusal("validation", said)


def test_a_model_the_request_can_run_passes_as_it_is() -> None:
    assert checked_model(request(), SQUEEZENET) is SQUEEZENET
    assert checked_model(request(framework="opencl"), SQUEEZENET) is SQUEEZENET  # ONNX runs there


def test_a_dataset_without_the_split_or_the_samples_is_refused_naming_what_it_has() -> None:
    no_split = checked_dataset(request(dataset="digits", split="validation"), DIGITS)
    assert isinstance(no_split, Refusal)
    assert no_split.reason == "dataset digits@1.0.0 has no split 'validation'; splits: train, test"
    too_few = checked_dataset(
        request(
            dataset="digits",
            split="test",
            scenario={"name": "multi-stream", "samples_per_query": 1000},
        ),
        DIGITS,
    )
    assert isinstance(too_few, Refusal)
    assert too_few.reason == (
        "dataset digits@1.0.0: multi-stream queries of 1000 samples need a dataset of at least "
        "that many samples; this one has 360"
    )
    assert checked_dataset(request(dataset="digits", split="test"), DIGITS) is DIGITS


def test_no_agent_for_the_request_is_a_scheduling_refusal_naming_who_is_there() -> None:
    decided = dispatch(
        request(framework="pytorch"),
        SQUEEZENET,
        None,
        agents(("ort-1", "onnxruntime", "h")),
        now=1,
        artifact_url=None,
        here="h",
    )
    assert isinstance(decided, Refusal)
    assert decided.stage == "scheduling"
    assert decided.reason.startswith("no online worker offers pytorch * on cpu; available: ")
    assert "ort-1 (onnxruntime 1.31.1 on cpu)" in decided.reason


def test_a_job_every_worker_of_its_kind_can_run_goes_to_their_shared_queue() -> None:
    asked = request(scenario={"iterations": 7}, trace_level="framework")
    decided = dispatch(
        asked,
        SQUEEZENET,
        None,
        agents(("ort-1", "onnxruntime", "h"), ("ort-2", "onnxruntime", "h")),
        now=1,
        artifact_url=None,
        here="h",
    )
    assert isinstance(decided, Dispatch)
    assert decided.routing_key == job_key("onnxruntime", "cpu", None)
    assert decided.scheduled.agent_id is None
    assert decided.scheduled.candidates == ["ort-1", "ort-2"]
    scheduled = (decided.scheduled.model, decided.scheduled.model_version)
    assert scheduled == (SQUEEZENET.name, SQUEEZENET.version)
    job = decided.job
    assert job.evaluation_id == asked.evaluation_id
    assert job.scenario == asked.scenario
    assert job.trace_level == "framework"


def test_a_pinned_request_goes_to_its_agents_own_queue() -> None:
    decided = dispatch(
        request(agent_id="ort-2"),
        SQUEEZENET,
        None,
        agents(("ort-1", "onnxruntime", "h"), ("ort-2", "onnxruntime", "h")),
        now=1,
        artifact_url=None,
        here="h",
    )
    assert isinstance(decided, Dispatch)
    assert decided.routing_key == job_key("onnxruntime", "cpu", "ort-2")
    assert decided.scheduled.candidates == ["ort-2"]


def test_files_of_this_host_reach_only_its_agents_unless_they_are_served() -> None:
    local = SQUEEZENET.model_copy(
        update={"source": SQUEEZENET.source.model_copy(update={"uri": "/srv/models/net.onnx"})}
    )
    elsewhere = agents(("far", "onnxruntime", "other-host"))
    refused = dispatch(request(), local, None, elsewhere, now=1, artifact_url=None, here="h")
    assert isinstance(refused, Refusal)
    assert refused.stage == "artifact"
    served = dispatch(
        request(), local, None, elsewhere, now=1, artifact_url="http://registry:8081", here="h"
    )
    assert isinstance(served, Dispatch)
    assert served.job.manifest.source.uri.startswith("http://registry:8081/")
