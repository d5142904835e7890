"""How each event changes the read models (``evaluations``, ``agents`` and ``artifacts``;
``experiments`` in ``shared.eventstore.experiments``).

``evolve_evaluation``, ``evolve_agent`` and ``evolve_artifact`` are pure: the row so far
plus one event gives the next row. Every value they write comes from the event (its payload,
``occurred_at``, ``position``), never from the clock, so replaying the log gives the same
rows again.

An evaluation exists once it is requested: only ``evaluation.requested`` creates its row.
Another event about an evaluation nobody requested (a failure caused by a malformed message
naming a random id, say) stays in the log and makes no row; should its request come after
it after all (a request retried at the recorder), the request makes the row and the events
before it are folded in, after it, in position order (``fold``), live as on a rebuild.

An evaluation has one outcome: the first ``evaluation.completed`` or ``evaluation.failed`` by
log position, for its status, its result and its error alike. A second outcome (a worker
frozen past its failure that woke and finished, a job delivered again) stays in the log and
changes nothing, so a completed evaluation never shows an error nor a failed one a result.

Each handler takes its event's payload as its own payload class (``StoredEvent.read``, which
the recorder's append hands over already validated); an event its contract refuses today
changes no row (``dlscope db check`` lists it).

Events arrive out of order (the analyzer's completion can overtake the worker's start), so:
an evaluation's status only moves forward (requested < scheduled < running < its outcome),
and once it has an outcome no start or measurement moves it back; an evaluation's agent,
host and environment are those of its highest attempt, whatever order the attempts' events
come in; an agent's status follows the newest event by ``occurred_at``; and a late event
still fills details that are missing.

``project`` applies a batch of just-stored events inside the append's (or rebuild's)
transaction, in position order (the order a rebuild replays them in): one read of the rows
concerned, the fold in memory, one upsert per table.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import Table, select
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.eventstore import schema
from shared.eventstore.experiments import EXPERIMENT_ROOT, evolve_experiment, experiment_key
from shared.eventstore.payloads import read_as, types_of
from shared.eventstore.rooted import Changes, Handlers, advance, evolve_rooted
from shared.eventstore.sql import one_of, upsert
from shared.eventstore.views import (
    AgentView,
    ArtifactView,
    EvaluationStatus,
    EvaluationView,
    ExperimentView,
    StoredEvent,
)
from shared.manifests import ModelManifest
from shared.messages import (
    AgentHeartbeat,
    AgentOffline,
    AgentOnline,
    ArtifactDeprecated,
    ArtifactRegistered,
    EvaluationCompleted,
    EvaluationFailed,
    EvaluationMeasured,
    EvaluationRequested,
    EvaluationScheduled,
    EvaluationStarted,
    Payload,
)

__all__ = [
    "EVALUATION_ROOT",
    "agent_key",
    "artifact_key",
    "evaluation_key",
    "evolve_agent",
    "evolve_artifact",
    "evolve_evaluation",
    "fold",
    "fold_evaluation",
    "project",
]

# The event that makes an evaluation exist; no other creates its row.
EVALUATION_ROOT = EvaluationRequested

# Forward-only order of statuses: an event may raise the status, never lower it. The two
# outcomes rank alike: whichever comes first is final (``_OUTCOMES``).
_RANK: dict[EvaluationStatus, int] = {
    "requested": 0,
    "scheduled": 1,
    "running": 2,
    "failed": 3,
    "completed": 3,
}
_OUTCOMES: frozenset[EvaluationStatus] = frozenset({"completed", "failed"})


# --- evaluations ---------------------------------------------------------------------------

EvaluationEvent = (
    EvaluationRequested
    | EvaluationScheduled
    | EvaluationStarted
    | EvaluationMeasured
    | EvaluationCompleted
    | EvaluationFailed
)


def evaluation_key(event: StoredEvent) -> uuid.UUID | None:
    """The evaluation an event is about, or None if it changes no evaluation."""
    payload = read_as(event, _EVALUATION_EVENTS)
    return None if payload is None else payload.evaluation_id


def evolve_evaluation(current: EvaluationView | None, event: StoredEvent) -> EvaluationView | None:
    """The evaluation after ``event`` (``current`` is None for one not seen before); None
    while it has not been requested (``fold`` tells how a request that comes late is folded)."""
    return evolve_rooted(
        current,
        event,
        classes=_EVALUATION_EVENTS,
        root=EVALUATION_ROOT,
        handlers=_EVALUATION_HANDLERS,
        new=partial(_new_evaluation, event),
    )


def _new_evaluation(event: StoredEvent, payload: EvaluationEvent) -> EvaluationView:
    return EvaluationView(
        evaluation_id=payload.evaluation_id,
        status="requested",
        model=None,
        model_version=None,
        framework=None,
        hardware=None,
        agent_id=None,
        host=None,
        environment=None,
        attempts=0,
        trace_id=event.trace_id,
        request=None,
        result=None,
        error=None,
        requested_at=event.occurred_at,
        updated_at=event.occurred_at,
        last_position=event.position,
    )


def fold_evaluation(events: Iterable[StoredEvent]) -> EvaluationView | None:
    """The evaluation one stream's ``events`` describe, or None if it was never requested."""
    return fold(events, evolve_evaluation, EVALUATION_ROOT, evaluation_key)


