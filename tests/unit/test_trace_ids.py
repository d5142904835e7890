"""The trace id the event store files an event under is the one its consumers continue: read
from ``traceparent`` by the W3C rules OpenTelemetry's propagator applies, else derived from the
correlation id."""

from __future__ import annotations

import uuid

import pytest
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from shared.telemetry import parent_context, trace_id_hex, trace_id_of

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.mark.parametrize(
    "traceparent",
    [
        f"00-{TRACE}-00f067aa0ba902b7-01",
        f"00-{TRACE}-00f067aa0ba902b7-00",
        f" \t00-{TRACE}-00f067aa0ba902b7-01 ",
        f"01-{TRACE}-00f067aa0ba902b7-01-what-a-later-version-adds",
        f"00-{TRACE}-00f067aa0ba902b7-01-more",  # version 00 has no more fields
        f"ff-{TRACE}-00f067aa0ba902b7-01",  # the version that is never valid
        f"00-{'0' * 32}-00f067aa0ba902b7-01",
        f"00-{TRACE}-{'0' * 16}-01",
        f"00-{TRACE.upper()}-00f067aa0ba902b7-01",
        f"00-{TRACE[:-1]}-00f067aa0ba902b7-01",
        f"00-{TRACE}-00f067aa0ba902b7-01-{'x' * 500}",  # over the 512 characters one may be
        "not a traceparent",
        "",
        None,
    ],
)
def test_the_trace_id_is_the_one_the_propagator_reads_or_else_the_derived_one(
    traceparent: str | None,
) -> None:
    correlation_id = uuid.uuid4()
    expected = trace.get_current_span(
        TraceContextTextMapPropagator().extract({"traceparent": traceparent or ""})
    ).get_span_context()
    got = trace_id_of(traceparent, correlation_id)
    assert got == (trace_id_hex(expected) if expected.is_valid else correlation_id.hex)
    # The trace a consumer continues, from the same envelope.
    continued = trace.get_current_span(
        parent_context(
            {},
            traceparent=traceparent,
            tracestate=None,
            correlation_id=correlation_id,
            event_id=uuid.uuid4(),
        )
    ).get_span_context()
    assert got == trace_id_hex(continued)
