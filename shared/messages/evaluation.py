"""Events of an evaluation's life, in the order they normally happen.

    evaluation.requested   gateway, CLI or a direct AMQP publisher
    evaluation.scheduled   scheduler: a model version and an agent were chosen
    evaluation.started     worker: the job was taken, with the environment it runs in; once per
                           attempt (a job whose worker died is delivered again, attempt 2, …)
    evaluation.measured    worker: raw per-query latencies (kept so statistics can be recomputed)
    evaluation.completed   analyzer: the statistics
    evaluation.failed      whoever hit the problem, with the stage and the reason

All of one evaluation's events share ``stream_id = "evaluation-<evaluation_id>"`` and the
evaluation id as ``correlation_id``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal, Self, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared.errors import InvalidMessage
from shared.inputs import BOUNDED, MAX_NAME, Count, Name, Reason
from shared.manifests import DatasetManifest, FrameworkName, Hardware, ModelManifest
from shared.messages.costs import JobReadings, MachineReport
from shared.messages.envelope import Envelope, Payload
from shared.messages.fingerprint import OutputFingerprint
from shared.messages.generation import GenerationRecord, GenerationSummary, Perplexity
from shared.messages.profiling import LayerTiming, LevelOutcome
from shared.messages.results import LoadgenResult, ScenarioResult
from shared.messages.scenario import Scenario
from shared.messages.statistics import LatencyStatistics
from shared.messages.sweep import SweepPoint
from shared.messages.tracing import DEFAULT_TRACE_LEVEL, DEFAULT_TRACE_QUERIES, TraceLevel
from shared.messages.verdicts import Verdict

__all__ = [
    "FRAMEWORKS",
    "HARDWARE",
    "AccuracyMeasurement",
    "DeviceLease",
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
    "attempt_key",
    "evaluation_stream",
    "failure_caused_by",
]

# One definition, with the manifests that name them too.
Framework = FrameworkName
FRAMEWORKS: tuple[str, ...] = get_args(Framework)
HARDWARE: tuple[str, ...] = get_args(Hardware)
# "agent": the worker running the job went away (killed, its host lost) and no other agent
# took the job up again; apart from "predictor", where the worker lived to report the crash.
FailureStage = Literal[
    "validation", "scheduling", "artifact", "predictor", "agent", "analysis", "timeout"
]


def evaluation_stream(evaluation_id: uuid.UUID) -> str:
    return f"evaluation-{evaluation_id}"


class EvaluationRequested(Payload):
    TYPE = "evaluation.requested"

    evaluation_id: uuid.UUID
    model: str = Field(min_length=1, max_length=MAX_NAME, description="model name in the registry")
    model_version: str = Field(
        default="*", max_length=MAX_NAME, description="version constraint, e.g. '>=1.0,<2'"
    )
    framework: Framework
    framework_version: str = Field(default="*", max_length=MAX_NAME)
    hardware: Hardware = "cpu"
    agent_id: str | None = Field(
        default=None, max_length=MAX_NAME, description="pin the evaluation to one agent"
    )
    scenario: Scenario = Field(default_factory=Scenario)
    dataset: str | None = Field(
        default=None,
        max_length=MAX_NAME,
        description="a labelled dataset: top-1/top-5 accuracy is measured on it",
    )
    dataset_version: str = Field(
        default="*", max_length=MAX_NAME, description="dataset version constraint"
    )
    resolved_model_version: str | None = Field(
        default=None,
        max_length=MAX_NAME,
        description="the version model_version resolved to when the request was accepted (the "
        "gateway sets it): that version is scheduled, so the evaluation runs what the 202 "
        "promised; without it the scheduler resolves model_version itself",
    )
    resolved_dataset_version: str | None = Field(
        default=None,
        max_length=MAX_NAME,
        description="likewise, the version dataset_version resolved to",
    )
    split: str | None = Field(
        default=None, max_length=MAX_NAME, description="one split of the dataset, e.g. test"
    )
    requested_by: str | None = Field(default=None, max_length=MAX_NAME)
    experiment_id: uuid.UUID | None = Field(
        default=None, description="the experiment this evaluation is a member of"
    )
    sweep: SweepPoint | None = Field(
        default=None, description="the sweep this evaluation is a load of (dlscope sweep)"
    )
    trace_level: TraceLevel = Field(
        default=DEFAULT_TRACE_LEVEL,
        description="how deep to trace: none, application, model, framework, library, "
        "hardware or full (deeper levels run as separate passes after the timed one)",
    )
    trace_queries: int = Field(
        default=DEFAULT_TRACE_QUERIES, ge=1, le=100, description="queries each traced pass runs"
    )
    concurrent: bool = Field(
        default=False,
        description="measure without the device lease, beside whatever else runs on the "
        "device (a contention study); the result is labelled measured_under_contention",
    )

    @model_validator(mode="after")
    def _prompts_from_one_place(self) -> Self:
        # Refused here, so a request never waits in a queue to fail on it.
        for field in ("input_tokens", "replay"):
            if self.dataset is not None and getattr(self.scenario, field) is not None:
                raise ValueError(
                    f"scenario.{field} makes synthetic prompts, and dataset {self.dataset!r} "
                    "gives its own: leave one of them out"
                )
        return self


class EvaluationScheduled(Payload):
    TYPE = "evaluation.scheduled"

    evaluation_id: uuid.UUID
    model: str
    model_version: str
    framework: Framework
    hardware: Hardware
    agent_id: str | None = Field(description="the agent pinned to, or None for any match")
    candidates: list[str] = Field(description="agents that could take the job")
    experiment_id: uuid.UUID | None = None


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
    experiment_id: uuid.UUID | None = None
    trace_level: TraceLevel = DEFAULT_TRACE_LEVEL
    trace_queries: int = Field(default=DEFAULT_TRACE_QUERIES, ge=1, le=100)
    concurrent: bool = Field(default=False, description="run without the device lease")


def attempt_key(attempt: int) -> str | None:
    """The ``Envelope.caused`` key of an attempt's events: none for the first (the ids
    messages had before attempts were counted), ``attempt-<n>`` for each one after it."""
    return None if attempt == 1 else f"attempt-{attempt}"


class EvaluationStarted(Payload):
    """A worker took the job. A job whose worker died is delivered again, to another worker
    of its kind: each delivery is an attempt and starts with its own ``evaluation.started``
    (attempts after the first derive their event ids with ``Envelope.caused(...,
    key=attempt_key(n))``, or the store drops them as duplicates), so the log keeps
    where and in which environment every attempt ran; the latest attempt is the evaluation's."""

    TYPE = "evaluation.started"

    evaluation_id: uuid.UUID
    agent_id: str
    host: str
    environment: dict[str, Any]
    attempt: Count = Field(default=1, description="1 for the first delivery of the job")