def _advance(row: EvaluationView, status: EvaluationStatus) -> EvaluationStatus:
    return advance(row.status, status, _RANK, _OUTCOMES)


def _requested(row: EvaluationView, event: StoredEvent, p: EvaluationRequested) -> Changes:
    # The request is the root of the evaluation: it owns the request time and the trace. Its
    # other fields only fill gaps, so a resolved version that overtook it is kept.
    return dict(
        request=dict(event.payload),
        requested_at=event.occurred_at,
        trace_id=event.trace_id,
        model=row.model or p.model,
        model_version=row.model_version or p.model_version or None,
        framework=row.framework or p.framework,
        hardware=row.hardware or p.hardware,
        agent_id=row.agent_id or p.agent_id,
        sweep_id=None if p.sweep is None else p.sweep.sweep_id,
        status=_advance(row, "requested"),
    )


def _scheduled(row: EvaluationView, event: StoredEvent, p: EvaluationScheduled) -> Changes:
    return dict(
        model=p.model or row.model,
        model_version=p.model_version or row.model_version,
        framework=p.framework,
        hardware=p.hardware,
        # The pinned agent, if any; the agent that actually started the job (if its event
        # came first) is the better answer and is kept.
        agent_id=row.agent_id or p.agent_id,
        status=_advance(row, "scheduled"),
    )


def _started(row: EvaluationView, event: StoredEvent, p: EvaluationStarted) -> Changes:
    changes: Changes = dict(attempts=max(row.attempts, p.attempt), status=_advance(row, "running"))
    # An attempt's start describes the evaluation unless a later attempt is already known
    # (its start, or its measurement, overtook this one).
    if p.attempt >= row.attempts:
        changes.update(
            agent_id=p.agent_id or row.agent_id,
            host=p.host or None,
            environment=dict(p.environment),
        )
    return changes


def _measured(row: EvaluationView, event: StoredEvent, p: EvaluationMeasured) -> Changes:
    if p.attempt > row.attempts:
        # A later attempt than any start seen: its agent, whose host its start will tell.
        return dict(
            attempts=p.attempt,
            agent_id=p.agent_id or row.agent_id,
            host=None,
            environment=None,
            status=_advance(row, "running"),
        )
    return dict(
        agent_id=row.agent_id or p.agent_id,
        status=_advance(row, "running"),
    )


def _completed(row: EvaluationView, event: StoredEvent, p: EvaluationCompleted) -> Changes:
    if row.status in _OUTCOMES:
        # The first outcome stands: what the user and the experiment saw does not change.
        return {}
    return dict(result=p.result, status="completed")


