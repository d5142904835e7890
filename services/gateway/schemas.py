"""HTTP request and response bodies of the gateway's /v1 API."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import Query
from pydantic import BaseModel, ConfigDict, Field

from shared.inputs import MAX_NAME
from shared.messages import (
    DEFAULT_TRACE_LEVEL,
    DEFAULT_TRACE_QUERIES,
    Framework,
    Hardware,
    LatencySummary,
    Scenario,
    SweepPoint,
    TraceLevel,
)

__all__ = [
    "AgentOut",
    "EvaluationAccepted",
    "EvaluationCreate",
    "EvaluationEventOut",
    "EvaluationOut",
    "Limit",
    "NotFound",
    "Offset",
    "Unreadable",
]

# Pages of the lists. The offset's bound keeps it inside every database's integer (past it
# a 422, not the database's overflow); no list is anywhere near that long.
MAX_OFFSET = 2**31 - 1
Limit = Annotated[int, Query(ge=1, le=1000, description="at most this many items")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="skip this many items first")]

NotFound: dict[int | str, dict[str, Any]] = {404: {"description": "no such item (yet)"}}
# FastAPI answers 400 to a body it cannot read at all (not UTF-8, say), before validating.
Unreadable: dict[int | str, dict[str, Any]] = {400: {"description": "the body cannot be read"}}


class EvaluationCreate(BaseModel):
    # Every string here is a name, a constraint or an id (shared.inputs).
    model_config = ConfigDict(extra="forbid", str_max_length=MAX_NAME)

    model: str = Field(
        min_length=1, description="model name in the registry", examples=["squeezenet"]
    )
    version: str = Field(default="*", description="model version constraint, e.g. '>=1.0,<2'")
    framework: Framework = Field(examples=["onnxruntime"])
    framework_version: str = Field(default="*", description="framework version constraint")
    hardware: Hardware = "cpu"
    agent_id: str | None = Field(default=None, description="pin the evaluation to one agent")
    scenario: Scenario = Field(default_factory=Scenario)
    dataset: str | None = Field(
        default=None,
        min_length=1,
        description="a labelled dataset: top-1/top-5 accuracy is measured on it",
    )
    dataset_version: str = Field(default="*", description="dataset version constraint")
    split: str | None = Field(default=None, description="one split of the dataset, e.g. test")
    trace_level: TraceLevel = Field(
        default=DEFAULT_TRACE_LEVEL,
        description="how deep to trace; framework and deeper profile the layers in passes "
        "of their own, after the timed one (GET /v1/evaluations/{id}/layers)",
    )
    trace_queries: int = Field(
        strict=True,
        default=DEFAULT_TRACE_QUERIES,
        ge=1,
        le=100,
        description="queries per traced pass",
    )
    concurrent: bool = Field(
        strict=True,
        default=False,
        description="measure without waiting for the device's lease, beside whatever else "
        "runs on it (a contention study); the result is labelled measured_under_contention",
    )
    sweep: SweepPoint | None = Field(
        default=None,
        description="the sweep this evaluation is a load of (dlscope sweep labels each "
        "load): GET /v1/sweeps/{sweep_id} and the page /sweeps/{sweep_id} gather them",
    )


# What the answer to a concurrent evaluation says: the flag is about an experiment's members.
ONE_EVALUATION_CONCURRENT = (
    "concurrent runs an experiment's members together; one evaluation has no members to run "
    "beside: it only skips the device lease, and its result is labelled as measured under "
    "contention"
)


class EvaluationAccepted(BaseModel):
    id: uuid.UUID
    trace_id: str
    trace_url: str | None = Field(description="the trace in Jaeger; null where none is exported")
    status_url: str
    warnings: list[str] = Field(
        default_factory=list, description="what in the request may not do what it seems to"
    )


class EvaluationOut(BaseModel):
    id: uuid.UUID
    status: str = Field(description="requested | scheduled | running | completed | failed")
    model: str | None
    model_version: str | None = Field(description="the constraint asked for, then the version run")
    framework: str | None
    hardware: str | None
    agent_id: str | None = Field(description="the agent of the latest attempt")
    host: str | None = Field(description="the host of the latest attempt, once started")
    attempts: int = Field(
        description="attempts at the job so far: more than 1 when a worker died running it "
        "and another took it up (every attempt is in the events)"
    )
    environment: dict[str, Any] | None = Field(
        description="what the latest attempt ran in: versions, CPU, load (at its start)"
    )
    trace_id: str
    trace_url: str | None = Field(description="the trace in Jaeger; null where none is exported")
    requested_at: datetime
    updated_at: datetime
    result: LatencySummary | None = Field(description="latency statistics, once completed")
    error: str | None = Field(description="'<stage>: <reason>', once failed")


class EvaluationEventOut(BaseModel):
    position: int
    version: int
    event_id: uuid.UUID
    type: str
    occurred_at: datetime
    recorded_at: datetime
    trace_id: str
    causation_id: uuid.UUID | None
    payload: dict[str, Any]


class AgentOut(BaseModel):
    agent_id: str
    host: str | None
    framework: str | None
    framework_version: str | None
    hardware: str | None
    status: str = Field(description="online | offline")
    busy: bool
    last_seen: datetime | None
    capabilities: dict[str, Any] | None
    # The fleet as the scheduler sees it (issue 15): the same facts, read for people.
    state: str = Field(description="offline, busy (running a job) or online (idle)")
    device: str | None = Field(
        description="what it runs on (CPU model, GPU, OpenCL device), or why that is unusable"
    )
    current_job: uuid.UUID | None = Field(description="the evaluation it is running now")
    last_heartbeat: datetime | None = Field(description="when it last spoke (= last_seen)")
    jobs_done: int = Field(description="evaluations it ran to an outcome, failed ones included")
    jobs_failed: int = Field(description="of jobs_done, those that failed")
    jobs_queued: int = Field(description="evaluations pinned to it that have not started")
