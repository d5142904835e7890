"""The recorder's batch writer: concurrent submissions share transactions, keep their order,
a delivery's batch stays in one transaction, and all learn of a failed write."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import pytest

from services.recorder.batching import BatchWriter
from shared.errors import StoreUnavailable
from shared.eventstore import LogEntry
from shared.messages import AgentHeartbeat, Envelope, Payload, TypedEnvelope


def heartbeat(n: int) -> TypedEnvelope[Payload]:
    return Envelope.wrap(
        AgentHeartbeat(agent_id=f"a{n}", busy=False),
        stream_id="agent-a",
        correlation_id=uuid.uuid4(),
    ).read()


class Store:
    def __init__(self, *, fail: bool = False) -> None:
        self.batches: list[list[str]] = []
        self.seen: set[uuid.UUID] = set()
        self.fail = fail

    async def append_entries(self, entries: Sequence[LogEntry]) -> list[bool]:
        await asyncio.sleep(0)  # a database round trip
        if self.fail:
            raise StoreUnavailable("database down")
        assert all(item.checked is not None for item in entries)  # the payloads, handed over read
        self.batches.append([item.payload["agent_id"] for item in entries])
        new = [item.envelope.event_id not in self.seen for item in entries]
        self.seen.update(item.envelope.event_id for item in entries)
        return new


async def test_concurrent_submissions_are_written_together_in_submission_order() -> None:
    store = Store()
    writer = BatchWriter(store.append_entries, max_batch=3)
    events = [heartbeat(n) for n in range(7)]
    results = await asyncio.gather(*(writer.submit([e]) for e in events))
    assert results == [[True]] * 7
    assert store.batches == [["a0", "a1", "a2"], ["a3", "a4", "a5"], ["a6"]]


async def test_a_submitted_batch_is_never_split_and_gets_its_own_flags_back() -> None:
    store = Store()
    writer = BatchWriter(store.append_entries, max_batch=3)
    first = [heartbeat(n) for n in range(2)]
    second = [heartbeat(n) for n in range(2, 7)]  # over max_batch on its own
    third = [first[0], heartbeat(7)]  # a redelivered event beside a new one
    results = await asyncio.gather(*(writer.submit(batch) for batch in (first, second, third)))
    assert results == [[True, True], [True] * 5, [False, True]]
    assert store.batches == [["a0", "a1", "a2", "a3", "a4", "a5", "a6"], ["a0", "a7"]]


async def test_a_duplicate_is_reported_as_not_new() -> None:
    writer = BatchWriter(Store().append_entries)
    event = heartbeat(1)
    assert await writer.submit([event]) == [True]
    assert await writer.submit([event]) == [False]


async def test_a_failed_write_fails_every_waiting_submission() -> None:
    writer = BatchWriter(Store(fail=True).append_entries, max_batch=2)
    results = await asyncio.gather(
        *(writer.submit([e]) for e in map(heartbeat, range(5))),
        return_exceptions=True,
    )
    assert all(isinstance(r, StoreUnavailable) for r in results)


async def test_the_writer_recovers_after_a_failure() -> None:
    store = Store(fail=True)
    writer = BatchWriter(store.append_entries)
    with pytest.raises(StoreUnavailable):
        await writer.submit([heartbeat(1)])
    store.fail = False
    assert await writer.submit([heartbeat(2)]) == [True]


async def test_after_a_quiet_spell_events_arriving_together_share_a_transaction() -> None:
    store = Store()
    writer = BatchWriter(store.append_entries, linger_s=0.05)

    async def later(n: int) -> list[bool]:
        await asyncio.sleep(0.01 * n)  # produced a few milliseconds apart
        return await writer.submit([heartbeat(n)])

    assert await asyncio.gather(*(later(n) for n in range(3))) == [[True]] * 3
    assert store.batches == [["a0", "a1", "a2"]]


async def test_while_events_flow_the_next_write_does_not_linger() -> None:
    store = Store()
    writer = BatchWriter(store.append_entries, linger_s=1.0)
    assert await writer.submit([heartbeat(1)]) == [True]  # lingers: the start was quiet
    # Right after a write, events are flowing: the next is written at once, not in 1 s.
    async with asyncio.timeout(0.5):
        assert await writer.submit([heartbeat(2)]) == [True]
    assert store.batches == [["a1"], ["a2"]]