def _failed(row: EvaluationView, event: StoredEvent, p: EvaluationFailed) -> Changes:
    if row.status in _OUTCOMES:
        # A failure after the outcome (a timeout after a crash, a completed evaluation's
        # echo) is kept in the log, not shown.
        return {}
    return dict(error=f"{p.stage}: {p.reason}", status="failed")


_EVALUATION_HANDLERS: Handlers[EvaluationView] = {
    EvaluationRequested: _requested,
    EvaluationScheduled: _scheduled,
    EvaluationStarted: _started,
    EvaluationMeasured: _measured,
    EvaluationCompleted: _completed,
    EvaluationFailed: _failed,
}
_EVALUATION_EVENTS: dict[str, type[EvaluationEvent]] = types_of(
    EvaluationRequested,
    EvaluationScheduled,
    EvaluationStarted,
    EvaluationMeasured,
    EvaluationCompleted,
    EvaluationFailed,
)


# --- agents ---------------------------------------------------------------------------------

AgentEvent = AgentOnline | AgentHeartbeat | AgentOffline


def agent_key(event: StoredEvent) -> str | None:
    """The agent an event is about, or None if it changes no agent."""
    payload = read_as(event, _AGENT_EVENTS)
    return None if payload is None else payload.agent_id


def evolve_agent(current: AgentView | None, event: StoredEvent) -> AgentView | None:
    """The agent after ``event`` (``current`` is None for one not seen before); None for an
    event that cannot introduce an agent not seen before: an offline notice, or a heartbeat
    that does not say what the agent runs. A worker's heartbeat always says it (so one whose
    announcement was missed is still listed); one that does not is no worker's, and would
    list an agent that does not exist (issue 42)."""
    payload = read_as(event, _AGENT_EVENTS)
    if payload is None:
        raise ValueError(f"event {event.event_id} ({event.type}) is about no agent")
    if current is None and not _introduces(payload):
        return None
    row = current or AgentView(
        agent_id=payload.agent_id,
        host=None,
        framework=None,
        framework_version=None,
        hardware=None,
        capabilities=None,
        heartbeat_interval_s=None,
        status="offline",
        busy=False,
        last_seen=None,
        updated_at=event.occurred_at,
        last_position=event.position,
    )
    # Older than what the row already reflects: may fill details, must not change status.
    late = event.occurred_at < row.updated_at
    if isinstance(payload, AgentOnline):
        changes = _online(row, event, payload, late)
    elif isinstance(payload, AgentHeartbeat):
        changes = _heartbeat(row, event, payload, late)
    else:
        changes = _offline(row, late)
    return replace(
        row,
        **changes,
        updated_at=max(row.updated_at, event.occurred_at),
        last_position=event.position,
    )


def _introduces(payload: AgentEvent) -> bool:
    if isinstance(payload, AgentOnline):
        return True
    if isinstance(payload, AgentHeartbeat):
        return payload.framework is not None and payload.hardware is not None
    return False


def _seen(row: AgentView, event: StoredEvent) -> datetime:
    return event.occurred_at if row.last_seen is None else max(row.last_seen, event.occurred_at)


def _online(row: AgentView, event: StoredEvent, p: AgentOnline, late: bool) -> Changes:
    announced: Changes = {
        "host": p.host or None,
        "framework": p.framework,
        "framework_version": p.framework_version or None,
        "hardware": p.hardware,
        "capabilities": dict(p.capabilities),
        "heartbeat_interval_s": p.heartbeat_interval_s,
    }
    if late:
        # Keep what newer events said; take from the announcement only what is unknown.
        known = {name: value for name, value in announced.items() if getattr(row, name) is None}
        return {**known, "last_seen": _seen(row, event)}
    # The announcement wins where it says something. ``busy`` is kept: agents also announce
    # themselves again when a scheduler asks, possibly in the middle of a job.
    said = {name: value for name, value in announced.items() if value is not None}
    return {**said, "status": "online", "last_seen": _seen(row, event)}


