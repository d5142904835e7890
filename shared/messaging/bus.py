"""The bus services talk through: typed envelopes over a broker port, traced, with one policy.

Tracing lives here and not in handlers: ``publish`` opens a PRODUCER span and injects its
context into the AMQP headers and the envelope; consuming opens a CONSUMER span that
continues the publisher's trace, and the handler runs inside it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import uuid
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from opentelemetry.trace import SpanKind, Status, StatusCode

from shared.errors import InvalidMessage, MessageTooLarge, RequestTimeout
from shared.messages import (
    MAX_BATCH_EVENTS,
    Envelope,
    EnvelopeFields,
    Payload,
    Topology,
    TypedEnvelope,
    Unreadable,
    decode,
    decode_batch,
    encode,
    encode_batch,
    is_batch,
    read_typed,
)
from shared.messaging.broker import (
    ATTEMPT_HEADER,
    DEAD_LETTERED_FROM_HEADER,
    ORIGIN_EXCHANGE_HEADER,
    ORIGIN_ROUTING_KEY_HEADER,
    REASON_HEADER,
    STREAM_HEADER,
    Binding,
    Broker,
    Delivery,
    Outcome,
    OutgoingMessage,
    Settlement,
    Subscription,
)
from shared.messaging.pause import Backoff, Pause
from shared.messaging.policy import settlement_for
from shared.messaging.routes import Routes
from shared.telemetry import Telemetry, inject, parent_context

__all__ = [
    "BatchHandler",
    "Bus",
    "DeadLetterHook",
    "Handler",
    "current_delivery",
    "paused_consumers",
]

log = logging.getLogger(__name__)

# A handler's returned envelope is sent as the reply when the message asked for one.
Handler = Callable[[Envelope], Awaitable[Envelope | None]]
# Told when a readable message is about to be dead-lettered, with the reason, so the service
# can record the failure (e.g. fail the evaluation) instead of leaving it half-done.
DeadLetterHook = Callable[[Envelope, str], Awaitable[None]]

P = TypeVar("P", bound=Payload)
# Handed every readable event of one delivery at once (``Bus.handle_together``), each with its
# payload as its contract reads it.
BatchHandler = Callable[[Sequence[TypedEnvelope[Payload]]], Awaitable[None]]

_delivery: contextvars.ContextVar[Delivery] = contextvars.ContextVar("dlscope_delivery")

# The buses on each broker, for a process-wide view of paused consumers (the embedded mode
# runs every service's bus on one broker; /readyz reports them all). Weak: a broker's buses
# go with it.
_buses: weakref.WeakKeyDictionary[Broker, weakref.WeakSet[Bus]] = weakref.WeakKeyDictionary()


def paused_consumers(broker: Broker) -> dict[str, str]:
    """Every paused subscription of every bus on ``broker``: ``service:queue`` -> why."""
    paused: dict[str, str] = {}
    for bus in _buses.get(broker, ()):
        paused.update({f"{bus.service}:{queue}": why for queue, why in bus.paused.items()})
    return paused


def current_delivery() -> Delivery:
    """The delivery the running handler was called for (its attempt, for one)."""
    return _delivery.get()


class Bus:
    def __init__(
        self,
        broker: Broker,
        *,
        topology: Topology,
        telemetry: Telemetry,
        service: str,
        max_attempts: int = 3,
        prefetch: int = 16,
        pause_initial_s: float = 0.5,
        pause_cap_s: float = 30.0,
        event_log_partitions: int | None = None,
        max_message_bytes: int = 32 * 1024**2,
    ) -> None:
        self.broker = broker
        # No message above this is sent or read (DLSCOPE_MAX_MESSAGE_BYTES); a subscription
        # may allow more (the registry's registrations carry their files).
        self.max_message_bytes = max_message_bytes
        self._event_log_partitions = event_log_partitions
        self.topology = topology
        self.service = service
        self._tracer = telemetry.tracer
        self._max_attempts = max_attempts
        self._prefetch = prefetch
        self._subscriptions: list[Subscription] = []
        self._reply_queue: str | None = None
        self._reply_lock = asyncio.Lock()
        self._pending: dict[str, asyncio.Future[Envelope]] = {}
        # One per subscription: consumption paused while a dependency is unavailable.
        self._pauses: list[Pause] = []
        self._pause_initial_s = pause_initial_s
        self._pause_cap_s = pause_cap_s
        _buses.setdefault(broker, weakref.WeakSet()).add(self)

    async def start(self) -> None:
        # Several buses may share one broker (the embedded mode); whoever created the broker
        # closes it, after every bus on it has stopped.
        if not self.broker.is_connected:
            await self.broker.connect()
        await self.broker.declare_exchanges(
            [self.topology.events, self.topology.jobs],
            dead_letter_exchange=self.topology.dlx,
            dead_letter_queue=self.topology.dead_letters,
        )
        if self._event_log_partitions is not None:
            await self._declare_event_log(self._event_log_partitions)

    async def _declare_event_log(self, partitions: int) -> None:
        # The recorders' queues are the event log's front door. Whichever service starts
        # first declares them, so an event published before any recorder has started (the
        # registry's built-ins, say) waits in them instead of being dropped as unroutable.
        topology = self.topology
        if partitions == 1:
            await self.broker.declare_queue(
                topology.recorder_queue(0, 1),
                [Binding(topology.events, "#")],
                dead_letter_exchange=topology.dlx,
            )
        else:
            await self.broker.declare_partitions(
                topology.recorder_partitions,
                source=topology.events,
                queues=[topology.recorder_queue(i, partitions) for i in range(partitions)],
                hash_header=STREAM_HEADER,
                dead_letter_exchange=topology.dlx,
            )

    async def stop(self) -> None:
        # Together, not one after another: each cancel is bounded by the broker's timeout, and
        # a service with several subscriptions on a broker that does not answer (a link that
        # came back half-open) must still stop within one such bound.
        await asyncio.gather(*(s.cancel() for s in reversed(self._subscriptions)))
        self._subscriptions.clear()
        for pause in self._pauses:
            await pause.close()
        self._pauses.clear()
        for future in self._pending.values():
            future.cancel()

    @property
    def is_connected(self) -> bool:
        return self.broker.is_connected

    @property
    def paused(self) -> dict[str, str]:
        """The subscriptions paused now, waiting for a dependency: queue -> why."""
        return {pause.name: pause.reason for pause in self._pauses if pause.reason is not None}

    def _backoff(self) -> Backoff:
        return Backoff(self._pause_initial_s, self._pause_cap_s)

    async def publish(
        self,
        envelope: Envelope,
        *,
        exchange: str | None = None,
        routing_key: str | None = None,
        reply_to: str | None = None,
        persistent: bool = True,
        max_bytes: int | None = None,
    ) -> Envelope:
        """Publish ``envelope`` (by default as an event, routed by its type) and return it
        as sent, with its trace context filled in. ``MessageTooLarge`` when its body would
        be over ``max_bytes`` (default ``max_message_bytes``): no consumer would read it."""
        exchange = self.topology.events if exchange is None else exchange
        routing_key = routing_key or envelope.type
        with self._tracer.start_as_current_span(
            f"{routing_key} publish",
            kind=SpanKind.PRODUCER,
            attributes=_messaging_attributes(exchange, routing_key, envelope, self.service),
        ):
            headers = inject()
            sent = envelope.model_copy(
                update={
                    "traceparent": headers.get("traceparent"),
                    "tracestate": headers.get("tracestate"),
                    "producer": envelope.producer or self.service,
                }
            )
            body = encode(sent)
            limit = max_bytes or self.max_message_bytes
            if len(body) > limit:
                raise MessageTooLarge(
                    f"{envelope.type!r} is {len(body)} bytes, over the {limit} a message may "
                    "have (DLSCOPE_MAX_MESSAGE_BYTES)"
                )
            await self.broker.publish(
                exchange,
                routing_key,
                OutgoingMessage(
                    body=body,
                    message_id=str(sent.event_id),
                    # The stream, for consumers partitioned by it (the recorders).
                    headers={**headers, STREAM_HEADER: sent.stream_id},
                    correlation_id=str(sent.correlation_id),
                    reply_to=reply_to,
                    persistent=persistent,
                ),
            )
        return sent

    async def publish_batch(
        self, envelopes: Sequence[Envelope], *, persistent: bool = True
    ) -> list[Envelope]:
        """Publish events produced together as events, in order, in as few messages as their
        routing allows, and return them as sent. Each run of consecutive events of one type
        is one batch message (a JSON array of envelopes) routed by that type, so every
        subscriber still gets exactly the types it binds; with the event log partitioned, a
        run is also cut where its stream changes, as the partitions hash on the stream. A
        run of one goes as a single event, a run too large for one message in parts."""
        partitioned = (self._event_log_partitions or 1) > 1
        sent: list[Envelope] = []
        for run in _runs(envelopes, by_stream=partitioned):
            if len(run) == 1:
                sent.append(await self.publish(run[0], persistent=persistent))
            else:
                sent.extend(await self._publish_run(run, persistent=persistent))
        return sent

    async def _publish_run(self, run: Sequence[Envelope], *, persistent: bool) -> list[Envelope]:
        exchange, routing_key = self.topology.events, run[0].type
        with self._tracer.start_as_current_span(
            f"{routing_key} publish",
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": "rabbitmq",
                "messaging.destination.name": exchange,
                "messaging.rabbitmq.destination.routing_key": routing_key,
                "messaging.batch.message_count": len(run),
                "dlscope.service": self.service,
            },
        ):
            headers = inject()
            sent = [
                envelope.model_copy(
                    update={
                        "traceparent": headers.get("traceparent"),
                        "tracestate": headers.get("tracestate"),
                        "producer": envelope.producer or self.service,
                    }
                )
                for envelope in run
            ]
            body = encode_batch(sent)
            if len(body) > self.max_message_bytes:
                # Halves until each fits; one event alone over the bound is refused by publish.
                half = len(run) // 2
                return [
                    *await self.publish_batch(run[:half], persistent=persistent),
                    *await self.publish_batch(run[half:], persistent=persistent),
                ]
            await self.broker.publish(
                exchange,
                routing_key,
                OutgoingMessage(
                    body=body,
                    message_id=str(uuid.uuid4()),
                    # One stream per batch where the log is partitioned (_runs cuts there).
                    headers={**headers, STREAM_HEADER: sent[0].stream_id},
                    correlation_id=str(sent[0].correlation_id),
                    persistent=persistent,
                ),
            )
        return sent

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
        limit = max_message_bytes or self.max_message_bytes

        pause = Pause(queue or f"{self.service}.exclusive", backoff=self._backoff())
        self._pauses.append(pause)

        async def consume(delivery: Delivery) -> Settlement:
            if count_redeliveries and delivery.redelivered:
                return await self._interrupted(delivery, on_dead_letter)
            if is_batch(delivery.body):
                return await self._dispatch_batch(
                    delivery, queue, handler, on_dead_letter, pause, limit
                )
            return await self._dispatch(delivery, handler, on_dead_letter, pause, limit)

        return await self._consume(queue, bindings, consume, prefetch=prefetch, durable=durable)

    async def _consume(
        self,
        queue: str,
        bindings: Sequence[Binding],
        consume: Callable[[Delivery], Awaitable[Settlement]],
        *,
        prefetch: int | None,
        durable: bool = True,
    ) -> Subscription:
        subscription = await self.broker.consume(
            queue,
            bindings,
            consume,
            prefetch=prefetch or self._prefetch,
            dead_letter_exchange=self.topology.dlx,
            durable=durable,
        )
        self._subscriptions.append(subscription)
        return subscription

    async def handle(
        self,
        queue: str,
        routes: Routes,
        *,
        durable: bool = True,
        prefetch: int | None = None,
        on_dead_letter: DeadLetterHook | None = None,
        count_redeliveries: bool = False,
        max_message_bytes: int | None = None,
    ) -> Subscription:
        """Consume ``queue`` with typed handlers (``subscribe``'s options); its bindings are
        the routes'."""
        return await self.subscribe(
            queue,
            routes.bindings,
            routes,
            durable=durable,
            prefetch=prefetch,
            on_dead_letter=on_dead_letter,
            count_redeliveries=count_redeliveries,
            max_message_bytes=max_message_bytes,
        )

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
        limit = max_message_bytes or self.max_message_bytes
        pause = Pause(queue, backoff=self._backoff())
        self._pauses.append(pause)

        async def consume(delivery: Delivery) -> Settlement:
            _delivery.set(delivery)
            refused: list[tuple[bytes, Envelope | None, Settlement]] = []
            try:
                _check_size(delivery.body, limit)
                # Read at once where every event reads; one by one only to say which does not.
                events = read_typed(delivery.body)
                if events is None:
                    events, refused = _read_each(delivery)
            except InvalidMessage as exc:
                log.warning(
                    "dead-lettering an invalid message on %r: %s", delivery.routing_key, exc
                )
                return settlement_for(
                    exc, attempt=delivery.attempt, max_attempts=self._max_attempts
                )
            # The good events first, with no wait before them, so they reach the handler in
            # delivery order (the recorder appends each stream in that order); the refused
            # ones after, and only once the batch is done with (a batch tried again refuses
            # them again).
            settlement = (
                await self._in_turn(
                    pause, lambda: self._handle_together(delivery, events, handler), delivery
                )
                if events
                else Settlement(Outcome.ACK)
            )
            if settlement.outcome is Outcome.ACK:
                for body, envelope, part in refused:
                    log.warning("%s: dead-lettering %s", self.service, part.reason)
                    await self._settle_part(delivery, queue, body, envelope, part)
            else:
                log.warning(
                    "%s: %s %d event(s) on %r: %s",
                    self.service,
                    settlement.outcome.value,
                    len(events),
                    delivery.routing_key,
                    settlement.reason,
                )
            return settlement

        return await self._consume(queue, bindings, consume, prefetch=prefetch)

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
            await self.publish(
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

    async def _ensure_reply_queue(self) -> str:
        async with self._reply_lock:
            if self._reply_queue is None:
                self._reply_queue = await self.broker.declare_reply_queue(self._on_reply)
            return self._reply_queue

    async def _on_reply(self, delivery: Delivery) -> Settlement:
        try:
            envelope = _decode(delivery.body, self.max_message_bytes)
        except InvalidMessage as exc:
            log.warning("dropping an unreadable reply: %s", exc)
            return Settlement(Outcome.ACK)
        future = self._pending.get(str(envelope.causation_id))
        if future is not None and not future.done():
            future.set_result(envelope)
        return Settlement(Outcome.ACK)

    async def _interrupted(
        self, delivery: Delivery, on_dead_letter: DeadLetterHook | None
    ) -> Settlement:
        reason = (
            f"attempt {delivery.attempt} was interrupted: whoever was handling it went away "
            "without finishing (killed, or cut off from the broker)"
        )
        if delivery.attempt < self._max_attempts:
            log.warning("%s: %s; trying again", self.service, reason)
            return Settlement(Outcome.RETRY, reason)
        reason = (
            f"every one of its {delivery.attempt} attempts was interrupted: each worker that "
            "took it went away without finishing (killed, or cut off from the broker)"
        )
        if on_dead_letter is not None:
            try:
                await on_dead_letter(decode(delivery.body), reason)
            except Exception as exc:  # unreadable, or the hook failed: the DLQ keeps it
                log.warning("%s: recording a dead letter failed: %s", self.service, exc)
        return Settlement(Outcome.DEAD_LETTER, reason)

    async def _dispatch(
        self,
        delivery: Delivery,
        handler: Handler,
        on_dead_letter: DeadLetterHook | None,
        pause: Pause,
        max_bytes: int,
    ) -> Settlement:
        _delivery.set(delivery)  # this delivery's task has its own context
        try:
            envelope = _decode(delivery.body, max_bytes)
        except InvalidMessage as exc:
            log.warning("dead-lettering an invalid message on %r: %s", delivery.routing_key, exc)
            return settlement_for(exc, attempt=delivery.attempt, max_attempts=self._max_attempts)
        settlement = await self._in_turn(
            pause, lambda: self._handle(delivery, envelope, handler), delivery
        )
        if settlement.outcome is not Outcome.REQUEUE:
            await self._not_handled(envelope, settlement, delivery, on_dead_letter)
        return settlement

    async def _not_handled(
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

    async def _in_turn(
        self, pause: Pause, attempt: Callable[[], Awaitable[Settlement]], delivery: Delivery
    ) -> Settlement:
        """``attempt`` once its turn comes, and again while a dependency is unavailable."""
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
                        self.service,
                        delivery.routing_key,
                        pause.max_hold,
                    )
                    return settlement
        finally:
            pause.finished(ticket)

    async def _dispatch_batch(
        self,
        delivery: Delivery,
        queue: str,
        handler: Handler,
        on_dead_letter: DeadLetterHook | None,
        pause: Pause,
        max_bytes: int,
    ) -> Settlement:
        """A batch for a handler of one event at a time: each event in order, settled on its
        own. One that fails goes on alone (retried as a single message at the queue's tail,
        or dead-lettered), the others are not held back by it. Should a dependency be
        unavailable past the pause's hold, the whole batch goes back to the broker: the
        events handled before it will be handled again, as any redelivery is."""
        _delivery.set(delivery)
        try:
            items = _decode_all(delivery.body, max_bytes)
        except InvalidMessage as exc:
            log.warning("dead-lettering an invalid batch on %r: %s", delivery.routing_key, exc)
            return settlement_for(exc, attempt=delivery.attempt, max_attempts=self._max_attempts)
        for item in items:
            if isinstance(item, Unreadable):
                settlement = settlement_for(item.error, attempt=delivery.attempt, max_attempts=1)
                await self._settle_part(delivery, queue, item.body, None, settlement)
                continue
            envelope = item
            settlement = await self._in_turn(
                pause, functools.partial(self._handle, delivery, envelope, handler), delivery
            )
            if settlement.outcome is Outcome.REQUEUE:
                return settlement
            if settlement.outcome is Outcome.ACK:
                continue
            await self._not_handled(envelope, settlement, delivery, on_dead_letter)
            await self._settle_part(delivery, queue, encode(envelope), envelope, settlement)
        return Settlement(Outcome.ACK)

    async def _settle_part(
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
            headers[ATTEMPT_HEADER] = str(delivery.attempt + 1)
            headers[ORIGIN_EXCHANGE_HEADER] = delivery.exchange
            headers[ORIGIN_ROUTING_KEY_HEADER] = delivery.routing_key
            target, key = "", queue
        else:  # dead letters; and a retry on a queue without a name to come back to
            headers[REASON_HEADER] = settlement.reason
            headers[DEAD_LETTERED_FROM_HEADER] = queue
            target, key = self.topology.dlx, delivery.routing_key
        await self.broker.publish(
            target,
            key,
            OutgoingMessage(
                body=body, message_id=message_id, headers=headers, correlation_id=correlation_id
            ),
        )

    async def _handle(self, delivery: Delivery, envelope: Envelope, handler: Handler) -> Settlement:
        """Run ``handler`` once, in a CONSUMER span continuing the publisher's trace."""

        async def call() -> None:
            reply = await handler(envelope)
            if reply is not None and delivery.reply_to:
                await self.publish(
                    reply, exchange="", routing_key=delivery.reply_to, persistent=False
                )

        return await self._traced(delivery, envelope, 1, call)

    async def _handle_together(
        self, delivery: Delivery, events: Sequence[TypedEnvelope[Payload]], handler: BatchHandler
    ) -> Settlement:
        """Run ``handler`` once on ``events``, in one CONSUMER span continuing the trace of
        the first (a batch's events share their producer's context)."""
        return await self._traced(delivery, events[0], len(events), lambda: handler(events))

    async def _traced(
        self,
        delivery: Delivery,
        envelope: EnvelopeFields,
        count: int,
        call: Callable[[], Awaitable[None]],
    ) -> Settlement:
        """``call`` in a CONSUMER span continuing ``envelope``'s trace; its settlement."""
        context = parent_context(
            delivery.headers,
            traceparent=envelope.traceparent,
            tracestate=envelope.tracestate,
            correlation_id=envelope.correlation_id,
            event_id=envelope.event_id,
        )
        attributes = _messaging_attributes(
            delivery.exchange, delivery.routing_key, envelope, self.service
        )
        if count > 1:
            attributes["messaging.batch.message_count"] = count
        with self._tracer.start_as_current_span(
            f"{delivery.routing_key} process",
            context=context,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
        ) as span:
            if delivery.attempt > 1:
                span.set_attribute("messaging.rabbitmq.delivery_attempt", delivery.attempt)
            error: Exception | None = None
            try:
                await call()
            except Exception as exc:
                error = exc
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
            return settlement_for(error, attempt=delivery.attempt, max_attempts=self._max_attempts)


def _check_size(body: bytes, max_bytes: int) -> None:
    # Measured before parsing: a message far over the bound costs no memory beyond itself.
    if len(body) > max_bytes:
        raise MessageTooLarge(
            f"the message is {len(body)} bytes, over the {max_bytes} this consumer reads "
            "(DLSCOPE_MAX_MESSAGE_BYTES)"
        )


def _decode(body: bytes, max_bytes: int) -> Envelope:
    _check_size(body, max_bytes)
    return decode(body)


def _decode_all(body: bytes, max_bytes: int) -> list[Envelope | Unreadable]:
    _check_size(body, max_bytes)
    return decode_batch(body)


def _read_each(
    delivery: Delivery,
) -> tuple[list[TypedEnvelope[Payload]], list[tuple[bytes, Envelope | None, Settlement]]]:
    """A delivery's events read one by one: those that read, and for each that does not its
    JSON, its envelope where that much reads, and its settlement. A single event that does
    not read is an ``InvalidMessage``, as is a batch that is not one."""
    batched = is_batch(delivery.body)
    items = decode_batch(delivery.body) if batched else [decode(delivery.body)]
    events: list[TypedEnvelope[Payload]] = []
    refused: list[tuple[bytes, Envelope | None, Settlement]] = []
    for item in items:
        try:
            if isinstance(item, Unreadable):
                raise item.error
            events.append(item.read())
        except InvalidMessage as exc:
            if not batched:
                raise
            envelope = None if isinstance(item, Unreadable) else item
            body = item.body if isinstance(item, Unreadable) else encode(item)
            settlement = settlement_for(exc, attempt=delivery.attempt, max_attempts=1)
            refused.append((body, envelope, settlement))
    return events, refused


def _runs(envelopes: Sequence[Envelope], *, by_stream: bool) -> list[list[Envelope]]:
    """Consecutive events of one type (and one stream, ``by_stream``), in order, each run at
    most ``MAX_BATCH_EVENTS`` long."""
    runs: list[list[Envelope]] = []
    for envelope in envelopes:
        last = runs[-1] if runs else None
        if (
            last is not None
            and last[0].type == envelope.type
            and (not by_stream or last[0].stream_id == envelope.stream_id)
            and len(last) < MAX_BATCH_EVENTS
        ):
            last.append(envelope)
        else:
            runs.append([envelope])
    return runs


def _messaging_attributes(
    exchange: str, routing_key: str, envelope: EnvelopeFields, service: str
) -> dict[str, str | int]:
    # Few attributes on purpose: every message pays for each one (the recorder sees them
    # all). The type is the routing key for events; the stream follows from the correlation.
    return {
        "messaging.system": "rabbitmq",
        "messaging.destination.name": exchange or "(default)",
        "messaging.rabbitmq.destination.routing_key": routing_key,
        "messaging.message.id": str(envelope.event_id),
        "messaging.message.conversation_id": str(envelope.correlation_id),
        "dlscope.service": service,
    }
