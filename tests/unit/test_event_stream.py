"""An evaluation followed as server-sent events, whatever order its stored events and the
worker's progress notifications reach the gateway in (they travel apart): a step is shown
only between the evaluation's start and its measurement, never after it; an id that is not
an evaluation ends the stream with a 404 within its grace, instead of holding it open."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from services.gateway.progress import ProgressFeed
from services.gateway.streaming import follow
from shared.eventstore.views import StoredEvent
from shared.messages import Envelope, EvaluationProgress, evaluation_stream

POLL_S = 0.01


class Store:
    """The event store as ``follow`` reads it: one stream, appended to by the test."""

    def __init__(self) -> None:
        self.events: list[StoredEvent] = []

    async def stream_events(self, stream_id: str) -> list[StoredEvent]:
        return list(self.events)

    def record(self, event_type: str) -> None:
        now = datetime.now(UTC)
        self.events.append(
            StoredEvent(
                position=len(self.events) + 1,
                stream_id="s",
                version=len(self.events) + 1,
                event_id=uuid.uuid4(),
                type=event_type,
                schema_version=1,
                occurred_at=now,
                recorded_at=now,
                trace_id="0" * 32,
                correlation_id=uuid.uuid4(),
                causation_id=None,
                traceparent=None,
                tracestate=None,
                producer=None,
                stored_payload={},
            )
        )


class Client:
    """The HTTP request of the stream: its headers; it stays connected."""

    def __init__(self, **headers: str) -> None:
        self.headers = headers

    async def is_disconnected(self) -> bool:
        return False


class Following:
    """One stream, read as the client receives it: the events' types in order (a progress
    notification as ``progress:<part>``)."""

    def __init__(self, frames: AsyncIterator[str]) -> None:
        self.seen: list[str] = []
        self.task = asyncio.create_task(self._read(frames))

    async def _read(self, frames: AsyncIterator[str]) -> None:
        async for frame in frames:
            fields = dict(line.split(": ", 1) for line in frame.strip().split("\n"))
            if fields["event"] == "evaluation.progress":
                self.seen.append("progress:" + orjson.loads(fields["data"])["part"])
            else:
                self.seen.append(fields["event"])

    async def until(self, done: Callable[[list[str]], bool]) -> None:
        async with asyncio.timeout(5):
            while not done(self.seen):
                await asyncio.sleep(POLL_S)

    async def quiet(self) -> list[str]:
        """What it has received once several polls went by."""
        await asyncio.sleep(POLL_S * 10)
        return list(self.seen)


async def tell(feed: ProgressFeed, evaluation_id: uuid.UUID, part: str) -> None:
    """A worker's notification, as the gateway's subscription hands it to the feed."""
    notice = EvaluationProgress(
        evaluation_id=evaluation_id, agent_id="worker", phase="running the scenario", part=part
    )
    await feed._hear(
        notice,
        Envelope.wrap(
            notice, stream_id=evaluation_stream(evaluation_id), correlation_id=uuid.uuid4()
        ),
    )


def following(
    store: Store, feed: ProgressFeed, evaluation_id: uuid.UUID, client: Client, **options: Any
) -> Following:
    return Following(
        follow(
            store,  # type: ignore[arg-type]
            "s",
            client,  # type: ignore[arg-type]
            missing=f"no evaluation {evaluation_id}",
            progress=feed,
            evaluation_id=evaluation_id,
            poll_s=POLL_S,
            **options,
        )
    )


async def test_progress_is_shown_between_the_start_and_the_measurement_only() -> None:
    store, feed, evaluation_id = Store(), ProgressFeed(), uuid.uuid4()
    store.record("evaluation.requested")
    store.record("evaluation.scheduled")
    stream = following(store, feed, evaluation_id, Client())
    await stream.until(lambda seen: "evaluation.scheduled" in seen)

    # The worker's first step reaches the gateway before its start is stored: it waits.
    await tell(feed, evaluation_id, "fetching")
    assert await stream.quiet() == ["evaluation.requested", "evaluation.scheduled"]
    store.record("evaluation.started")
    await stream.until(lambda seen: "progress:fetching" in seen)
    await tell(feed, evaluation_id, "timed queries")
    await stream.until(lambda seen: "progress:timed queries" in seen)

    # The last step and the measurement arrive together: the step goes first.
    await tell(feed, evaluation_id, "tracing")
    store.record("evaluation.measured")
    await stream.until(lambda seen: "evaluation.measured" in seen)
    # A step heard after the measurement was sent is stale: never shown.
    await tell(feed, evaluation_id, "late")
    await stream.quiet()
    store.record("evaluation.completed")
    await asyncio.wait_for(stream.task, 5)  # the stream ends at the outcome

    assert stream.seen == [
        "evaluation.requested",
        "evaluation.scheduled",
        "evaluation.started",
        "progress:fetching",
        "progress:timed queries",
        "progress:tracing",
        "evaluation.measured",
        "evaluation.completed",
    ]


async def test_a_stream_opened_late_shows_every_step_before_the_measurement() -> None:
    store, feed, evaluation_id = Store(), ProgressFeed(), uuid.uuid4()
    for event in ("requested", "scheduled", "started"):
        store.record(f"evaluation.{event}")
    for part in ("fetching", "timed queries"):
        await tell(feed, evaluation_id, part)
    store.record("evaluation.measured")
    store.record("evaluation.completed")
    stream = following(store, feed, evaluation_id, Client())
    await asyncio.wait_for(stream.task, 5)
    assert stream.seen[2:] == [
        "evaluation.started",
        "progress:fetching",
        "progress:timed queries",
        "evaluation.measured",
        "evaluation.completed",
    ]


async def test_a_client_resuming_gets_the_stored_events_after_its_last_one_only() -> None:
    store, feed, evaluation_id = Store(), ProgressFeed(), uuid.uuid4()
    for event in ("requested", "scheduled", "started"):
        store.record(f"evaluation.{event}")
    await tell(feed, evaluation_id, "timed queries")
    store.record("evaluation.measured")
    store.record("evaluation.completed")
    stream = following(store, feed, evaluation_id, Client(**{"last-event-id": "3"}))
    await asyncio.wait_for(stream.task, 5)
    assert stream.seen == ["evaluation.measured", "evaluation.completed"]

    # One that has seen the outcome already: nothing more to say, the stream ends.
    stream = following(store, feed, evaluation_id, Client(**{"last-event-id": "5"}))
    await asyncio.wait_for(stream.task, 5)
    assert stream.seen == []


async def test_an_id_that_is_not_an_evaluation_ends_with_a_404_after_the_grace() -> None:
    store, feed, evaluation_id = Store(), ProgressFeed(), uuid.uuid4()
    frames = follow(
        store,  # type: ignore[arg-type]
        "s",
        Client(),  # type: ignore[arg-type]
        missing=f"no evaluation {evaluation_id}",
        progress=feed,
        evaluation_id=evaluation_id,
        poll_s=POLL_S,
        grace_s=0.2,
    )
    started = asyncio.get_running_loop().time()
    received = [frame async for frame in frames]
    waited = asyncio.get_running_loop().time() - started
    assert 0.2 <= waited < 1.0
    assert received == [
        "event: error\ndata: "
        + orjson.dumps({"status": 404, "detail": f"no evaluation {evaluation_id}"}).decode()
        + "\n\n"
    ]


async def test_an_id_stored_within_the_grace_is_followed() -> None:
    store, feed, evaluation_id = Store(), ProgressFeed(), uuid.uuid4()
    stream = following(store, feed, evaluation_id, Client(), grace_s=1.0)
    await asyncio.sleep(0.2)  # accepted, not stored yet
    store.record("evaluation.requested")
    await stream.until(lambda seen: seen == ["evaluation.requested"])
    store.record("evaluation.failed")
    await asyncio.wait_for(stream.task, 5)
    assert stream.seen == ["evaluation.requested", "evaluation.failed"]


@pytest.mark.parametrize("kept", [1, 3])
async def test_the_feed_keeps_each_step_in_the_order_heard(kept: int) -> None:
    feed, evaluation_id = ProgressFeed(), uuid.uuid4()
    for i in range(kept):
        await tell(feed, evaluation_id, f"step {i}")
    heard = feed.since(evaluation_id)
    assert [told.payload["part"] for told in heard] == [f"step {i}" for i in range(kept)]
    assert feed.since(evaluation_id, heard[-1].number) == []
    assert feed.latest(evaluation_id) == heard[-1]
    assert feed.since(uuid.uuid4()) == []
