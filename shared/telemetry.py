"""OpenTelemetry set-up and W3C trace-context propagation across messages.

Each process builds one ``Telemetry`` and passes it down; nothing here sets OpenTelemetry's
process-global provider, so several services (or tests) can live in one process.

A message published without a trace context (a client publishing straight to RabbitMQ)
still belongs to exactly one trace: its parent is derived from the correlation id, so
every service that consumes it, independently, continues the same trace.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from shared.config import Settings
from shared.trace_files import OtlpJsonFileExporter

__all__ = [
    "SpanCounter",
    "Telemetry",
    "inject",
    "parent_context",
    "trace_id_hex",
    "trace_id_of",
]

_PROPAGATOR = TraceContextTextMapPropagator()
# A traceparent as W3C Trace Context (and OpenTelemetry's propagator) reads one.
_TRACEPARENT = re.compile(
    r"^[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(?:(-.*)|[ \t]*)$"
)
_TRACEPARENT_MAX_LENGTH = 512
_NO_TRACE_ID, _NO_SPAN_ID = "0" * 32, "0" * 16


@dataclass
class Telemetry:
    provider: TracerProvider
    tracer: trace.Tracer

    @classmethod
    def create(
        cls,
        settings: Settings,
        service_name: str,
        *,
        extra_processor: SpanProcessor | None = None,
    ) -> Telemetry:
        exporting = bool(settings.otlp_endpoint) or extra_processor is not None
        provider = TracerProvider(
            resource=Resource.create(
                {"service.name": service_name, "service.namespace": settings.namespace}
            ),
            # Spans nobody exports are not recorded (every message pays for a recorded span),
            # but they still carry valid ids: trace context propagates and every event keeps
            # its trace id either way. ALWAYS_ON, not parent-based, when exporting: a caller
            # that does not sample must not switch dlscope's own tracing off.
            sampler=ALWAYS_ON if exporting else ALWAYS_OFF,
        )
        if settings.otlp_endpoint:
            provider.add_span_processor(BatchSpanProcessor(_exporter(settings.otlp_endpoint)))
        if extra_processor is not None:
            provider.add_span_processor(extra_processor)
        return cls(provider=provider, tracer=provider.get_tracer("dlscope"))

    def shutdown(self) -> None:
        self.provider.shutdown()


class SpanCounter(SpanProcessor):
    """Counts the spans this process ends, per trace and trace level (``dlscope.trace_level``;
    None for the services' own spans): what a command that exports them says it wrote."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[int, str | None]] = Counter()
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is None:
            return
        level = (span.attributes or {}).get("dlscope.trace_level")
        with self._lock:
            self._counts[(span.context.trace_id, None if level is None else str(level))] += 1

    def of(self, trace_id: str) -> dict[str | None, int]:
        """The spans of ``trace_id`` (hex) counted so far, per trace level."""
        wanted = int(trace_id, 16)
        with self._lock:
            return {level: n for (trace, level), n in self._counts.items() if trace == wanted}


def _exporter(endpoint: str) -> SpanExporter:
    """OTLP/HTTP to a collector (Jaeger), or, for ``file://<path>``, OTLP JSON lines appended
    to that file (``shared.trace_files``): a trace for those without a collector."""
    if endpoint.startswith("file://"):
        return OtlpJsonFileExporter(Path(endpoint.removeprefix("file://")))
    # Imported here: the exporter pulls in protobuf, which only tracing users pay for.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    endpoint = endpoint.rstrip("/")
    if not endpoint.endswith("/v1/traces"):
        endpoint += "/v1/traces"
    return OTLPSpanExporter(endpoint=endpoint)


def trace_id_hex(span_context: SpanContext) -> str:
    return format(span_context.trace_id, "032x")


def inject(context: Context | None = None) -> dict[str, str]:
    """The current (or given) context as W3C headers: ``traceparent`` and maybe ``tracestate``."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    return carrier


def parent_context(
    headers: Mapping[str, Any],
    *,
    traceparent: str | None,
    tracestate: str | None,
    correlation_id: uuid.UUID,
    event_id: uuid.UUID,
) -> Context:
    """The context a consumer continues: from the AMQP headers, else from the envelope, else
    one derived from the correlation id (the same for every consumer of the message)."""
    for carrier in (
        {k: str(v) for k, v in headers.items() if k in ("traceparent", "tracestate")},
        {"traceparent": traceparent or "", "tracestate": tracestate or ""},
    ):
        if carrier.get("traceparent"):
            context = _PROPAGATOR.extract(carrier)
            if trace.get_current_span(context).get_span_context().is_valid:
                return context
    derived = SpanContext(
        trace_id=_derived_trace_id(correlation_id),
        span_id=(event_id.int >> 64) or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(derived))


def trace_id_of(traceparent: str | None, correlation_id: uuid.UUID) -> str:
    """The trace id a message belongs to (see ``parent_context``)."""
    if traceparent and len(traceparent) <= _TRACEPARENT_MAX_LENGTH:
        # The W3C rules the propagator applies, without building a context: the recorder
        # asks this of every event it stores (a fifth of the cost of one, the propagator's way).
        match = _TRACEPARENT.match(traceparent)
        if match is not None:
            version, trace_id, span_id, extra = match.groups()
            if (
                trace_id != _NO_TRACE_ID
                and span_id != _NO_SPAN_ID
                and version != "ff"
                and not (version == "00" and extra)
            ):
                return trace_id
    return format(_derived_trace_id(correlation_id), "032x")


def _derived_trace_id(correlation_id: uuid.UUID) -> int:
    return correlation_id.int or 1