class EvaluationMeasured(Payload):
    """What a worker measured, raw: every latency of every phase (or, with the loadgen
    driver, LoadGen's parsed summary), so any statistic can be computed again later."""

    TYPE = "evaluation.measured"

    evaluation_id: uuid.UUID
    agent_id: str
    scenario: Scenario = Field(default_factory=Scenario, description="as requested")
    load_ns: int = Field(description="time to open the model in the framework")
    run: ScenarioResult | None = Field(default=None, description="the native driver's run")
    loadgen: LoadgenResult | None = Field(default=None, description="the loadgen driver's run")
    conditions: dict[str, Any] = Field(
        default_factory=dict,
        description="what the validity verdict reads from the environment at the start: "
        "cpu_governor, load_average, cpu_threads, heavy_processes; and concurrent (true: "
        "measured without the device lease, under contention)",
    )
    layers: list[LayerTiming] | None = Field(
        default=None,
        description="one query's layers, from the deepest profiled pass (framework level or "
        "deeper; the layer summary of every pass is in evaluation.profiled)",
    )
    trace_level: TraceLevel = DEFAULT_TRACE_LEVEL
    tracing: list[LevelOutcome] = Field(
        default_factory=list,
        description="each trace level asked for: captured or why not, and its overhead",
    )
    accuracy: AccuracyMeasurement | None = None
    fingerprint: OutputFingerprint | None = Field(
        default=None, description="the outputs on a fixed input set, for parity comparisons"
    )
    generation: GenerationRecord | None = Field(
        default=None,
        description="a generative model's timed requests: every token's time, token counts",
    )
    perplexity: Perplexity | None = Field(
        default=None, description="a generative model's perplexity on the data set's texts"
    )
    experiment_id: uuid.UUID | None = None
    attempt: Count = Field(default=1, description="the attempt that measured this")
    machine: JobReadings | None = Field(
        default=None,
        description="the noise probe before the warm-up and after the timed queries, and "
        "the framework process's peak memory over the job (each timed phase's window of "
        "what else used the machine is in its phase: run.phases[i].window)",
    )
    lease: DeviceLease | None = Field(
        default=None,
        description="the device the measurement held and when (None from a worker that "
        "predates device leases)",
    )

    @model_validator(mode="after")
    def _one_run(self) -> Self:
        if (self.run is None) == (self.loadgen is None):
            raise ValueError("a measurement carries exactly one of run (native) or loadgen")
        return self