def _heartbeat(row: AgentView, event: StoredEvent, p: AgentHeartbeat, late: bool) -> Changes:
    # Heartbeats repeat who the agent is: that fills what a missed announcement left unknown.
    repeated = {
        "host": p.host,
        "framework": p.framework,
        "framework_version": p.framework_version,
        "hardware": p.hardware,
    }
    identity = {
        name: value
        for name, value in repeated.items()
        if getattr(row, name) is None and value  # an empty name says nothing
    }
    if late:
        return {**identity, "last_seen": _seen(row, event)}
    return {**identity, "status": "online", "busy": p.busy, "last_seen": _seen(row, event)}


def _offline(row: AgentView, late: bool) -> Changes:
    # Not a sign of life (it may come from the scheduler noticing missed heartbeats), so
    # last_seen stays; a late one changes nothing.
    return {} if late else {"status": "offline", "busy": False}


_AGENT_EVENTS: dict[str, type[AgentEvent]] = types_of(AgentOnline, AgentHeartbeat, AgentOffline)


# --- artifacts ------------------------------------------------------------------------------

_ARTIFACT_EVENTS: dict[str, type[ArtifactRegistered | ArtifactDeprecated]] = types_of(
    ArtifactRegistered, ArtifactDeprecated
)


def artifact_key(event: StoredEvent) -> str | None:
    """``<kind>:<name>@<version>`` of the artifact an event is about, or None."""
    payload = read_as(event, _ARTIFACT_EVENTS)
    return None if payload is None else _ref(payload)


def _ref(payload: ArtifactRegistered | ArtifactDeprecated) -> str:
    return f"{payload.kind}:{payload.name}@{payload.version}"


def evolve_artifact(current: ArtifactView | None, event: StoredEvent) -> ArtifactView:
    """The artifact after ``event``. Versions are immutable: a second registration (the
    registry refuses those, but the log is the judge) changes nothing."""
    payload = read_as(event, _ARTIFACT_EVENTS)
    if payload is None:
        raise ValueError(f"event {event.event_id} ({event.type}) is about no artifact")
    if isinstance(payload, ArtifactRegistered):
        return _registered(current, event, payload)
    row = current or ArtifactView(
        ref=_ref(payload),
        kind=payload.kind,
        name=payload.name,
        version=payload.version,
        digest="",
        manifest={},
        framework=None,
        task=None,
        deprecated=False,
        deprecation_reason=None,
        registered_at=event.occurred_at,
        updated_at=event.occurred_at,
        last_position=event.position,
    )
    return replace(
        row,
        deprecated=True,
        deprecation_reason=row.deprecation_reason or payload.reason or None,
        updated_at=max(row.updated_at, event.occurred_at),
        last_position=event.position,
    )


def _registered(
    current: ArtifactView | None, event: StoredEvent, p: ArtifactRegistered
) -> ArtifactView:
    if current is not None and current.digest:
        return current
    manifest = p.manifest
    model = manifest if isinstance(manifest, ModelManifest) else None
    return ArtifactView(
        ref=_ref(p),
        kind=p.kind,
        name=p.name,
        version=p.version,
        digest=p.digest,
        manifest=manifest.model_dump(mode="json"),
        framework=None if model is None else model.framework.name,
        task=None if model is None else model.task,
        # A deprecation that overtook its registration still holds.
        deprecated=current.deprecated if current else False,
        deprecation_reason=current.deprecation_reason if current else None,
        registered_at=event.occurred_at,
        updated_at=max(event.occurred_at, current.updated_at) if current else event.occurred_at,
        last_position=event.position,
    )


# --- folding a stream, applying a batch -------------------------------------------------------

