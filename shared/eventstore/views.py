"""What reading the event store gives back: immutable values, detached from the database.

Plain frozen dataclasses rather than pydantic models: the projections build thousands of them
while appending and rebuilding, and every value in them came out of the store already checked.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Literal, TypeVar, cast, get_args

import orjson
from pydantic import BaseModel, ValidationError

from shared.errors import InvalidMessage
from shared.manifests import ModelManifest
from shared.messages import (
    Envelope,
    ExperimentComparison,
    ExperimentGap,
    ExperimentMember,
    LatencySummary,
    Payload,
    payload_type,
)

__all__ = [
    "AGENT_STATUSES",
    "EVALUATION_STATUSES",
    "EXPERIMENT_STATUSES",
    "AgentStatus",
    "AgentView",
    "ArtifactView",
    "EvaluationStatus",
    "EvaluationView",
    "ExperimentStatus",
    "ExperimentView",
    "StoredEvent",
]

EvaluationStatus = Literal["requested", "scheduled", "running", "completed", "failed"]
AgentStatus = Literal["online", "offline"]
ExperimentStatus = Literal["requested", "scheduled", "compared", "failed"]
EVALUATION_STATUSES: tuple[str, ...] = get_args(EvaluationStatus)
AGENT_STATUSES: tuple[str, ...] = get_args(AgentStatus)
EXPERIMENT_STATUSES: tuple[str, ...] = get_args(ExperimentStatus)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredEvent:
    """An envelope as recorded: with its global ``position`` and its ``version`` in its stream."""

    position: int
    stream_id: str
    version: int
    event_id: uuid.UUID
    type: str
    schema_version: int
    occurred_at: datetime
    recorded_at: datetime
    trace_id: str
    correlation_id: uuid.UUID
    causation_id: uuid.UUID | None
    traceparent: str | None
    tracestate: str | None
    producer: str | None
    # The payload as stored (``payload``): the document, or its JSON text until it is first
    # read. The recorder projects what it appends from the text it wrote; most of those
    # payloads are never read as documents (the projections read the checked payload).
    stored_payload: dict[str, Any] | str
    # The payload as its contract reads it, where whoever stored the event had it already (the
    # recorder validated it on the way in), so that projecting does not validate it again.
    checked: Payload | None = field(default=None, compare=False, repr=False)

    @property
    def payload(self) -> dict[str, Any]:
        """The payload as stored, a JSON document."""
        document = self.stored_payload
        if isinstance(document, str):
            document = orjson.loads(document)
            object.__setattr__(self, "stored_payload", document)  # a cache, as ``checked`` is
        return cast(dict[str, Any], document)

    def read(self) -> Payload | None:
        """The payload as the class its type names (``shared.messages``), or None where today's
        contract refuses it (an event stored before a contract was tightened): such an event
        changes no read model, and ``dlscope db check`` lists it. Validated once."""
        if self.checked is not None:
            return self.checked
        try:
            checked = payload_type(self.type).model_validate(self.payload)
        except (InvalidMessage, ValidationError):
            return None
        object.__setattr__(self, "checked", checked)  # a cache: the event itself is unchanged
        return checked

    @classmethod
    def from_row(cls, row: Mapping[Any, Any], *, checked: Payload | None = None) -> StoredEvent:
        """The event a row of the ``events`` table holds (``checked``: its payload, read)."""
        meta: Mapping[str, Any] = row["metadata"]
        causation = meta.get("causation_id")
        return cls(
            position=row["position"],
            stream_id=row["stream_id"],
            version=row["version"],
            event_id=row["event_id"],
            type=row["type"],
            schema_version=row["schema_version"],
            occurred_at=row["occurred_at"],
            recorded_at=row["recorded_at"],
            trace_id=meta["trace_id"],
            correlation_id=row["correlation_id"],
            causation_id=None if causation is None else uuid.UUID(causation),
            traceparent=meta.get("traceparent"),
            tracestate=meta.get("tracestate"),
            producer=meta.get("producer"),
            stored_payload=row["payload"],
            checked=checked,
        )

    def envelope(self) -> Envelope:
        """The message as it was published, e.g. to replay it to a consumer."""
        return Envelope(
            event_id=self.event_id,
            type=self.type,
            schema_version=self.schema_version,
            stream_id=self.stream_id,
            occurred_at=self.occurred_at,
            correlation_id=self.correlation_id,
            causation_id=self.causation_id,
            traceparent=self.traceparent,
            tracestate=self.tracestate,
            producer=self.producer,
            payload=self.payload,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class EvaluationView:
    """One evaluation as its events so far describe it (a row of the ``evaluations`` table)."""

    evaluation_id: uuid.UUID
    status: EvaluationStatus
    model: str | None
    # The requested constraint (e.g. ">=1,<2") until scheduled, then the resolved version.
    model_version: str | None
    framework: str | None
    hardware: str | None
    # The agent of the latest attempt (the pinned one, until an attempt starts).
    agent_id: str | None
    # Where and in what the latest attempt runs: evaluation.started's host and environment.
    host: str | None
    environment: dict[str, Any] | None
    # Attempts at the job so far (0 until it starts; more when a worker died mid-job and the
    # job was delivered again); earlier attempts stay in the event history.
    attempts: int
    trace_id: str
    # The evaluation.requested payload, as sent.
    request: dict[str, Any] | None
    # What evaluation.completed summarised.
    result: LatencySummary | None
    # "<stage>: <reason>" from evaluation.failed.
    error: str | None
    requested_at: datetime
    updated_at: datetime
    # Position of the newest event applied to this row.
    last_position: int
    # The sweep it is a load of (``dlscope sweep``), from its request.
    sweep_id: uuid.UUID | None = None

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> EvaluationView:
        """The view a row of the ``evaluations`` table holds, its JSON read as its types."""
        return cls(**{**row, "result": _read(LatencySummary, row["result"])})

    def as_row(self) -> dict[str, Any]:
        return {**_columns(self), "result": _json(self.result)}


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentView:
    """One worker as its announcements describe it (a row of the ``agents`` table)."""

    agent_id: str
    host: str | None
    framework: str | None
    framework_version: str | None
    hardware: str | None
    capabilities: dict[str, Any] | None
    heartbeat_interval_s: float | None
    status: AgentStatus
    busy: bool
    # When the agent last spoke (agent.online or agent.heartbeat); None if it never did.
    last_seen: datetime | None
    updated_at: datetime
    last_position: int

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> AgentView:
        return cls(**row)

    def as_row(self) -> dict[str, Any]:
        return _columns(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class ArtifactView:
    """One registered manifest version (a row of the ``artifacts`` table)."""

    # "<kind>:<name>@<version>": one key, so the projection machinery stays single-keyed.
    ref: str
    kind: str
    name: str
    version: str
    digest: str
    manifest: dict[str, Any]
    # Copied out of the manifest so lists can be filtered in SQL.
    framework: str | None
    task: str | None
    deprecated: bool
    deprecation_reason: str | None
    registered_at: datetime
    updated_at: datetime
    last_position: int

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> ArtifactView:
        return cls(**row)

    def as_row(self) -> dict[str, Any]:
        return _columns(self)

    def model_manifest(self) -> ModelManifest | None:
        """The manifest of a model, or None: another kind, or a model this process cannot
        read (e.g. one whose plugin steps are installed only where the registry runs)."""
        if self.kind != "model":
            return None
        try:
            return ModelManifest.model_validate(self.manifest)
        except ValidationError:
            return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ExperimentView:
    """One experiment as its events so far describe it (a row of the ``experiments`` table).

    ``request`` is the experiment.requested payload as sent; ``members`` and ``skipped`` the
    scheduler's plan, ``comparison`` the analyzer's, as their types (JSON in the table).
    """

    experiment_id: uuid.UUID
    status: ExperimentStatus
    # The first model of the request: the reference the others are compared against.
    model: str | None
    trace_id: str
    request: dict[str, Any] | None
    members: tuple[ExperimentMember, ...] | None
    skipped: tuple[ExperimentGap, ...] | None
    comparison: ExperimentComparison | None
    # The reason from experiment.failed.
    error: str | None
    requested_at: datetime
    updated_at: datetime
    last_position: int

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> ExperimentView:
        """The view a row of the ``experiments`` table holds, its JSON read as its types."""
        return cls(
            **{
                **row,
                "members": _read_all(ExperimentMember, row["members"]),
                "skipped": _read_all(ExperimentGap, row["skipped"]),
                "comparison": _read(ExperimentComparison, row["comparison"]),
            }
        )

    def as_row(self) -> dict[str, Any]:
        return {
            **_columns(self),
            "members": _json_all(self.members),
            "skipped": _json_all(self.skipped),
            "comparison": _json(self.comparison),
        }

    @property
    def member_ids(self) -> list[uuid.UUID]:
        """The evaluations the scheduler planned, in plan order (none before it planned)."""
        return [member.evaluation_id for member in self.members or ()]


M = TypeVar("M", bound=BaseModel)


def _read(model: type[M], value: object) -> M | None:
    return None if value is None else model.model_validate(value)


def _read_all(model: type[M], value: object) -> tuple[M, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValueError(f"expected a JSON list of {model.__name__}, got {type(value).__name__}")
    return tuple(model.model_validate(item) for item in value)


def _json(value: BaseModel | None) -> dict[str, Any] | None:
    return None if value is None else value.model_dump(mode="json")


def _json_all(values: tuple[BaseModel, ...] | None) -> list[dict[str, Any]] | None:
    return None if values is None else [value.model_dump(mode="json") for value in values]


def _columns(view: object) -> dict[str, Any]:
    return {f.name: getattr(view, f.name) for f in fields(view)}  # type: ignore[arg-type]