class DeviceLease(BaseModel):
    """The device a measurement held, alone, from loading the model to its last traced pass
    (``services.workers.leases``); with ``concurrent`` none is held, and the window is the
    measurement's own, beside whatever else ran."""

    model_config = BOUNDED

    device: Name = Field(description="cpu0-1, gpu0, opencl-<platform>-<device>")
    locks: list[Name] = Field(
        max_length=4096, description="what is locked: each CPU core (cpu0, cpu1), or the device"
    )
    host: Name
    held: bool = Field(description="false: measured with concurrent, no lease taken")
    acquired_at: datetime = Field(description="wall clock: the lease taken (or the call begun)")
    released_at: datetime = Field(
        description="wall clock: the lease given back (or the call ended)"
    )
    waited_s: float = Field(ge=0, description="how long the job waited for the device")


class AccuracyMeasurement(BaseModel):
    """Top-1 and top-5 accuracy of the model's outputs against a dataset's labels."""

    model_config = BOUNDED

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
    std_ms: float | None = Field(description="None where the driver reports no spread (LoadGen)")
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
    fingerprint: OutputFingerprint | None = None
    generation: GenerationSummary | None = Field(
        default=None, description="a generative model's TTFT, TPOT, inter-token latency, ..."
    )
    perplexity: Perplexity | None = None
    # The fields above describe the headline (first) phase; these describe the whole run.
    scenario: Scenario = Field(default_factory=Scenario)
    headline: str = Field(default="p90", description="the scenario's headline figure")
    statistics: list[LatencyStatistics] = Field(
        default_factory=list, description="per phase (per batch size in a sweep), with intervals"
    )
    verdict: Verdict | None = None
    harness_overhead_ns: float | None = Field(
        default=None, description="time per query spent outside the framework call"
    )
    warmup: dict[str, Any] | None = Field(
        default=None, description="how the warm-up was ended: steady state or a cap"
    )
    loadgen: list[dict[str, Any]] | None = Field(
        default=None, description="LoadGen's summary per phase, and where its logs are"
    )
    layers: list[LayerTiming] | None = None
    trace_level: TraceLevel = DEFAULT_TRACE_LEVEL
    tracing: list[LevelOutcome] = Field(
        default_factory=list,
        description="each trace level asked for: captured or why not, and what it cost",
    )
    machine: MachineReport | None = Field(
        default=None,
        description="what the run cost (CPU s/query, peak memory, energy/query) and what "
        "else used the machine during each timed window",
    )


class EvaluationCompleted(Payload):
    TYPE = "evaluation.completed"

    evaluation_id: uuid.UUID
    result: LatencySummary
    experiment_id: uuid.UUID | None = None


class EvaluationFailed(Payload):
    TYPE = "evaluation.failed"

    evaluation_id: uuid.UUID
    stage: FailureStage
    reason: Reason
    experiment_id: uuid.UUID | None = None


def failure_caused_by(
    envelope: Envelope,
    expected: type[EvaluationRequested] | type[RunEvaluation],
    *,
    stage: FailureStage,
    reason: str,
    producer: str,
    key: str | None = None,
) -> Envelope | None:
    """The ``evaluation.failed`` event for a request or a job (``expected``: what the queue
    it came from carries) that could not be handled. None for a message that is not a valid
    ``expected``: whatever evaluation id it names, nobody requested an evaluation by it, so
    it is dead-lettered and fails none (malformed jobs naming random ids once made phantom
    evaluations). The experiment the message names, if any, is named too: its comparison
    waits for it. ``key`` tells apart failures one message may cause more than once (see
    ``Envelope.caused``), e.g. one per attempt at a job."""
    try:
        about = envelope.open(expected)
    except InvalidMessage:
        return None
    failed = EvaluationFailed(
        evaluation_id=about.evaluation_id,
        stage=stage,
        reason=reason,
        experiment_id=about.experiment_id,
    )
    return envelope.caused(failed, producer=producer, key=key)
