"""What the bus does with a delivery it does not simply acknowledge, by the one policy
(``policy``): it tells the service's dead-letter hook, says so in the log, and settles one
event of a batch on its own.

The adapter settles the delivery itself by the settlement the consumer returns (``broker``);
an event of a batch settled apart from its batch is sent here as the adapter would send a
whole message: to the queue's tail as its next attempt, or to the dead-letter exchange."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass

from shared.errors import InvalidMessage
from shared.messages import Envelope, decode
from shared.messaging.broker import (
    STREAM_HEADER,
    Broker,
    Delivery,
    Outcome,
    OutgoingMessage,
    Settlement,
    dead_letter_headers,
    retry_headers,
)
from shared.messaging.policy import settlement_for, settlement_for_interruption
from shared.messaging.reading import Refused

__all__ = ["DeadLetterHook", "Settling"]

log = logging.getLogger(__name__)

# Told when a readable message is about to be dead-lettered, with the reason, so the service
# can record the failure (e.g. fail the evaluation) instead of leaving it half-done.
DeadLetterHook = Callable[[Envelope, str], Awaitable[None]]


@dataclass(frozen=True, eq=False)
class Settling:
    """The settlements of one service's consumers (``service`` names it in the log), whose
    messages are tried ``max_attempts`` times at most; ``dead_letter_exchange`` takes the
    events of a batch dead-lettered alone."""

    broker: Broker
    _: KW_ONLY
    service: str
    max_attempts: int
    dead_letter_exchange: str

    def invalid(self, delivery: Delivery, error: InvalidMessage, *, what: str) -> Settlement:
        """A delivery whose ``what`` (message, batch) does not read: dead-lettered."""
        log.warning("dead-lettering an invalid %s on %r: %s", what, delivery.routing_key, error)
        return settlement_for(error, attempt=delivery.attempt, max_attempts=self.max_attempts)

    async def interrupted(
        self, delivery: Delivery, on_dead_letter: DeadLetterHook | None
    ) -> Settlement:
        """A delivery handed out before, to a consumer that went away without settling it."""
        settlement = settlement_for_interruption(
            attempt=delivery.attempt, max_attempts=self.max_attempts
        )
        if settlement.outcome is Outcome.RETRY:
            log.warning("%s: %s; trying again", self.service, settlement.reason)
        elif on_dead_letter is not None:
            try:
                await on_dead_letter(decode(delivery.body), settlement.reason)
            except Exception as exc:  # unreadable, or the hook failed: the DLQ keeps it
                log.warning("%s: recording a dead letter failed: %s", self.service, exc)
        return settlement

    async def not_handled(
        self,
        envelope: Envelope,
        settlement: Settlement,
        delivery: Delivery,
        on_dead_letter: DeadLetterHook | None,
    ) -> None:
        """Tell the dead-letter hook and the log of an event that was not acknowledged."""
        if settlement.outcome is Outcome.DEAD_LETTER and on_dead_letter is not None:
            try:
                await on_dead_letter(envelope, settlement.reason)
            except Exception as exc:  # the dead-letter queue still keeps the message
                log.warning("%s: recording a dead letter failed: %s", self.service, exc)
        if settlement.outcome is not Outcome.ACK:
            log.warning(
                "%s: %s %s on %r: %s",
                self.service,
                settlement.outcome.value,
                envelope.type,
                delivery.routing_key,
                settlement.reason,
            )

    def not_handled_together(self, delivery: Delivery, count: int, settlement: Settlement) -> None:
        """Tell the log of ``count`` events of one delivery that were not acknowledged."""
        log.warning(
            "%s: %s %d event(s) on %r: %s",
            self.service,
            settlement.outcome.value,
            count,
            delivery.routing_key,
            settlement.reason,
        )

    async def refused(self, delivery: Delivery, queue: str, refused: Sequence[Refused]) -> None:
        """Dead-letter, each alone, the events of a batch that did not read."""
        for body, envelope, settlement in refused:
            log.warning("%s: dead-lettering %s", self.service, settlement.reason)
            await self.part(delivery, queue, body, envelope, settlement)

    async def part(
        self,
        delivery: Delivery,
        queue: str,
        body: bytes,
        envelope: Envelope | None,
        settlement: Settlement,
    ) -> None:
        """Send one event of a batch on alone, as the adapter would a whole message: to the
        queue's tail as its next attempt (RETRY), or to the dead-letter exchange with the
        reason. The batch is acknowledged only after this returns (the broker confirmed the
        copy), so a crash in between duplicates the event rather than losing it."""
        headers: dict[str, str] = {}
        if envelope is not None:
            headers[STREAM_HEADER] = envelope.stream_id
        message_id = str(envelope.event_id) if envelope is not None else str(uuid.uuid4())
        correlation_id = str(envelope.correlation_id) if envelope is not None else None
        if settlement.outcome is Outcome.RETRY and queue:
            headers.update(retry_headers(delivery))
            target, key = "", queue
        else:  # dead letters; and a retry on a queue without a name to come back to
            headers.update(dead_letter_headers(settlement.reason, queue))
            target, key = self.dead_letter_exchange, delivery.routing_key
        await self.broker.publish(
            target,
            key,
            OutgoingMessage(
                body=body, message_id=message_id, headers=headers, correlation_id=correlation_id
            ),
        )