K = TypeVar("K")
V = TypeVar("V", EvaluationView, AgentView, ArtifactView, ExperimentView)
Evolve = Callable[[V | None, StoredEvent], V | None]


def fold(
    events: Iterable[StoredEvent],
    evolve: Evolve[V],
    root: type[Payload],
    key_of: Callable[[StoredEvent], object | None],
) -> V | None:
    """The row one stream's ``events`` (in any order; those ``key_of`` finds about no row are
    passed over) make: none without a ``root`` event (the request that makes the row exist);
    else the first root by position, then every other event in position order. ``project``
    gives the same row whatever batches the events came in, live or rebuilding: a root that
    finds no row folds in the stream's events stored before it."""
    ordered = sorted(
        (event for event in events if key_of(event) is not None), key=lambda event: event.position
    )
    first = next((event for event in ordered if event.type == root.TYPE), None)
    if first is None:
        return None
    row = evolve(None, first)
    for event in ordered:
        if event is not first:
            row = evolve(row, event)
    return row


async def project(connection: AsyncConnection, stored: Sequence[StoredEvent]) -> None:
    """Apply ``stored`` (in position order) to the projections, on ``connection``'s transaction."""
    ordered = sorted(stored, key=lambda event: event.position)
    await _project_table(
        connection,
        schema.evaluations,
        EvaluationView,
        ordered,
        evaluation_key,
        evolve_evaluation,
        root=EVALUATION_ROOT,
    )
    await _project_table(connection, schema.agents, AgentView, ordered, agent_key, evolve_agent)
    await _project_table(
        connection, schema.artifacts, ArtifactView, ordered, artifact_key, evolve_artifact
    )
    await _project_table(
        connection,
        schema.experiments,
        ExperimentView,
        ordered,
        experiment_key,
        evolve_experiment,
        root=EXPERIMENT_ROOT,
    )


async def _project_table(
    connection: AsyncConnection,
    table: Table,
    view: type[V],
    ordered: Sequence[StoredEvent],
    key_of: Callable[[StoredEvent], K | None],
    evolve: Evolve[V],
    *,
    root: type[Payload] | None = None,
) -> None:
    keyed = [(key, event) for event in ordered if (key := key_of(event)) is not None]
    if not keyed:
        return
    dialect = connection.dialect.name
    (key_column,) = table.primary_key.columns
    # No FOR UPDATE: writers take turns (sql.lock_writers), so no other transaction can
    # change these rows between this read and the upsert.
    query = select(table).where(one_of(dialect, key_column, {key for key, _ in keyed}))
    rows: dict[Any, V] = {
        row[key_column.name]: view.from_row(row)
        for row in (await connection.execute(query)).mappings()
    }
    changed: dict[K, V] = {}
    for key, event in keyed:
        current = rows.get(key)
        if current is None and root is not None and event.type == root.TYPE:
            # The request came after other events of its stream (stored, but making no row):
            # fold them in after it, as ``fold`` does on any replay. A request first in its
            # stream, as nearly every one is, has nothing before it to look up.
            earlier: list[StoredEvent] = (
                await _stored_before(connection, event) if event.version > 1 else []
            )
            ours: list[StoredEvent] = [e for e in earlier if key_of(e) == key]
            evolved = fold([*ours, event], evolve, root, key_of)
        else:
            evolved = evolve(current, event)
        if evolved is not None:
            rows[key] = changed[key] = evolved
    if changed:
        await connection.execute(upsert(dialect, table), [row.as_row() for row in changed.values()])


async def _stored_before(connection: AsyncConnection, event: StoredEvent) -> list[StoredEvent]:
    """The events of ``event``'s stream stored before it (this batch's included)."""
    events = schema.events
    query = (
        select(events)
        .where(events.c.stream_id == event.stream_id, events.c.position < event.position)
        .order_by(events.c.position)
    )
    return [StoredEvent.from_row(row) for row in (await connection.execute(query)).mappings()]
