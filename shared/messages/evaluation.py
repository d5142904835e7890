"""Events of an evaluation's life, in the order they normally happen.

    evaluation.requested   gateway, CLI or a direct AMQP publisher
    evaluation.scheduled   scheduler: a model version and an agent were chosen
    evaluation.started     worker: the job was taken, with the environment it runs in
    evaluation.measured    worker: raw per-query latencies (kept so statistics can be recomputed)
    evaluation.completed   analyzer: the statistics
    evaluation.failed      whoever hit the problem, with the stage and the reason

All of one evaluation's events share ``stream_id = "evaluation-<evaluation_id>"`` and the
evaluation id as ``correlation_id``.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from shared.manifests import DatasetManifest, FrameworkName, Hardware, ModelManifest
from shared.messages.envelope import Envelope, Payload

__all__ = [
    "FRAMEWORKS",
    "HARDWARE",
    "AccuracyMeasurement",
    "EvaluationCompleted",
    "EvaluationFailed",
    "EvaluationMeasured",
    "EvaluationRequested",
    "EvaluationScheduled",
    "EvaluationStarted",
    "FailureStage",
    "Framework",
    "Hardware",
    "LatencySummary",
    "RunEvaluation",
    "Scenario",
    "evaluation_stream",
    "failure_caused_by",
]

# One definition, with the manifests that name them too.
Framework = FrameworkName
FRAMEWORKS: tuple[str, ...] = get_args(Framework)
HARDWARE: tuple[str, ...] = get_args(Hardware)
FailureStage = Literal["validation", "scheduling", "artifact", "predictor", "analysis", "timeout"]


def evaluation_stream(evaluation_id: uuid.UUID) -> str:
    return f"evaluation-{evaluation_id}"


class Scenario(BaseModel):
    """How the model is driven. Single-stream: one query at a time, the next when it returns."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["single-stream"] = "single-stream"
    warmup: int = Field(default=10, ge=0, le=100_000, description="untimed queries first")
    iterations: int = Field(default=200, ge=1, le=10_000_000, description="timed queries")
    batch_size: int = Field(default=1, ge=1, le=4096)
    seed: int = Field(default=0, ge=0, description="seed of the generated input data")


class EvaluationRequested(Payload):
    TYPE = "evaluation.requested"

    evaluation_id: uuid.UUID
    model: str = Field(min_length=1, description="model name in the registry")
    model_version: str = Field(default="*", description="version constraint, e.g. '>=1.0,<2'")
    framework: Framework
    framework_version: str = "*"
    hardware: Hardware = "cpu"
    agent_id: str | None = Field(default=None, description="pin the evaluation to one agent")
    scenario: Scenario = Field(default_factory=Scenario)
    dataset: str | None = Field(
        default=None, description="a labelled dataset: top-1/top-5 accuracy is measured on it"
    )
    dataset_version: str = Field(default="*", description="dataset version constraint")
    split: str | None = Field(default=None, description="one split of the dataset, e.g. test")
    requested_by: str | None = None


class EvaluationScheduled(Payload):
    TYPE = "evaluation.scheduled"

    evaluation_id: uuid.UUID
    model: str
    model_version: str
    framework: Framework
    hardware: Hardware
    agent_id: str | None = Field(description="the agent pinned to, or None for any match")
    candidates: list[str] = Field(description="agents that could take the job")


class RunEvaluation(Payload):
    """The job a worker executes; published on the jobs exchange, not recorded as an event."""

    TYPE = "job.evaluate"

    evaluation_id: uuid.UUID
    manifest: ModelManifest
    framework: Framework
    framework_version: str
    hardware: Hardware
    scenario: Scenario
    dataset: DatasetManifest | None = None
    split: str | None = None


class EvaluationStarted(Payload):
    TYPE = "evaluation.started"

    evaluation_id: uuid.UUID
    agent_id: str
    host: str
    environment: dict[str, Any]


class EvaluationMeasured(Payload):
    TYPE = "evaluation.measured"

    evaluation_id: uuid.UUID
    agent_id: str
    batch_size: int
    load_ns: int = Field(description="time to open the model in the framework")
    first_inference_ns: int = Field(description="the cold first query, excluded from statistics")
    warmup_latencies_ns: list[int]
    latencies_ns: list[int] = Field(min_length=1, description="one per timed query")
    duration_ns: int = Field(description="wall time of the timed loop")
    accuracy: AccuracyMeasurement | None = None


class AccuracyMeasurement(BaseModel):
    """Top-1 and top-5 accuracy of the model's outputs against a dataset's labels."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    top1: float = Field(ge=0, le=1)
    top5: float = Field(ge=0, le=1)
    samples: int = Field(ge=1)
    dataset: str = Field(description="name@version")
    split: str | None = None


class LatencySummary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int
    batch_size: int
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    throughput_per_s: float = Field(description="samples per second over the timed loop")
    first_inference_ms: float
    load_ms: float
    warmup_count: int
    accuracy: AccuracyMeasurement | None = None


class EvaluationCompleted(Payload):
    TYPE = "evaluation.completed"

    evaluation_id: uuid.UUID
    result: LatencySummary


class EvaluationFailed(Payload):
    TYPE = "evaluation.failed"

    evaluation_id: uuid.UUID
    stage: FailureStage
    reason: str


def failure_caused_by(
    envelope: Envelope, *, stage: FailureStage, reason: str, producer: str
) -> Envelope | None:
    """The ``evaluation.failed`` event for a message about an evaluation that could not be
    handled; None when the message names no evaluation (it may be the reason it failed)."""
    try:
        evaluation_id = uuid.UUID(str(envelope.payload.get("evaluation_id")))
    except ValueError:
        return None
    failed = EvaluationFailed(evaluation_id=evaluation_id, stage=stage, reason=reason)
    return envelope.caused(failed, producer=producer)
