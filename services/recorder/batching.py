"""Group concurrently delivered events into one store transaction.

Deliveries reach the recorder concurrently (up to the prefetch) and in order; each one's
handler submits its event here and waits for the batch that carries it to commit, and only
then is the message acknowledged. One transaction per batch instead of per event is what
lets one recorder keep up with thousands of events a second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Protocol

from shared.messages import Envelope, Payload

__all__ = ["BatchWriter"]


class Write(Protocol):
    """``EventStore.append``: envelopes and their checked payloads, stored flags back."""

    def __call__(
        self, envelopes: Sequence[Envelope], *, checked: Sequence[Payload] | None = None
    ) -> Awaitable[list[bool]]: ...


class BatchWriter:
    def __init__(self, write: Write, *, max_batch: int = 500) -> None:
        self._write = write
        self._max_batch = max_batch
        self._pending: list[tuple[Envelope, Payload, asyncio.Future[bool]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def submit(self, envelope: Envelope, payload: Payload) -> bool:
        """Store ``envelope``, whose payload read is ``payload``; True if it was new, False if
        it was already stored."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((envelope, payload, future))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        return await future

    async def close(self) -> None:
        """Wait for the write in progress, so the store is not closed under it."""
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)

    async def _flush(self) -> None:
        try:
            # Yield once so deliveries started in the same loop turn join the first batch.
            await asyncio.sleep(0)
            while self._pending:
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                try:
                    stored = await self._write(
                        [envelope for envelope, _, _ in batch],
                        checked=[payload for _, payload, _ in batch],
                    )
                except Exception as exc:
                    # Fail what is waiting too: writing later events before the failed ones
                    # are retried would put a stream out of order.
                    batch.extend(self._pending)
                    self._pending.clear()
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    return
                for (_, _, future), new in zip(batch, stored, strict=True):
                    if not future.done():
                        future.set_result(new)
        finally:
            self._flusher = None
