"""Running a handler on what a delivery carries: in a CONSUMER span that continues the
publisher's trace, its outcome turned into a settlement by the one policy (``policy``).

Tracing lives here and not in handlers: the handler runs inside the span, and what it raises
is recorded on the span before it settles the delivery."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass

from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from shared.messages import Envelope, EnvelopeFields, Payload, TypedEnvelope
from shared.messaging.broker import Delivery, Settlement
from shared.messaging.policy import settlement_for
from shared.messaging.publishing import Publisher
from shared.messaging.spans import messaging_attributes
from shared.telemetry import parent_context

__all__ = ["BatchHandler", "Handler", "Handling"]

# A handler's returned envelope is sent as the reply when the message asked for one.
Handler = Callable[[Envelope], Awaitable[Envelope | None]]
# Handed every readable event of one delivery at once (``Bus.handle_together``), each with its
# payload as its contract reads it.
BatchHandler = Callable[[Sequence[TypedEnvelope[Payload]]], Awaitable[None]]


@dataclass(frozen=True, eq=False)
class Handling:
    """The handler runs of one service's consumers, tried ``max_attempts`` times at most."""

    publisher: Publisher
    _: KW_ONLY
    tracer: Tracer
    service: str
    max_attempts: int

    async def one(self, delivery: Delivery, envelope: Envelope, handler: Handler) -> Settlement:
        """Run ``handler`` once, in a CONSUMER span continuing the publisher's trace."""

        async def call() -> None:
            reply = await handler(envelope)
            if reply is not None and delivery.reply_to:
                await self.publisher.publish(
                    reply, exchange="", routing_key=delivery.reply_to, persistent=False
                )

        return await self._traced(delivery, envelope, 1, call)

    async def together(
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
        attributes = messaging_attributes(
            delivery.exchange, delivery.routing_key, envelope, self.service
        )
        if count > 1:
            attributes["messaging.batch.message_count"] = count
        with self.tracer.start_as_current_span(
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
            return settlement_for(error, attempt=delivery.attempt, max_attempts=self.max_attempts)
