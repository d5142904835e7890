"""Acknowledgements of one AMQP channel, coalesced.

Each acknowledgement is a frame written to the socket, and for a consumer that settles many
small messages at once (the recorder acknowledges every delivery of a transaction when it
commits) writing them was about an eighth of its CPU for single-event messages. Deliveries
acknowledged in the same turn of the event loop that are the channel's oldest outstanding ones
go as one ``basic.ack`` with ``multiple`` set, which the broker reads as "every delivery up to
this one".

A multiple acknowledgement must never cover a delivery still in hand (it would be taken off
the queue unprocessed, and lost if the process then died): one acknowledged behind an older
delivery that is not settled yet is acknowledged on its own, at once, as before.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Coroutine
from typing import Any, Protocol

__all__ = ["Acknowledgeable", "Acknowledgements"]


class Acknowledgeable(Protocol):
    """A delivery as aio-pika hands it over: its tag on its channel, and its ``ack``."""

    @property
    def delivery_tag(self) -> int | None: ...

    async def ack(self, multiple: bool = False) -> None: ...


class Acknowledgements:
    """The acknowledgements owed on one channel (delivery tags are the channel's own)."""

    def __init__(self) -> None:
        # Delivered here and not yet known settled, oldest first.
        self._outstanding: list[int] = []
        # Settled without an acknowledgement still owed: requeued, or acknowledged alone.
        self._done: set[int] = set()
        self._owed: dict[int, tuple[Acknowledgeable, asyncio.Future[None]]] = {}
        self._flushing = False

    def delivered(self, message: Acknowledgeable) -> None:
        """``message`` came in on this channel: later deliveries' multiple acknowledgements
        stop short of it until it is settled."""
        if message.delivery_tag is not None:
            heapq.heappush(self._outstanding, message.delivery_tag)

    def settled(self, message: Acknowledgeable) -> None:
        """``message`` was settled otherwise (rejected, requeued), its frame already written."""
        if message.delivery_tag is not None:
            self._done.add(message.delivery_tag)
            self._flush_soon()

    async def ack(self, message: Acknowledgeable) -> None:
        """Acknowledge ``message``, with others settled in this turn of the loop where it can;
        an error writing the frame is raised here as ``message.ack()`` would raise it."""
        tag = message.delivery_tag
        if tag is None:
            await message.ack()
            return
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._owed[tag] = (message, written)
        self._flush_soon()
        await written

    def _flush_soon(self) -> None:
        if not self._flushing:
            self._flushing = True
            # After every settlement this turn of the loop makes: they go out together.
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        last: Acknowledgeable | None = None
        covered: list[asyncio.Future[None]] = []
        while self._outstanding and (
            (oldest := self._outstanding[0]) in self._owed or oldest in self._done
        ):
            heapq.heappop(self._outstanding)
            if oldest in self._done:
                self._done.discard(oldest)
                continue
            last, written = self._owed.pop(oldest)
            covered.append(written)
        if last is not None:
            _write(last.ack(multiple=True), covered)
        # Behind a delivery still in hand: each alone, so that none takes that one with it.
        for tag, (message, written) in self._owed.items():
            self._done.add(tag)
            _write(message.ack(), [written])
        self._owed.clear()


def _write(acknowledging: Coroutine[Any, Any, None], waiting: list[asyncio.Future[None]]) -> None:
    """Write one acknowledgement frame; each settlement it covers learns how that went."""
    sent = asyncio.ensure_future(acknowledging)

    def tell(done: asyncio.Future[None]) -> None:
        error = None if done.cancelled() else done.exception()
        for written in waiting:
            if written.done():
                continue
            if done.cancelled():
                written.cancel()
            elif error is not None:
                written.set_exception(error)
            else:
                written.set_result(None)

    sent.add_done_callback(tell)
