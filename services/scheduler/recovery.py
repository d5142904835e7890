"""What a restarted scheduler takes back from the event store: the evaluations in flight.

The scheduler's picture of running jobs and their deadlines lives in memory and is fed by
private, non-durable queues, so a scheduler that restarts has lost both. Without them an
evaluation whose worker then dies would stay ``running`` forever. On start, the scheduler
reads every non-terminal evaluation's stream and follows it again: the job (its pinning and
latest attempt) and a deadline counted from when its latest attempt started, or from its
scheduling when none has.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from shared.eventstore import StoredEvent
from shared.messages import (
    Envelope,
    EvaluationCompleted,
    EvaluationFailed,
    EvaluationRequested,
    EvaluationScheduled,
    EvaluationStarted,
)

__all__ = ["InFlight", "in_flight"]


@dataclass(frozen=True)
class InFlight:
    """An evaluation scheduled and not yet over, as its stream tells it."""

    evaluation_id: uuid.UUID
    # The request: the timeout's failure is derived from it, so every scheduler (and this
    # one before its restart) emits the same failure, stored once.
    request: Envelope
    scheduled: EvaluationScheduled
    # The newest attempt's start and its event id, if one started.
    started: EvaluationStarted | None
    started_by: uuid.UUID | None
    # When the deadline's clock started: the newest attempt's start, or the scheduling.
    since: datetime


def in_flight(events: Sequence[StoredEvent]) -> InFlight | None:
    """The evaluation one stream's ``events`` describe, if it is scheduled and not over."""
    request: Envelope | None = None
    scheduled: EvaluationScheduled | None = None
    started: EvaluationStarted | None = None
    started_by: uuid.UUID | None = None
    since: datetime | None = None
    for stored in events:
        event = stored.read()  # None: refused by today's contract, as the projections take it
        if isinstance(event, EvaluationCompleted | EvaluationFailed):
            return None
        if isinstance(event, EvaluationRequested):
            request = stored.envelope()
        elif isinstance(event, EvaluationScheduled):
            scheduled, since = event, stored.occurred_at
        elif isinstance(event, EvaluationStarted) and (
            started is None or event.attempt >= started.attempt
        ):
            started, started_by, since = event, stored.event_id, stored.occurred_at
    if request is None or scheduled is None or since is None:
        return None  # not scheduled yet: the request is still in the scheduler's queue
    return InFlight(scheduled.evaluation_id, request, scheduled, started, started_by, since)
