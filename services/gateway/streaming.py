"""Server-sent events: an evaluation's stored events, as they are recorded, until it ends,
with the worker's progress notifications between them (``event: evaluation.progress``,
without an id: they are not stored, so a client resuming from ``Last-Event-ID`` resumes
from the stored events)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import orjson
from starlette.requests import Request

from services.gateway.progress import ProgressFeed
from shared.eventstore import EventStore
from shared.eventstore.views import StoredEvent

__all__ = ["follow"]

TERMINAL = frozenset({"evaluation.completed", "evaluation.failed"})


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


async def follow(
    store: EventStore,
    stream_id: str,
    request: Request,
    *,
    progress: ProgressFeed | None = None,
    evaluation_id: uuid.UUID | None = None,
    poll_s: float = 0.1,
    limit_s: float = 3600.0,
) -> AsyncIterator[str]:
    """Every event of ``stream_id`` after the client's ``Last-Event-ID`` (a stream version),
    then each new one as the recorder stores it; ends after the evaluation's outcome."""
    try:
        after = int(request.headers.get("last-event-id", "0"))
    except ValueError:
        after = 0
    deadline = time.monotonic() + limit_s
    told = 0
    # The store has no change feed: it is read again every poll_s while the client listens.
    while time.monotonic() < deadline and not await request.is_disconnected():
        for event in await store.stream_events(stream_id):
            if event.version > after:
                yield _frame(event)
                after = event.version
                if event.type in TERMINAL:
                    return
        latest = (
            None if progress is None or evaluation_id is None else progress.latest(evaluation_id)
        )
        if latest is not None and latest.number > told:
            told = latest.number
            yield f"event: evaluation.progress\ndata: {orjson.dumps(latest.payload).decode()}\n\n"
        await asyncio.sleep(poll_s)
