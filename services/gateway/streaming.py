"""Server-sent events: an evaluation's stored events, as they are recorded, until it ends,
with the worker's progress notifications between them (``event: evaluation.progress``,
without an id: they are not stored, so a client resuming from ``Last-Event-ID`` resumes
from the stored events).

The notifications reach the gateway on the jobs exchange, the stored events through the
recorder and the store: in no order between them. So a step is sent only where it belongs,
between the stored ``evaluation.started`` and ``evaluation.measured``: steps heard before
the stream has sent ``started`` wait for it; those heard by the time it sends the
measurement (or the outcome) go just before it; any heard later is stale and dropped.

An id with no stored event after ``UNKNOWN_GRACE_S`` is not an evaluation: the stream sends
``event: error`` with data ``{"status": 404, "detail": …}`` and ends, rather than holding a
connection for an hour. The grace lets an id just accepted be stored (by the recorder, in
another process), as a read does (``GatewayContext.stored``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import orjson
from starlette.requests import Request

from services.gateway.context import READ_YOUR_WRITE_S
from services.gateway.progress import ProgressFeed
from shared.eventstore import EventStore
from shared.eventstore.views import StoredEvent

__all__ = ["TERMINAL", "UNKNOWN_GRACE_S", "follow"]

TERMINAL = frozenset({"evaluation.completed", "evaluation.failed"})
STARTED = "evaluation.started"
# Once one of these is sent, the run's steps are over: a notification heard later is stale.
MEASURED = frozenset({"evaluation.measured", *TERMINAL})
# How long a stream waits for the first stored event of its id before it answers 404.
UNKNOWN_GRACE_S = READ_YOUR_WRITE_S


def _frame(event: StoredEvent) -> str:
    data = {
        "position": event.position,
        "version": event.version,
        "event_id": str(event.event_id),
        "type": event.type,
        "occurred_at": event.occurred_at.isoformat(),
        "recorded_at": event.recorded_at.isoformat(),
        "trace_id": event.trace_id,
        "payload": event.payload,
    }
    return f"id: {event.version}\nevent: {event.type}\ndata: {orjson.dumps(data).decode()}\n\n"


def _error(status: int, detail: str) -> str:
    data = orjson.dumps({"status": status, "detail": detail}).decode()
    return f"event: error\ndata: {data}\n\n"


class _Steps:
    """The progress notifications one stream sends: none before it has sent ``started``,
    none once it has sent the measurement, each once."""

    def __init__(
        self, feed: ProgressFeed | None, evaluation_id: uuid.UUID | None, *, resumed: bool
    ) -> None:
        self._feed = feed
        self._evaluation_id = evaluation_id
        self._running = False
        self._over = False
        # A client resuming saw the steps told until it lost the stream: from the next one.
        latest = None if feed is None or evaluation_id is None else feed.latest(evaluation_id)
        self._told = latest.number if resumed and latest is not None else 0

    def saw(self, event_type: str) -> None:
        """The stream has sent (or the resuming client had seen) an event of this type."""
        if event_type == STARTED:
            self._running = True
        elif event_type in MEASURED:
            self._over = True

    def new(self) -> list[str]:
        """The frames of the steps heard since the last call, if they belong now."""
        if self._feed is None or self._evaluation_id is None:
            return []
        if not self._running or self._over:
            return []
        heard = self._feed.since(self._evaluation_id, self._told)
        if heard:
            self._told = heard[-1].number
        return [
            f"event: evaluation.progress\ndata: {orjson.dumps(told.payload).decode()}\n\n"
            for told in heard
        ]


async def follow(
    store: EventStore,
    stream_id: str,
    request: Request,
    *,
    missing: str,
    progress: ProgressFeed | None = None,
    evaluation_id: uuid.UUID | None = None,
    poll_s: float = 0.1,
    grace_s: float = UNKNOWN_GRACE_S,
    limit_s: float = 3600.0,
) -> AsyncIterator[str]:
    """Every event of ``stream_id`` after the client's ``Last-Event-ID`` (a stream version),
    then each new one as the recorder stores it; ends after the evaluation's outcome, or
    with a 404 ``error`` event (``missing`` its detail) if the stream has no event within
    ``grace_s``."""
    try:
        after = int(request.headers.get("last-event-id", "0"))
    except ValueError:
        after = 0
    began = time.monotonic()
    steps = _Steps(progress, evaluation_id, resumed=after > 0)
    # The store has no change feed: it is read again every poll_s while the client listens.
    while time.monotonic() < began + limit_s and not await request.is_disconnected():
        events = await store.stream_events(stream_id)
        if not events and time.monotonic() - began >= grace_s:
            yield _error(404, missing)
            return
        for event in events:
            if event.version > after:
                if event.type in MEASURED:
                    # Every step heard by now was told before the measurement was published.
                    for frame in steps.new():
                        yield frame
                yield _frame(event)
                after = event.version
            steps.saw(event.type)
            if event.type in TERMINAL:
                return
        for frame in steps.new():
            yield frame
        await asyncio.sleep(poll_s)
