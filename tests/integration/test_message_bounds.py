"""Messages are bounded at every consumer, on the embedded broker and on RabbitMQ: a message
over DLSCOPE_MAX_MESSAGE_BYTES, or one whose text holds NUL, is dead-lettered with the reason
unread (so no such event is ever stored), and a producer is told before it sends one."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from harness.waiting import eventually
from shared.errors import MessageTooLarge, MessageUnreadable
from shared.eventstore import EventStore
from shared.inputs import MAX_REASON
from shared.messages import AgentOffline, Envelope
from shared.messaging import OutgoingMessage
from tests.integration.conftest import STACKS, Stack, stack_settings, started_stack

LIMIT = 256 * 1024


@pytest.fixture(params=STACKS)
async def small(
    request: pytest.FixtureRequest, tmp_path: Path, namespace: str
) -> AsyncIterator[Stack]:
    """A deployment whose messages may be at most LIMIT bytes."""
    settings = stack_settings(request, tmp_path, namespace, max_message_bytes=LIMIT)
    async with started_stack(settings, embedded=request.param == "embedded") as stack:
        yield stack


def offline(reason: str, *, event_id: uuid.UUID) -> Envelope:
    return Envelope.wrap(
        AgentOffline(agent_id="agent-x", reason=reason),
        stream_id="agent-agent-x",
        correlation_id=uuid.uuid4(),
        event_id=event_id,
    )


async def test_a_producer_is_told_before_it_sends_a_message_too_large(small: Stack) -> None:
    bus = small.runtime.bus("test")
    await bus.start()
    try:
        with pytest.raises(MessageTooLarge, match=f"over the {LIMIT} a message may have"):
            await bus.publish(
                Envelope(
                    type=AgentOffline.TYPE,
                    stream_id="agent-agent-x",
                    correlation_id=uuid.uuid4(),
                    payload={"agent_id": "agent-x", "reason": "x" * LIMIT},
                )
            )
    finally:
        await bus.stop()


async def test_a_producer_is_told_before_it_sends_what_no_consumer_would_read(
    small: Stack,
) -> None:
    bus = small.runtime.bus("test")
    await bus.start()
    try:
        nul = Envelope(
            type=AgentOffline.TYPE,
            stream_id="agent-agent-x",
            correlation_id=uuid.uuid4(),
            payload={"agent_id": "agent-x", "reason": "gone\x00away"},
        )
        with pytest.raises(MessageUnreadable, match=r"a NUL character \(U\+0000\) at payload"):
            await bus.publish(nul)
        # An escaped backslash before "u0000" is text like any other, and is sent.
        await bus.publish(offline("a \\u0000 in a path", event_id=uuid.uuid4()))
    finally:
        await bus.stop()


async def test_a_message_too_large_or_holding_nul_is_dead_lettered_and_never_stored(
    small: Stack,
) -> None:
    runtime = small.runtime
    topology = runtime.topology
    too_large, with_nul, fine = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    big = offline("r", event_id=too_large).model_dump(mode="json")
    big["payload"]["reason"] = "x" * LIMIT  # past the limit whatever it says
    nul = offline("r", event_id=with_nul).model_dump(mode="json")
    nul["producer"] = "bad\x00actor"
    # Straight onto the broker, as any client of it could: no bus checks these on the way.
    dead_before = await runtime.broker.queue_depth(topology.dead_letters)
    for body in (orjson.dumps(big), orjson.dumps(nul)):
        await runtime.broker.publish(
            topology.events, "agent.offline", OutgoingMessage(body=body, message_id="x")
        )
    bus = runtime.bus("test")
    await bus.start()
    try:
        await bus.publish(offline("gone", event_id=fine))
    finally:
        await bus.stop()

    async with EventStore.from_url(runtime.settings.resolved_database_url) as store:

        async def fine_stored() -> bool:
            return any(e.event_id == fine for e in await store.stream_events("agent-agent-x"))

        await eventually(fine_stored)
        ids = {e.event_id for e in await store.stream_events("agent-agent-x")}
    assert too_large not in ids
    assert with_nul not in ids

    async def both_dead_lettered() -> bool:
        return await runtime.broker.queue_depth(topology.dead_letters) >= dead_before + 2

    await eventually(both_dead_lettered)


async def test_a_reason_published_past_its_bound_is_stored_and_shown_cut(small: Stack) -> None:
    """A client publishing straight to RabbitMQ stores no more than the contract keeps: the
    recorder stores the checked payload, whose reason is cut to MAX_REASON characters."""
    runtime = small.runtime
    event_id = uuid.uuid4()
    long = offline("r", event_id=event_id).model_dump(mode="json")
    long["payload"]["reason"] = "R" * 100_000  # under the message bound, over the reason's
    await runtime.broker.publish(
        runtime.topology.events,
        "agent.offline",
        OutgoingMessage(body=orjson.dumps(long), message_id=str(event_id)),
    )
    async with EventStore.from_url(runtime.settings.resolved_database_url) as store:

        async def stored() -> list[str]:
            return [
                e.payload["reason"]
                for e in await store.stream_events("agent-agent-x")
                if e.event_id == event_id
            ]

        (reason,) = await eventually(stored)
    assert len(reason) <= MAX_REASON
    assert reason.startswith("RRRR")
