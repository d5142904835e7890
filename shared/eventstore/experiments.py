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
from functools import partial

from shared.eventstore.payloads import read_as, types_of
from shared.eventstore.rooted import Changes, Handlers, advance, evolve_rooted
from shared.eventstore.views import ExperimentStatus, ExperimentView, StoredEvent
from shared.messages import (
    ExperimentCompared,
    ExperimentFailed,
    ExperimentRequested,
    ExperimentScheduled,
)

__all__ = ["EXPERIMENT_ROOT", "evolve_experiment", "experiment_key"]

# The event that makes an experiment exist; no other creates its row.
EXPERIMENT_ROOT = ExperimentRequested

# The two outcomes rank alike: whichever comes first is final.
_RANK: dict[ExperimentStatus, int] = {"requested": 0, "scheduled": 1, "failed": 2, "compared": 2}
_OUTCOMES: frozenset[ExperimentStatus] = frozenset({"failed", "compared"})


ExperimentEvent = ExperimentRequested | ExperimentScheduled | ExperimentCompared | ExperimentFailed


def experiment_key(event: StoredEvent) -> uuid.UUID | None:
    """The experiment an event is about, or None if it changes no experiment."""
    payload = read_as(event, _EVENTS)
    return None if payload is None else payload.experiment_id


def evolve_experiment(current: ExperimentView | None, event: StoredEvent) -> ExperimentView | None:
    """The experiment after ``event`` (``current`` is None for one not seen before); None
    while it has not been requested."""
    return evolve_rooted(
        current,
        event,
        classes=_EVENTS,
        root=EXPERIMENT_ROOT,
        handlers=_HANDLERS,
        new=partial(_new_experiment, event),
    )


def _new_experiment(event: StoredEvent, payload: ExperimentEvent) -> ExperimentView:
    return ExperimentView(
        experiment_id=payload.experiment_id,
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


def _requested(row: ExperimentView, event: StoredEvent, p: ExperimentRequested) -> Changes:
    return dict(
        request=dict(event.payload),
        requested_at=event.occurred_at,
        trace_id=event.trace_id,
        model=p.models[0].model if p.models else None,
        status=_advance(row, "requested"),
    )


def _scheduled(row: ExperimentView, event: StoredEvent, p: ExperimentScheduled) -> Changes:
    return dict(
        members=tuple(p.members),
        skipped=tuple(p.skipped),
        status=_advance(row, "scheduled"),
    )


def _compared(row: ExperimentView, event: StoredEvent, p: ExperimentCompared) -> Changes:
    if row.status in _OUTCOMES:
        return {}  # the first outcome stands; this one stays in the log
    return dict(comparison=p.comparison, status="compared")


def _failed(row: ExperimentView, event: StoredEvent, p: ExperimentFailed) -> Changes:
    if row.status in _OUTCOMES:
        return {}
    return dict(error=p.reason, status="failed")


_HANDLERS: Handlers[ExperimentView] = {
    ExperimentRequested: _requested,
    ExperimentScheduled: _scheduled,
    ExperimentCompared: _compared,
    ExperimentFailed: _failed,
}
_EVENTS: dict[str, type[ExperimentEvent]] = types_of(
    ExperimentRequested, ExperimentScheduled, ExperimentCompared, ExperimentFailed
)
