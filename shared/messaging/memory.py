"""The in-process broker adapter for the embedded mode (``memory://``).

It follows the port's contract and RabbitMQ's routing exactly; it is never trusted alone:
the same contract suite runs against it and the real broker.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from shared.errors import ConfigurationError
from shared.messaging.broker import (
    ATTEMPT_HEADER,
    Binding,
    Consumer,
    Delivery,
    Outcome,
    OutgoingMessage,
    Settlement,
    dead_letter_headers,
    undeclared_exchange,
)
from shared.messaging.topics import topic_matches

__all__ = ["MemoryBroker"]


@dataclass
class _Queue:
    name: str
    durable: bool
    dead_letter_exchange: str | None
    # (position, delivery): the position, handed out on enqueue, is where a message handed
    # back unsettled goes again, as RabbitMQ requeues to the original place.
    messages: deque[tuple[int, Delivery]] = field(default_factory=deque)
    ready: asyncio.Condition = field(default_factory=asyncio.Condition)
    in_flight: int = 0
    consumers: int = 0


class _MemorySubscription:
    def __init__(self, broker: MemoryBroker, queue: _Queue, task: asyncio.Task[None]) -> None:
        self._broker = broker
        self._queue = queue
        self._task = task

    async def cancel(self) -> None:
        if self._task.done():
            return
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._queue.consumers -= 1
        if self._broker._quiet():
            self._broker._idle.set()
        if not self._queue.durable:
            self._broker._queues.pop(self._queue.name, None)


class MemoryBroker:
    def __init__(self) -> None:
        # exchange -> (pattern, queue); on a consistent-hash exchange the pattern is a weight
        self._exchanges: dict[str, list[tuple[str, str]]] = {}
        # consistent-hash exchange -> the header it hashes on
        self._hash_headers: dict[str, str] = {}
        # source exchange -> (pattern, destination exchange)
        self._exchange_bindings: dict[str, list[tuple[str, str]]] = {}
        self._queues: dict[str, _Queue] = {}
        self._connected = False
        self._names = itertools.count(1)
        self._positions = itertools.count()
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def is_connected(self) -> bool:
        return self._connected

    async def connect(self) -> None:
        self._connected = True

    async def close(self) -> None:
        self._connected = False

    async def declare_exchanges(
        self, names: Sequence[str], *, dead_letter_exchange: str, dead_letter_queue: str
    ) -> None:
        for name in (*names, dead_letter_exchange):
            self._exchanges.setdefault(name, [])
        self._declare_queue(dead_letter_queue, durable=True, dead_letter_exchange=None)
        self._bind(dead_letter_queue, Binding(dead_letter_exchange, "#"))

    async def declare_partitions(
        self,
        exchange: str,
        *,
        source: str,
        queues: Sequence[str],
        hash_header: str,
        dead_letter_exchange: str,
    ) -> None:
        self._require_connection()
        if source not in self._exchanges:
            raise undeclared_exchange(source)
        self._exchanges.setdefault(exchange, [])
        self._hash_headers[exchange] = hash_header
        bindings = self._exchange_bindings.setdefault(source, [])
        if ("#", exchange) not in bindings:
            bindings.append(("#", exchange))
        for queue in queues:
            self._declare_queue(queue, durable=True, dead_letter_exchange=dead_letter_exchange)
            self._bind(queue, Binding(exchange, "1"))

    async def declare_queue(
        self, queue: str, bindings: Sequence[Binding], *, dead_letter_exchange: str
    ) -> None:
        self._require_connection()
        for binding in bindings:
            if binding.exchange not in self._exchanges:
                raise undeclared_exchange(binding.exchange)
        self._declare_queue(queue, durable=True, dead_letter_exchange=dead_letter_exchange)
        for binding in bindings:
            self._bind(queue, binding)

    async def publish(self, exchange: str, routing_key: str, message: OutgoingMessage) -> None:
        self._require_connection()
        delivery = Delivery(
            body=message.body,
            exchange=exchange,
            routing_key=routing_key,
            headers=dict(message.headers),
            message_id=message.message_id,
            correlation_id=message.correlation_id,
            reply_to=message.reply_to,
            attempt=_attempt(message.headers),
        )
        if exchange == "":
            queue = self._queues.get(routing_key)
            targets = [queue] if queue else []
        else:
            if exchange not in self._exchanges:
                raise undeclared_exchange(exchange)
            names = self._route(exchange, routing_key, message.headers)
            targets = [self._queues[n] for n in sorted(names) if n in self._queues]
        for queue in targets:
            await self._enqueue(queue, delivery)

    async def consume(
        self,
        queue: str,
        bindings: Sequence[Binding],
        consumer: Consumer,
        *,
        prefetch: int,
        dead_letter_exchange: str,
        durable: bool = True,
    ) -> _MemorySubscription:
        self._require_connection()
        declared = self._declare_queue(
            queue, durable=durable, dead_letter_exchange=dead_letter_exchange
        )
        for binding in bindings:
            if binding.exchange not in self._exchanges:
                raise undeclared_exchange(binding.exchange)
            self._bind(queue, binding)
        task = asyncio.create_task(
            self._consume(declared, consumer, prefetch), name=f"consume {queue}"
        )
        declared.consumers += 1
        return _MemorySubscription(self, declared, task)

    async def declare_reply_queue(self, consumer: Consumer) -> str:
        name = f"amq.gen-memory-{next(self._names)}"
        await self.consume(name, [], consumer, prefetch=64, dead_letter_exchange="", durable=False)
        return name

    async def queue_depth(self, queue: str) -> int:
        found = self._queues.get(queue)
        return len(found.messages) if found else 0

    async def delete_queue(self, queue: str) -> None:
        self._queues.pop(queue, None)
        for bindings in self._exchanges.values():
            bindings[:] = [(p, q) for p, q in bindings if q != queue]

    async def drained(self) -> None:
        """Wait until every queue someone consumes is empty and no delivery is being handled
        (the embedded mode's way to know that everything caused so far has happened)."""
        while not self._quiet():
            self._idle.clear()
            await self._idle.wait()

    # internals

    def _quiet(self) -> bool:
        # Messages in a queue nobody consumes (the dead letters, a stopped worker's jobs)
        # wait there by design; drained means nothing more will happen by itself.
        return all(
            q.in_flight == 0 and (not q.messages or q.consumers == 0) for q in self._queues.values()
        )

    def _route(self, exchange: str, routing_key: str, headers: Mapping[str, str]) -> set[str]:
        """The queues a message reaches from ``exchange``, through exchange-to-exchange
        bindings too."""
        bindings = self._exchanges[exchange]
        if exchange in self._hash_headers:
            # As RabbitMQ: a missing header is hashed like any value, so all such messages
            # land in one same queue.
            chosen = _partition(headers.get(self._hash_headers[exchange], ""), bindings)
            names = {chosen} if chosen else set()
        else:
            names = {q for pattern, q in bindings if topic_matches(pattern, routing_key)}
        for pattern, destination in self._exchange_bindings.get(exchange, []):
            if topic_matches(pattern, routing_key):
                names |= self._route(destination, routing_key, headers)
        return names

    def _require_connection(self) -> None:
        if not self._connected:
            raise ConfigurationError("the memory broker is not connected")

    def _declare_queue(
        self, name: str, *, durable: bool, dead_letter_exchange: str | None
    ) -> _Queue:
        if name not in self._queues:
            self._queues[name] = _Queue(name, durable, dead_letter_exchange or None)
        return self._queues[name]

    def _bind(self, queue: str, binding: Binding) -> None:
        if binding.exchange in self._hash_headers:
            _weight(binding.pattern)  # refused at once, as RabbitMQ refuses the binding
        bindings = self._exchanges[binding.exchange]
        if (binding.pattern, queue) not in bindings:
            bindings.append((binding.pattern, queue))

    async def _enqueue(self, queue: _Queue, delivery: Delivery) -> None:
        async with queue.ready:
            queue.messages.append((next(self._positions), delivery))
            queue.ready.notify()

    @staticmethod
    def _put_back(queue: _Queue, position: int, delivery: Delivery) -> None:
        """Put an unsettled delivery back at its original place, flagged redelivered."""
        index = next(
            (i for i, (other, _) in enumerate(queue.messages) if other > position),
            len(queue.messages),
        )
        queue.messages.insert(index, (position, replace(delivery, redelivered=True)))

    async def _consume(self, queue: _Queue, consumer: Consumer, prefetch: int) -> None:
        slots = asyncio.Semaphore(prefetch)
        handlers: set[asyncio.Task[None]] = set()
        try:
            while True:
                await slots.acquire()
                async with queue.ready:
                    await queue.ready.wait_for(lambda: bool(queue.messages))
                    position, delivery = queue.messages.popleft()
                    queue.in_flight += 1
                task = asyncio.create_task(self._handle(queue, consumer, position, delivery, slots))
                handlers.add(task)
                task.add_done_callback(handlers.discard)
        finally:
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

    async def _handle(
        self,
        queue: _Queue,
        consumer: Consumer,
        position: int,
        delivery: Delivery,
        slots: asyncio.Semaphore,
    ) -> None:
        settled = False
        try:
            settlement = await consumer(delivery)
            if settlement.outcome is Outcome.REQUEUE:
                async with queue.ready:
                    self._put_back(queue, position, delivery)
                    queue.ready.notify()
            else:
                await self._settle(queue, delivery, settlement)
            settled = True
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a consumer returns its settlement; a crash is transient
            await self._settle(queue, delivery, Settlement(Outcome.RETRY, repr(exc)))
            settled = True
        finally:
            if not settled:  # cancelled mid-delivery: back to its place, as RabbitMQ requeues
                self._put_back(queue, position, delivery)
            queue.in_flight -= 1
            slots.release()
            if self._quiet():
                self._idle.set()

    async def _settle(self, queue: _Queue, delivery: Delivery, settlement: Settlement) -> None:
        if settlement.outcome is Outcome.RETRY:
            headers = {**delivery.headers, ATTEMPT_HEADER: str(delivery.attempt + 1)}
            await self._enqueue(
                queue,
                replace(delivery, headers=headers, attempt=delivery.attempt + 1, redelivered=False),
            )
        elif settlement.outcome is Outcome.DEAD_LETTER and queue.dead_letter_exchange:
            headers = {**delivery.headers, **dead_letter_headers(settlement.reason, queue.name)}
            await self.publish(
                queue.dead_letter_exchange,
                delivery.routing_key,
                OutgoingMessage(
                    body=delivery.body,
                    message_id=delivery.message_id or "",
                    headers={k: str(v) for k, v in headers.items()},
                    correlation_id=delivery.correlation_id,
                ),
            )


def _partition(value: str, bindings: Sequence[tuple[str, str]]) -> str | None:
    """Rendezvous hashing: the same value always picks the same queue while the bindings stay,
    values spread over the queues in proportion to their weights (a weight is extra points,
    as on RabbitMQ's hash ring)."""
    points = [
        (hashlib.blake2b(f"{queue}\0{point}\0{value}".encode(), digest_size=8).digest(), queue)
        for weight, queue in bindings
        for point in range(_weight(weight))
    ]
    return max(points)[1] if points else None


def _weight(pattern: str) -> int:
    try:
        return max(0, int(pattern))
    except ValueError as exc:
        raise ConfigurationError(
            f"a consistent-hash binding's key is its weight, an integer, not {pattern!r}"
        ) from exc


def _attempt(headers: object) -> int:
    value = headers.get(ATTEMPT_HEADER, "1") if isinstance(headers, dict) else "1"
    try:
        return max(1, int(str(value)))
    except ValueError:
        return 1
