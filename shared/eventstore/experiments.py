"""How each event changes the ``experiments`` read model.

``evolve_experiment`` is pure, like the other projections: the row so far plus one event
gives the next row, with values from the event only. As for evaluations, only the request
(``experiment.requested``) creates the row; events that came before it are folded in when
it comes (``projections.fold``). An experiment has one outcome, the first of
``experiment.compared`` and ``experiment.failed`` by log position: a second changes nothing.
Events may arrive out of order, so the status only moves forward (requested < scheduled <
its outcome) and a late event fills what is missing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from shared.eventstore.payloads import StoredPayload, text, uuid_of
from shared.eventstore.rooted import Changes, advance, evolve_rooted
from shared.eventstore.views import ExperimentStatus, ExperimentView, StoredEvent
from shared.messages import (
    ExperimentCompared,
    ExperimentFailed,
    ExperimentRequested,
    ExperimentScheduled,
)

__all__ = ["EXPERIMENT_ROOT", "evolve_experiment", "experiment_key"]

# The event that makes an experiment exist; no other creates its row.
EXPERIMENT_ROOT = ExperimentRequested.TYPE

# The two outcomes rank alike: whichever comes first is final.
_RANK: dict[ExperimentStatus, int] = {"requested": 0, "scheduled": 1, "failed": 2, "compared": 2}
_OUTCOMES: frozenset[ExperimentStatus] = frozenset({"failed", "compared"})


def experiment_key(event: StoredEvent) -> uuid.UUID | None:
    """The experiment an event is about, or None if it changes no experiment."""
    if event.type not in _HANDLERS:
        return None
    return uuid_of(event.payload.get("experiment_id"))


def evolve_experiment(current: ExperimentView | None, event: StoredEvent) -> ExperimentView | None:
    """The experiment after ``event`` (``current`` is None for one not seen before); None
    while it has not been requested."""
    key = experiment_key(event)
    if key is None:
        raise ValueError(f"event {event.event_id} ({event.type}) is about no experiment")
    return evolve_rooted(
        current,
        event,
        root=EXPERIMENT_ROOT,
        handlers=_HANDLERS,
        new=partial(_new_experiment, key, event),
    )


def _new_experiment(key: uuid.UUID, event: StoredEvent) -> ExperimentView:
    return ExperimentView(
        experiment_id=key,
        status="requested",
        model=None,
        trace_id=event.trace_id,
        request=None,
        members=None,
        skipped=None,
        comparison=None,
        error=None,
        requested_at=event.occurred_at,
        updated_at=event.occurred_at,
        last_position=event.position,
    )


def _advance(row: ExperimentView, status: ExperimentStatus) -> ExperimentStatus:
    return advance(row.status, status, _RANK, _OUTCOMES)


def _requested(row: ExperimentView, event: StoredEvent, p: StoredPayload) -> Changes:
    models = p.get("models")
    first = models[0] if isinstance(models, list) and models else None
    return dict(
        request=dict(p),
        requested_at=event.occurred_at,
        trace_id=event.trace_id,
        model=text(first, "model") if isinstance(first, Mapping) else None,
        status=_advance(row, "requested"),
    )


def _scheduled(row: ExperimentView, event: StoredEvent, p: StoredPayload) -> Changes:
    return dict(
        members=_records(p.get("members")),
        skipped=_records(p.get("skipped")),
        status=_advance(row, "scheduled"),
    )


def _compared(row: ExperimentView, event: StoredEvent, p: StoredPayload) -> Changes:
    if row.status in _OUTCOMES:
        return {}  # the first outcome stands; this one stays in the log
    comparison = p.get("comparison")
    return dict(
        comparison=dict(comparison) if isinstance(comparison, Mapping) else None,
        status="compared",
    )


def _failed(row: ExperimentView, event: StoredEvent, p: StoredPayload) -> Changes:
    if row.status in _OUTCOMES:
        return {}
    return dict(error=text(p, "reason") or "", status="failed")


def _records(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [dict(item) for item in value if isinstance(item, Mapping)]


_Handler = Callable[[ExperimentView, StoredEvent, StoredPayload], Changes]
_HANDLERS: dict[str, _Handler] = {
    ExperimentRequested.TYPE: _requested,
    ExperimentScheduled.TYPE: _scheduled,
    ExperimentCompared.TYPE: _compared,
    ExperimentFailed.TYPE: _failed,
}
