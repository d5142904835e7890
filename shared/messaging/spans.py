"""What a message's spans and envelope say of its trace: OpenTelemetry's ``messaging.*``
attributes, and the context a published envelope carries for its consumers to continue."""

from __future__ import annotations

from collections.abc import Mapping

from shared.messages import Envelope, EnvelopeFields

__all__ = ["messaging_attributes", "stamped"]


def messaging_attributes(
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


def stamped(envelope: Envelope, headers: Mapping[str, str], service: str) -> Envelope:
    """``envelope`` as sent: with the trace context ``headers`` carry (the PRODUCER span's)
    and its producer, ``service`` unless it names its own."""
    return envelope.model_copy(
        update={
            "traceparent": headers.get("traceparent"),
            "tracestate": headers.get("tracestate"),
            "producer": envelope.producer or service,
        }
    )
