"""Group concurrently delivered events into one store transaction.

Deliveries reach the recorder concurrently (up to the prefetch) and in order, each holding
one event or a batch of them; each delivery's handler submits its events here and waits for
the transaction that carries them to commit, and only then is the message acknowledged. One
transaction for many deliveries instead of one per event is what lets one recorder keep up
with thousands of events a second.

An event that arrives after a quiet spell is held up to ``linger_s`` before its transaction
starts, so that the events produced with it share that transaction (an evaluation's
requested, scheduled and started come milliseconds apart). While events flow, nothing
lingers: the next transaction starts as soon as the last one ends.

A transaction that fails for any reason but the store being unavailable is tried again one
delivery at a time, in order: only the delivery at fault fails (dead-lettered at once where
the store refused its data, ``StoreRefused``), and every other is stored. Without that, one
event published by anyone on the broker takes every event that shared its transaction, other
users' evaluations among them, to the dead-letter queue with it (issue 42).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from shared.errors import TransientError
from shared.eventstore import LogEntry, log_entry
from shared.messages import Payload, TypedEnvelope

__all__ = ["BatchWriter"]


class Write(Protocol):
    """``EventStore.append_entries``: events ready for the log, stored flags back."""

    def __call__(self, entries: Sequence[LogEntry]) -> Awaitable[list[bool]]: ...


@dataclass(slots=True)
class _Submission:
    entries: list[LogEntry]
    stored: asyncio.Future[list[bool]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class BatchWriter:
    def __init__(self, write: Write, *, max_batch: int = 2000, linger_s: float = 0.0) -> None:
        self._write = write
        self._linger_s = linger_s
        # When the last write ended: a write less than ``linger_s`` ago means events are
        # flowing, and waiting would only slow the flow down.
        self._last_write_ended = -float("inf")
        # Events per transaction, give or take one delivery's batch (never split: its events
        # are acknowledged together). Each transaction costs its round trips and statements
        # whatever its size: 2 000 stored a backlog about a fifth faster than 500 (issue 24).
        self._max_batch = max_batch
        self._pending: list[_Submission] = []
        self._flusher: asyncio.Task[None] | None = None

    async def submit(self, events: Sequence[TypedEnvelope[Payload]]) -> list[bool]:
        """Store ``events`` in order; for each, True if it was new, False if it was already
        stored."""
        # Each made ready for the log here, as it arrives: while a transaction waits on the
        # database, the loop prepares the next one's events instead of idling.
        submission = _Submission([log_entry(event) for event in events])
        self._pending.append(submission)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        return await submission.stored

    async def close(self) -> None:
        """Wait for the write in progress, so the store is not closed under it."""
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)

    def _take(self) -> list[_Submission]:
        taken, events = 0, 0
        while taken < len(self._pending) and (taken == 0 or events < self._max_batch):
            events += len(self._pending[taken].entries)
            taken += 1
        batch = self._pending[:taken]
        del self._pending[:taken]
        return batch

    async def _flush(self) -> None:
        try:
            # Yield at least once, so deliveries started in the same loop turn join the first
            # batch; after a quiet spell, wait for the events produced with this one.
            quiet = time.monotonic() - self._last_write_ended >= self._linger_s
            await asyncio.sleep(self._linger_s if quiet else 0)
            while self._pending:
                batch = self._take()
                try:
                    await self._store_together(batch)
                except TransientError as exc:
                    # Fail what is waiting too: writing later events before the failed ones
                    # are tried again would put a stream out of order.
                    batch.extend(self._pending)
                    self._pending.clear()
                    for submission in batch:
                        if not submission.stored.done():
                            submission.stored.set_exception(exc)
                    return
        finally:
            self._flusher = None

    async def _store_together(self, batch: list[_Submission]) -> None:
        """Store ``batch`` in one transaction, or each of its submissions in one of its own
        where that fails; raises only when the store is unavailable, with the submissions
        not yet stored left waiting."""
        try:
            stored = await self._written([item for s in batch for item in s.entries])
        except TransientError:
            raise
        except Exception as exc:
            if len(batch) == 1:
                _settle(batch[0], exc)
                return
            for submission in batch:
                try:
                    flags = await self._written(submission.entries)
                except TransientError:
                    raise  # those stored are settled; the rest fail with what is waiting
                except Exception as alone:
                    _settle(submission, alone)
                else:
                    _settle(submission, flags)
            return
        start = 0
        for submission in batch:
            end = start + len(submission.entries)
            _settle(submission, stored[start:end])
            start = end

    async def _written(self, entries: list[LogEntry]) -> list[bool]:
        try:
            return await self._write(entries)
        finally:
            self._last_write_ended = time.monotonic()


def _settle(submission: _Submission, outcome: list[bool] | BaseException) -> None:
    if submission.stored.done():
        return
    if isinstance(outcome, BaseException):
        submission.stored.set_exception(outcome)
    else:
        submission.stored.set_result(outcome)
