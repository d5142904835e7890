"""Request/reply over the jobs exchange: a request waits, up to its timeout, for the reply
whose causation names it, on the one reply queue of its bus (declared when first needed)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import KW_ONLY, dataclass, field
from typing import TypeVar

from shared.errors import InvalidMessage, RequestTimeout
from shared.messages import Envelope, Payload, Topology
from shared.messaging.broker import Broker, Delivery, Outcome, Settlement
from shared.messaging.publishing import Publisher
from shared.messaging.reading import read_one

__all__ = ["Requests"]

log = logging.getLogger(__name__)

P = TypeVar("P", bound=Payload)


@dataclass(eq=False)
class Requests:
    broker: Broker
    publisher: Publisher
    _: KW_ONLY
    topology: Topology
    max_message_bytes: int
    _reply_queue: str | None = field(default=None, init=False)
    _reply_lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    # The requests waiting for their reply, by their event id.
    _pending: dict[str, asyncio.Future[Envelope]] = field(default_factory=dict, init=False)

    async def ask(
        self,
        routing_key: str,
        envelope: Envelope,
        answer: type[P],
        *,
        timeout: float,
        max_bytes: int | None = None,
    ) -> P:
        """``request``, with the reply opened as ``answer`` (an ``InvalidMessage`` if it is
        not one)."""
        reply = await self.request(routing_key, envelope, timeout=timeout, max_bytes=max_bytes)
        return reply.open(answer)

    async def request(
        self,
        routing_key: str,
        envelope: Envelope,
        *,
        timeout: float,
        max_bytes: int | None = None,
    ) -> Envelope:
        """Send ``envelope`` on the jobs exchange and wait for the reply."""
        reply_queue = await self._ensure_reply_queue()
        future: asyncio.Future[Envelope] = asyncio.get_running_loop().create_future()
        self._pending[str(envelope.event_id)] = future
        try:
            await self.publisher.publish(
                envelope,
                exchange=self.topology.jobs,
                routing_key=routing_key,
                reply_to=reply_queue,
                persistent=False,
                max_bytes=max_bytes,
            )
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise RequestTimeout(
                f"no reply to {envelope.type!r} on {routing_key!r} within {timeout:g} s; "
                "is the service that answers it running?"
            ) from None
        finally:
            self._pending.pop(str(envelope.event_id), None)

    def cancel(self) -> None:
        """Give up every request still waiting for its reply (the bus is stopping)."""
        for future in self._pending.values():
            future.cancel()

    async def _ensure_reply_queue(self) -> str:
        async with self._reply_lock:
            if self._reply_queue is None:
                self._reply_queue = await self.broker.declare_reply_queue(self._on_reply)
            return self._reply_queue

    async def _on_reply(self, delivery: Delivery) -> Settlement:
        try:
            envelope = read_one(delivery.body, self.max_message_bytes)
        except InvalidMessage as exc:
            log.warning("dropping an unreadable reply: %s", exc)
            return Settlement(Outcome.ACK)
        future = self._pending.get(str(envelope.causation_id))
        if future is not None and not future.done():
            future.set_result(envelope)
        return Settlement(Outcome.ACK)
