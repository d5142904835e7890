"""The subscriptions of one bus: which queues it consumes, with which consumer, and whether
each is paused while a dependency it needs is unavailable (``pause``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field

from shared.messaging.broker import Binding, Broker, Consumer, Subscription
from shared.messaging.consumers import AllTogether, Consuming, EachEvent
from shared.messaging.handling import BatchHandler, Handler
from shared.messaging.pause import Backoff, Pause
from shared.messaging.settling import DeadLetterHook

__all__ = ["Subscriptions"]


@dataclass(eq=False)
class Subscriptions:
    broker: Broker
    consuming: Consuming
    _: KW_ONLY
    dead_letter_exchange: str
    prefetch: int
    max_message_bytes: int
    pause_initial_s: float
    pause_cap_s: float
    _subscriptions: list[Subscription] = field(default_factory=list, init=False)
    # One per subscription: consumption paused while a dependency is unavailable.
    _pauses: list[Pause] = field(default_factory=list, init=False)

    @property
    def paused(self) -> dict[str, str]:
        """The subscriptions paused now, waiting for a dependency: queue -> why."""
        return {pause.name: pause.reason for pause in self._pauses if pause.reason is not None}

    async def subscribe(
        self,
        queue: str,
        bindings: Sequence[Binding],
        handler: Handler,
        *,
        durable: bool = True,
        prefetch: int | None = None,
        on_dead_letter: DeadLetterHook | None = None,
        count_redeliveries: bool = False,
        max_message_bytes: int | None = None,
    ) -> Subscription:
        """Consume ``queue`` with ``handler``. With ``count_redeliveries``, a message whose
        consumer went away without settling it (a worker killed mid-job) counts as an attempt:
        it goes back to the queue's tail as the next attempt, and past the last one it is
        dead-lettered (``on_dead_letter`` told why) rather than handed out forever. A message
        over ``max_message_bytes`` (default the bus's) is dead-lettered unread."""
        consumer = EachEvent(
            self.consuming,
            queue,
            self._pause(queue or f"{self.consuming.service}.exclusive"),
            max_message_bytes or self.max_message_bytes,
            handler,
            on_dead_letter=on_dead_letter,
            count_redeliveries=count_redeliveries,
        )
        return await self._consume(queue, bindings, consumer, prefetch=prefetch, durable=durable)

    async def handle_together(
        self,
        queue: str,
        bindings: Sequence[Binding],
        handler: BatchHandler,
        *,
        prefetch: int | None = None,
        max_message_bytes: int | None = None,
    ) -> Subscription:
        """Consume ``queue`` handing ``handler`` each delivery's events at once: all of a
        batch message's in one call and one CONSUMER span, a single event as a batch of one.
        Each event comes with its payload read as the class its type names: an unknown type
        or a payload its contract refuses is dead-lettered, alone if it came in a batch, and
        the others are still handled. What the handler raises settles the whole delivery by
        the one policy."""
        consumer = AllTogether(
            self.consuming,
            queue,
            self._pause(queue),
            max_message_bytes or self.max_message_bytes,
            handler,
        )
        return await self._consume(queue, bindings, consumer, prefetch=prefetch)

    async def stop(self) -> None:
        # Together, not one after another: each cancel is bounded by the broker's timeout, and
        # a service with several subscriptions on a broker that does not answer (a link that
        # came back half-open) must still stop within one such bound.
        await asyncio.gather(*(s.cancel() for s in reversed(self._subscriptions)))
        self._subscriptions.clear()
        for pause in self._pauses:
            await pause.close()
        self._pauses.clear()

    def _pause(self, name: str) -> Pause:
        pause = Pause(name, backoff=Backoff(self.pause_initial_s, self.pause_cap_s))
        self._pauses.append(pause)
        return pause

    async def _consume(
        self,
        queue: str,
        bindings: Sequence[Binding],
        consumer: Consumer,
        *,
        prefetch: int | None,
        durable: bool = True,
    ) -> Subscription:
        subscription = await self.broker.consume(
            queue,
            bindings,
            consumer,
            prefetch=prefetch or self.prefetch,
            dead_letter_exchange=self.dead_letter_exchange,
            durable=durable,
        )
        self._subscriptions.append(subscription)
        return subscription
