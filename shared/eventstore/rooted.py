"""What the evaluations and experiments projections share: a row that only its root event
(the request) creates, changed by one handler per payload class, whose status only moves
forward and whose first outcome is final."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from shared.eventstore.payloads import read_as
from shared.eventstore.views import EvaluationView, ExperimentView, StoredEvent
from shared.messages import Payload

__all__ = ["Changes", "Handlers", "advance", "evolve_rooted"]

# The fields an event changes in a row (a keyword argument set for dataclasses.replace).
Changes = dict[str, Any]
R = TypeVar("R", EvaluationView, ExperimentView)
S = TypeVar("S", bound=str)
P = TypeVar("P", bound=Payload)
# Each handler takes the row, the event and its payload as the handler's own payload class.
Handlers = Mapping[type[Payload], Callable[[R, StoredEvent, Any], Changes]]


def evolve_rooted(
    current: R | None,
    event: StoredEvent,
    *,
    classes: Mapping[str, type[P]],
    root: type[Payload],
    handlers: Handlers[R],
    new: Callable[[P], R],
) -> R | None:
    """The row after ``event``, read as one of ``classes`` (ValueError if it is none of
    them): None while its ``root`` has not come (``new`` makes the row the root starts from,
    out of the event's payload); else the handler's changes, with ``updated_at`` and
    ``last_position`` the greater of the row's and the event's (a late root folds in the
    events that came before it)."""
    payload = read_as(event, classes)
    if payload is None:
        kind = root.TYPE.partition(".")[0]  # the rows' own: evaluation, experiment
        raise ValueError(f"event {event.event_id} ({event.type}) is about no {kind}")
    if current is None and not isinstance(payload, root):
        return None
    row = current or new(payload)
    changes = handlers[type(payload)](row, event, payload)
    return replace(
        row,
        **changes,
        updated_at=max(row.updated_at, event.occurred_at),
        last_position=max(row.last_position, event.position),
    )


def advance(status: S, to: S, rank: Mapping[S, int], outcomes: frozenset[S]) -> S:
    """``status`` moved forward to ``to``, never back, and never off an outcome."""
    if status in outcomes:
        return status
    return to if rank[to] > rank[status] else status
