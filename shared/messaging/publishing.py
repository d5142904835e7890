"""Publishing envelopes through the broker port: each message in a PRODUCER span whose trace
context it carries (in its AMQP headers and in the envelope), bounded in size, and events
produced together sent in as few messages as their routing allows."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass

import orjson
from opentelemetry.trace import SpanKind, Tracer

from shared.errors import MessageTooLarge, MessageUnreadable
from shared.inputs import unsafe_text
from shared.messages import MAX_BATCH_EVENTS, Envelope, Topology, encode, encode_batch
from shared.messaging.broker import STREAM_HEADER, Broker, OutgoingMessage
from shared.messaging.spans import messaging_attributes, stamped
from shared.telemetry import inject

__all__ = ["Publisher"]


@dataclass(frozen=True, eq=False)
class Publisher:
    """What one service publishes. ``by_stream``: the event log is partitioned by stream, so
    a batch message holds the events of one stream only."""

    broker: Broker
    _: KW_ONLY
    topology: Topology
    tracer: Tracer
    service: str
    max_message_bytes: int
    by_stream: bool

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
        with self.tracer.start_as_current_span(
            f"{routing_key} publish",
            kind=SpanKind.PRODUCER,
            attributes=messaging_attributes(exchange, routing_key, envelope, self.service),
        ):
            headers = inject()
            sent = stamped(envelope, headers, self.service)
            body = _readable(lambda: encode(sent), repr(envelope.type))
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
        sent: list[Envelope] = []
        for run in _runs(envelopes, by_stream=self.by_stream):
            if len(run) == 1:
                sent.append(await self.publish(run[0], persistent=persistent))
            else:
                sent.extend(await self._publish_run(run, persistent=persistent))
        return sent

    async def _publish_run(self, run: Sequence[Envelope], *, persistent: bool) -> list[Envelope]:
        exchange, routing_key = self.topology.events, run[0].type
        with self.tracer.start_as_current_span(
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
            sent = [stamped(envelope, headers, self.service) for envelope in run]
            body = _readable(lambda: encode_batch(sent), f"a batch of {routing_key!r}")
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


def _readable(encoded: Callable[[], bytes], what: str) -> bytes:
    """The body ``encoded`` makes, if every consumer would read it: a NUL (which
    ``shared.inputs`` makes every consumer refuse) or an unpaired surrogate (which no JSON
    encoder writes) is ``MessageUnreadable``, raised here so that the producer learns of it
    rather than its consumers dead-lettering what it sent (issue 42)."""
    try:
        body = encoded()
    except orjson.JSONEncodeError as exc:
        raise MessageUnreadable(f"{what} cannot be written as JSON: {exc}") from exc
    # The escape's bytes first (cheap), the parsed text only where they appear: an escaped
    # backslash before "u0000" writes them too.
    if b"\\u0000" in body and (problem := unsafe_text(orjson.loads(body))) is not None:
        where = ".".join(map(str, problem[0]))
        raise MessageUnreadable(
            f"{what} holds {problem[1]} at {where}, which no consumer reads: text taken from "
            "outside must be cleaned (shared.inputs.cleaned) before it is published"
        )
    return body
