"""The consumers a bus hands the broker, one per subscription: each reads a delivery, runs
its handler in turn (while its subscription is paused, a delivery waits for the ones before
it), and returns the settlement (``handling``, ``settling``).

``EachEvent`` serves a handler of one event at a time, ``AllTogether`` one that takes every
event of a delivery at once. A consumer is called by the adapter for each delivery, in a task
of the delivery's own, so ``current_delivery`` is the one its handler was called for."""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from shared.errors import InvalidMessage
from shared.messages import Unreadable, encode, is_batch, read_typed
from shared.messaging.broker import Delivery, Outcome, Settlement
from shared.messaging.handling import BatchHandler, Handler, Handling
from shared.messaging.pause import Pause
from shared.messaging.policy import settlement_for
from shared.messaging.reading import Refused, check_size, read_batch, read_each, read_one
from shared.messaging.settling import DeadLetterHook, Settling

__all__ = ["AllTogether", "Consuming", "EachEvent", "current_delivery"]

log = logging.getLogger(__name__)

_delivery: contextvars.ContextVar[Delivery] = contextvars.ContextVar("dlscope_delivery")


def current_delivery() -> Delivery:
    """The delivery the running handler was called for (its attempt, for one)."""
    return _delivery.get()


@dataclass(frozen=True)
class Consuming:
    """What the consumers of one bus share: how they run a handler and settle a delivery,
    and the service they consume for (the log names it)."""

    handling: Handling
    settling: Settling
    service: str


@dataclass(frozen=True, eq=False)
class _Consumer:
    """A consumer of ``queue``, paused by ``pause``, reading no message over ``max_bytes``."""

    consuming: Consuming
    queue: str
    pause: Pause
    max_bytes: int

    async def _in_turn(
        self, attempt: Callable[[], Awaitable[Settlement]], delivery: Delivery
    ) -> Settlement:
        """``attempt`` once its turn comes, and again while a dependency is unavailable."""
        pause = self.pause
        # While the subscription is paused, or earlier deliveries are still held, this one
        # waits its turn: it must not overtake them.
        ticket = pause.ticket()
        try:
            if pause.blocking and not await pause.hold(ticket, timeout=pause.max_hold):
                return Settlement(Outcome.REQUEUE, f"held {pause.max_hold:g} s: {pause.reason}")
            while True:
                settlement = await attempt()
                if settlement.outcome is not Outcome.REQUEUE:
                    pause.succeeded()
                    return settlement
                # A dependency is unavailable: keep the message, unsettled, and try it again
                # when the pause lets it, with nothing after it overtaking it.
                pause.failed(settlement.reason)
                pause.finished(ticket)
                if not await pause.hold(ticket, timeout=pause.max_hold):
                    log.warning(
                        "%s: handing a message on %r back to the broker after holding it %g s",
                        self.consuming.service,
                        delivery.routing_key,
                        pause.max_hold,
                    )
                    return settlement
        finally:
            pause.finished(ticket)


@dataclass(frozen=True, eq=False)
class EachEvent(_Consumer):
    """The consumer of ``handler``, which takes one event at a time (``Bus.subscribe``): a
    batch message's events are handled in order, each settled on its own. With
    ``count_redeliveries``, a redelivery counts as an attempt (``policy``)."""

    handler: Handler
    on_dead_letter: DeadLetterHook | None = None
    count_redeliveries: bool = False

    async def __call__(self, delivery: Delivery) -> Settlement:
        if self.count_redeliveries and delivery.redelivered:
            return await self.consuming.settling.interrupted(delivery, self.on_dead_letter)
        if is_batch(delivery.body):
            return await self._batch(delivery)
        return await self._one(delivery)

    async def _one(self, delivery: Delivery) -> Settlement:
        _delivery.set(delivery)  # this delivery's task has its own context
        handling, settling = self.consuming.handling, self.consuming.settling
        try:
            envelope = read_one(delivery.body, self.max_bytes)
        except InvalidMessage as exc:
            return settling.invalid(delivery, exc, what="message")
        settlement = await self._in_turn(
            lambda: handling.one(delivery, envelope, self.handler), delivery
        )
        if settlement.outcome is not Outcome.REQUEUE:
            await settling.not_handled(envelope, settlement, delivery, self.on_dead_letter)
        return settlement

    async def _batch(self, delivery: Delivery) -> Settlement:
        """A batch for a handler of one event at a time: each event in order, settled on its
        own. One that fails goes on alone (retried as a single message at the queue's tail,
        or dead-lettered), the others are not held back by it. Should a dependency be
        unavailable past the pause's hold, the whole batch goes back to the broker: the
        events handled before it will be handled again, as any redelivery is."""
        _delivery.set(delivery)
        handling, settling = self.consuming.handling, self.consuming.settling
        try:
            items = read_batch(delivery.body, self.max_bytes)
        except InvalidMessage as exc:
            return settling.invalid(delivery, exc, what="batch")
        for item in items:
            if isinstance(item, Unreadable):
                settlement = settlement_for(item.error, attempt=delivery.attempt, max_attempts=1)
                await settling.part(delivery, self.queue, item.body, None, settlement)
                continue
            envelope = item
            settlement = await self._in_turn(
                functools.partial(handling.one, delivery, envelope, self.handler), delivery
            )
            if settlement.outcome is Outcome.REQUEUE:
                return settlement
            if settlement.outcome is Outcome.ACK:
                continue
            await settling.not_handled(envelope, settlement, delivery, self.on_dead_letter)
            await settling.part(delivery, self.queue, encode(envelope), envelope, settlement)
        return Settlement(Outcome.ACK)


@dataclass(frozen=True, eq=False)
class AllTogether(_Consumer):
    """The consumer of ``handler``, which takes every event of a delivery at once
    (``Bus.handle_together``): all of a batch message's in one call, a single event as a
    batch of one, each with its payload read as the class its type names. One that does not
    read is dead-lettered, alone if it came in a batch, and the others are still handled."""

    handler: BatchHandler

    async def __call__(self, delivery: Delivery) -> Settlement:
        _delivery.set(delivery)
        handling, settling = self.consuming.handling, self.consuming.settling
        refused: list[Refused] = []
        try:
            check_size(delivery.body, self.max_bytes)
            # Read at once where every event reads; one by one only to say which does not.
            events = read_typed(delivery.body)
            if events is None:
                events, refused = read_each(delivery)
        except InvalidMessage as exc:
            return settling.invalid(delivery, exc, what="message")
        # The good events first, with no wait before them, so they reach the handler in
        # delivery order (the recorder appends each stream in that order); the refused ones
        # after, and only once the batch is done with (a batch tried again refuses them again).
        settlement = (
            await self._in_turn(lambda: handling.together(delivery, events, self.handler), delivery)
            if events
            else Settlement(Outcome.ACK)
        )
        if settlement.outcome is not Outcome.ACK:
            settling.not_handled_together(delivery, len(events), settlement)
        elif refused:
            await settling.refused(delivery, self.queue, refused)
        return settlement
