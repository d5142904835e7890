"""Events of an experiment: one model evaluated on every matching system, then compared.

    experiment.requested   gateway, CLI or a direct AMQP publisher: these models (one
                           export of the same model per framework), on these frameworks
    experiment.scheduled   scheduler: one member evaluation per matching online agent, each an
                           ordinary evaluation pinned to its agent (``evaluation.requested``
                           with ``experiment_id``), and what could not be scheduled, and why
    experiment.compared    analyzer: every member has an outcome (or the deadline passed):
                           latency statistics, accuracy and output parity side by side
    experiment.failed      scheduler: not one member could be scheduled

All of one experiment's events share ``stream_id = "experiment-<experiment_id>"`` and the
experiment id as ``correlation_id``; each member evaluation keeps its own stream.

A model manifest names one framework, so "the same model on several frameworks" is several
manifests: the request lists them (``models``). Clients that know the registry fill the list
in from one name (see ``shared.messages.lineage``).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Literal, Self

from pydantic import BaseModel, Field, field_validator, model_validator

from shared.inputs import MAX_NAME, REQUESTED, Reason
from shared.manifests import parse_constraint
from shared.messages.costs import RunCost
from shared.messages.envelope import Payload
from shared.messages.evaluation import AccuracyMeasurement, Framework, Hardware, Scenario
from shared.messages.tracing import DEFAULT_TRACE_LEVEL, DEFAULT_TRACE_QUERIES, TraceLevel
from shared.messages.verdicts import Verdict

__all__ = [
    "MAX_MEMBERS",
    "ComparedLatency",
    "ExperimentCompared",
    "ExperimentComparison",
    "ExperimentFailed",
    "ExperimentGap",
    "ExperimentMember",
    "ExperimentRequested",
    "ExperimentScheduled",
    "FrameworkSelection",
    "MemberResult",
    "ModelRef",
    "PairParity",
    "ParityTolerance",
    "experiment_stream",
]


def experiment_stream(experiment_id: uuid.UUID) -> str:
    return f"experiment-{experiment_id}"


class _Bounded(BaseModel):
    model_config = REQUESTED


def _constraint(value: str) -> str:
    parse_constraint(value)  # raises ValueError naming what is wrong
    return value


class ModelRef(_Bounded):
    model: str = Field(min_length=1, max_length=MAX_NAME, description="model name in the registry")
    version: str = Field(
        default="*", max_length=MAX_NAME, description="version constraint, e.g. '==1.0.0'"
    )

    _version = field_validator("version")(_constraint)


class ParityTolerance(_Bounded):
    """When two evaluations' outputs count as the same.

    ``atol`` bounds the largest absolute difference of any output value for outputs of
    magnitude up to 1; above that it is relative to the reference output's largest magnitude
    (its scale), so logits in the thousands are held to the same number of significant digits.
    """

    atol: float = Field(
        strict=True, default=1e-4, ge=0, description="allowed |difference| per unit of scale"
    )
    min_top1_agreement: float = Field(
        strict=True,
        default=1.0,
        ge=0,
        le=1,
        description="fraction of samples whose top-1 must agree",
    )


# More models than frameworks, or members than agents, is a mistake rather than a plan.
MAX_MEMBERS = 64
FrameworkSelection = Annotated[list[Framework], Field(max_length=MAX_MEMBERS)] | Literal["all"]


class ExperimentRequested(Payload):
    TYPE = "experiment.requested"

    experiment_id: uuid.UUID
    models: list[ModelRef] = Field(
        min_length=1,
        max_length=MAX_MEMBERS,
        description="the model, one export per framework; the first is the reference",
    )
    frameworks: FrameworkSelection = Field(
        default="all",
        description="'all': every framework among the models' that has an online worker",
    )
    framework_version: str = Field(default="*", max_length=MAX_NAME)
    hardware: Hardware = "cpu"
    scenario: Scenario = Field(default_factory=Scenario)
    dataset: str | None = Field(default=None, max_length=MAX_NAME)
    dataset_version: str = Field(default="*", max_length=MAX_NAME)
    split: str | None = Field(default=None, max_length=MAX_NAME)
    tolerance: ParityTolerance = Field(default_factory=ParityTolerance)
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="compare what has finished this long after scheduling; "
        "default DLSCOPE_EVALUATION_TIMEOUT_S",
    )
    concurrent: bool = Field(
        default=False,
        description="run the members together, without device leases (a contention study): "
        "each result is labelled measured_under_contention. By default members that share "
        "a device are measured one at a time",
    )
    trace_level: TraceLevel = Field(
        default=DEFAULT_TRACE_LEVEL,
        description="how deep each member is traced (as EvaluationRequested.trace_level): "
        "its layer breakdown is its own, profiled while it holds its device",
    )
    trace_queries: int = Field(
        default=DEFAULT_TRACE_QUERIES, ge=1, le=100, description="queries each traced pass runs"
    )
    requested_by: str | None = Field(default=None, max_length=MAX_NAME)

    _versions = field_validator("framework_version", "dataset_version")(_constraint)

    @model_validator(mode="after")
    def _each_once(self) -> Self:
        names = [ref.model for ref in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"each model may be listed once: {', '.join(names)}")
        if self.frameworks != "all":
            if not self.frameworks:
                raise ValueError("frameworks: list at least one framework, or 'all'")
            if len(set(self.frameworks)) != len(self.frameworks):
                raise ValueError(f"each framework may be listed once: {self.frameworks}")
        return self


class ExperimentMember(_Bounded):
    evaluation_id: uuid.UUID
    model: str
    model_version: str
    framework: Framework
    framework_version: str = Field(description="what the agent runs")
    agent_id: str
    host: str


class ExperimentGap(_Bounded):
    """Something the experiment asked for that did not run, and why."""

    reason: Reason
    model: str | None = None
    framework: str | None = None
    agent_id: str | None = None
    evaluation_id: uuid.UUID | None = None


class ExperimentScheduled(Payload):
    TYPE = "experiment.scheduled"

    experiment_id: uuid.UUID
    members: list[ExperimentMember] = Field(min_length=1)
    skipped: list[ExperimentGap] = Field(default_factory=list)
    tolerance: ParityTolerance
    deadline_s: float = Field(gt=0, description="the comparison is made by then at the latest")


class ExperimentFailed(Payload):
    TYPE = "experiment.failed"

    experiment_id: uuid.UUID
    reason: Reason


class ComparedLatency(_Bounded):
    count: int
    batch_size: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    throughput_per_s: float


class ComparedTokens(_Bounded):
    """A generative member's token latencies (medians) and throughput, side by side."""

    ttft_p50_ms: float
    tpot_p50_ms: float | None
    itl_p99_ms: float | None
    output_tokens_per_s: float


