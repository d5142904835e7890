"""The recorder's batch writer: concurrent submissions share transactions, keep their order,
a delivery's batch stays in one transaction, all learn of a store that is unavailable, and
a write that fails for one delivery's data fails that delivery alone."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import pytest

from services.recorder.batching import BatchWriter
from shared.errors import StoreRefused, StoreUnavailable
from shared.eventstore import LogEntry
from shared.messages import AgentHeartbeat, Envelope, Payload, TypedEnvelope


def heartbeat(n: int) -> TypedEnvelope[Payload]:
    return Envelope.wrap(
        AgentHeartbeat(agent_id=f"a{n}", busy=False),
        stream_id="agent-a",
        correlation_id=uuid.uuid4(),
    ).read()


class Store:
    def __init__(
        self, *, fail: bool = False, refuse: str | None = None, down_after: int | None = None
    ) -> None:
        self.batches: list[list[str]] = []
        self.seen: set[uuid.UUID] = set()
        self.fail = fail
        # The agent whose event the database cannot hold: any transaction holding it fails.
        self.refuse = refuse
        # Writes after which the database goes down.
        self.down_after = down_after

    async def append_entries(self, entries: Sequence[LogEntry]) -> list[bool]:
        await asyncio.sleep(0)  # a database round trip
        if self.down_after is not None and len(self.batches) >= self.down_after:
            self.fail = True
        if self.fail:
            raise StoreUnavailable("database down")
        if any(item.payload["agent_id"] == self.refuse for item in entries):
            raise StoreRefused(f"value out of range in {self.refuse}'s event")
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


async def test_one_delivery_the_store_refuses_fails_alone_and_the_rest_are_stored_in_order() -> (
    None
):
    store = Store(refuse="a3")
    writer = BatchWriter(store.append_entries)
    results = await asyncio.gather(
        *(writer.submit([e]) for e in map(heartbeat, range(7))), return_exceptions=True
    )
    assert isinstance(results[3], StoreRefused)
    assert results[:3] + results[4:] == [[True]] * 6
    # The shared transaction failed, then each delivery went alone, in order.
    assert [a for batch in store.batches for a in batch] == ["a0", "a1", "a2", "a4", "a5", "a6"]
    assert all(len(batch) == 1 for batch in store.batches)
    # The writer goes on sharing transactions afterwards.
    assert await asyncio.gather(*(writer.submit([heartbeat(n)]) for n in (7, 8))) == [[True]] * 2
    assert store.batches[-1] == ["a7", "a8"]


async def test_a_delivery_refused_alone_takes_its_own_batch_but_no_other_delivery() -> None:
    store = Store(refuse="a2")
    writer = BatchWriter(store.append_entries)
    first, poisoned, last = (
        [heartbeat(0), heartbeat(1)],
        [heartbeat(2), heartbeat(3)],
        [heartbeat(4)],
    )
    results = await asyncio.gather(
        *(writer.submit(d) for d in (first, poisoned, last)), return_exceptions=True
    )
    assert results[0] == [True, True]
    assert results[2] == [True]
    assert isinstance(results[1], StoreRefused)  # a delivery is acknowledged as one


async def test_the_store_going_down_while_deliveries_go_alone_fails_only_those_not_stored() -> None:
    # The shared write and the first lone write succeed or fail as the database does: the
    # refused one fails, then the database goes down before the rest are stored.
    store = Store(refuse="a0", down_after=1)
    writer = BatchWriter(store.append_entries)
    results = await asyncio.gather(
        *(writer.submit([e]) for e in map(heartbeat, range(4))), return_exceptions=True
    )
    assert isinstance(results[0], StoreRefused)
    assert results[1] == [True]
    assert all(isinstance(r, StoreUnavailable) for r in results[2:])
