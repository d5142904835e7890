"""An event made ready for the log before its transaction: what a writer that prepares each
event as it arrives (the recorder) keeps out of the transaction that stores it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import orjson

from shared.eventstore import schema
from shared.messages import Envelope, EnvelopeFields, Payload, TypedEnvelope
from shared.telemetry import trace_id_of

__all__ = ["LogEntry", "log_entry"]


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One event made ready for the log, all but what its transaction gives it (its stream
    version, its position, the time it was recorded): its payload as stored (as its contract
    writes it back, where it was read, ``checked``) as JSON text, and its metadata."""

    envelope: EnvelopeFields
    checked: Payload | None
    payload_json: str
    metadata: dict[str, Any]
    metadata_json: str
    # As stored: in UTC, so projections see the same value now and when rebuilt.
    occurred_at: datetime

    @property
    def payload(self) -> dict[str, Any]:
        """The payload as stored, read back from its text when asked (SQLite's insert): events
        waiting for their transaction hold one string each, not a tree of objects for the
        cycle collector to walk again and again (issue 24)."""
        return cast(dict[str, Any], orjson.loads(self.payload_json))


def log_entry(
    envelope: Envelope | TypedEnvelope[Payload], checked: Payload | None = None
) -> LogEntry:
    """``envelope`` ready for the log; ``checked``, its payload as its contract read it (a
    ``TypedEnvelope``'s payload is)."""
    if isinstance(envelope, TypedEnvelope):
        checked = envelope.payload
    if checked is None:
        assert isinstance(envelope, Envelope), "a TypedEnvelope's payload is checked"
        return _log_entry(envelope, None, orjson.dumps(envelope.payload).decode())
    # Its contract writes it as JSON text at once, with no documents made on the way.
    return _log_entry(envelope, checked, checked.__pydantic_serializer__.to_json(checked).decode())


def _log_entry(envelope: EnvelopeFields, checked: Payload | None, payload_json: str) -> LogEntry:
    # The ids as UUIDs: orjson writes them as their text, as it does for SQLite's column.
    metadata = {
        "trace_id": trace_id_of(envelope.traceparent, envelope.correlation_id),
        "correlation_id": envelope.correlation_id,
        "causation_id": envelope.causation_id,
        "producer": envelope.producer,
        "traceparent": envelope.traceparent,
        "tracestate": envelope.tracestate,
    }
    return LogEntry(
        envelope=envelope,
        checked=checked,
        payload_json=payload_json,
        metadata=metadata,
        metadata_json=orjson.dumps(metadata).decode(),
        occurred_at=schema.as_utc(envelope.occurred_at),
    )