class MemberResult(_Bounded):
    evaluation_id: uuid.UUID
    model: str
    model_version: str
    framework: str
    framework_version: str
    agent_id: str
    host: str
    status: Literal["completed", "failed", "missing"] = Field(
        description="'missing': no outcome by the experiment's deadline"
    )
    latency: ComparedLatency | None = None
    tokens: ComparedTokens | None = Field(
        default=None, description="a generative member's TTFT, TPOT, ITL and tokens/s"
    )
    accuracy: AccuracyMeasurement | None = None
    error: Reason | None = Field(default=None, description="'<stage>: <reason>' unless completed")
    verdict: Verdict | None = Field(
        default=None, description="the member's own verdict (None with LoadGen's driver)"
    )
    cost: RunCost | None = Field(
        default=None, description="CPU s/query, peak memory, energy/query, where measured"
    )


class PairParity(_Bounded):
    """How closely two completed evaluations' outputs agree on the same inputs."""

    reference: uuid.UUID
    candidate: uuid.UUID
    comparable: bool = Field(description="same input set and the same output shapes")
    max_abs_error: float | None = None
    max_rel_error: float | None = Field(
        default=None, description="max_abs_error divided by the reference output's scale"
    )
    top1_agreement: float | None = Field(
        default=None, description="fraction of samples with the same top-1 index"
    )
    min_cosine: float | None = Field(
        default=None,
        description=(
            "smallest cosine similarity between the two outputs of one sample, over the "
            "samples the fingerprints hold whole (for embeddings, the quality measure)"
        ),
    )
    bitwise_identical: bool = False
    within_tolerance: bool
    reason: Reason | None = Field(default=None, description="why not comparable or not within")
    # A generation's greedy tokens, compared position by position (never as numbers: no
    # max_abs_error or cosine then). Optional, so comparisons recorded before them read.
    tokens_agreeing: int | None = Field(
        default=None, ge=0, description="greedy tokens identical at the same position"
    )
    tokens_compared: int | None = Field(
        default=None, ge=0, description="positions compared (the longer of the two)"
    )
    first_difference: int | None = Field(
        default=None, ge=1, description="the first position (from 1) where they part"
    )
    # The members as a reader knows them: the framework, with the agent where two share one.
    reference_name: str | None = Field(default=None, max_length=512)
    candidate_name: str | None = Field(default=None, max_length=512)


class ExperimentComparison(_Bounded):
    complete: bool = Field(description="false when the deadline passed before every outcome")
    reference: uuid.UUID | None = Field(
        description="the member the others are compared against: the first that completed"
    )
    tolerance: ParityTolerance
    evaluations: list[MemberResult]
    parity: list[PairParity] = Field(description="every pair of completed members")
    parity_ok: bool | None = Field(
        description="every pair within tolerance; None with fewer than two completed"
    )
    failures: list[ExperimentGap] = Field(
        description="members that failed or are missing, and what could not be scheduled"
    )


class ExperimentCompared(Payload):
    TYPE = "experiment.compared"

    experiment_id: uuid.UUID
    comparison: ExperimentComparison
