"""Traces as files, for users without a running Jaeger.

- ``DLSCOPE_OTLP_ENDPOINT=file:///path/spans.jsonl`` makes every dlscope process append its
  spans to that file, as OTLP JSON (one ``ExportTraceServiceRequest`` per line, trace and
  span ids in hex: the OpenTelemetry Collector's file exporter format, which its
  ``otlpjsonfile`` receiver replays into Jaeger or any OTLP backend).
- ``dlscope run`` and ``dlscope up``, where no exporter is configured, write to
  ``default_trace_file`` under DLSCOPE_HOME, which ``dlscope trace ID`` reads.
- A trace file past ``MAX_TRACE_FILE_BYTES`` is renamed ``<name>.1`` (the one before it
  dropped) and a new one begun: every embedded run appends to it, and it must not fill the
  disk; ``read_spans`` reads both.
- ``dlscope trace ID`` prints one trace as a tree of its spans; ``--chrome`` writes it
  (chrome://tracing, https://ui.perfetto.dev): a process per dlscope service, a track per
  trace level (and per thread, where a profiler named one), a slice per span; or as a single
  OTLP JSON document of that trace alone.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = [
    "MAX_TRACE_FILE_BYTES",
    "FileSpan",
    "OtlpJsonFileExporter",
    "chrome_trace",
    "default_trace_file",
    "otlp_document",
    "read_kept_spans",
    "read_spans",
    "service_of",
]

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")
MAX_TRACE_FILE_BYTES = 64 * 1024 * 1024
_TRACE_FILE_NAME = "traces.jsonl"


def default_trace_file(home: Path) -> Path:
    """Where the embedded mode keeps its spans when no exporter is configured."""
    return home / _TRACE_FILE_NAME


def _rotated(path: Path) -> Path:
    return path.with_name(path.name + ".1")


class OtlpJsonFileExporter(SpanExporter):
    """Appends each batch of spans to ``path`` as one line of OTLP JSON."""

    def __init__(self, path: Path, *, max_bytes: int = MAX_TRACE_FILE_BYTES) -> None:
        self._path = path
        self._max_bytes = max_bytes
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        # Imported here: protobuf is for those who trace.
        from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        document = _hex_ids(MessageToDict(encode_spans(spans)))
        line = json.dumps(document, separators=(",", ":")) + "\n"
        try:
            with self._lock:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileNotFoundError):
                    if self._path.stat().st_size > self._max_bytes:
                        os.replace(self._path, _rotated(self._path))
                # One write per batch, appended: several processes may share the file.
                with self._path.open("a") as file:
                    file.write(line)
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _hex_ids(value: Any) -> Any:
    """Protobuf's JSON mapping writes bytes in base64; OTLP JSON wants ids in hex."""
    if isinstance(value, dict):
        return {
            key: base64.b64decode(item).hex() if key in _ID_FIELDS else _hex_ids(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(item) for item in value]
    return value


@dataclass(frozen=True)
class FileSpan:
    """One span read back from an OTLP JSON file, with its resource's attributes."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    document: dict[str, Any]  # the span as the file has it


def _attribute(value: dict[str, Any]) -> Any:
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in value:
            return value[kind]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_attribute(v) for v in value["arrayValue"].get("values", [])]
    return None


def _attributes(items: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {item["key"]: _attribute(item.get("value", {})) for item in items}


def read_spans(path: Path, trace_id: str | None = None) -> list[FileSpan]:
    """The spans of an OTLP JSON lines file (of ``trace_id`` only, if given)."""
    spans = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}, line {number}: not OTLP JSON: {exc}") from exc
        for resource_spans in request.get("resourceSpans", []):
            resource = _attributes(resource_spans.get("resource", {}).get("attributes", []))
            for scope_spans in resource_spans.get("scopeSpans", []):
                for span in scope_spans.get("spans", []):
                    if trace_id is not None and span.get("traceId") != trace_id:
                        continue
                    spans.append(
                        FileSpan(
                            trace_id=span.get("traceId", ""),
                            span_id=span.get("spanId", ""),
                            parent_id=span.get("parentSpanId", ""),
                            name=span.get("name", ""),
                            start_ns=int(span.get("startTimeUnixNano", 0)),
                            end_ns=int(span.get("endTimeUnixNano", 0)),
                            attributes=_attributes(span.get("attributes", [])),
                            resource=resource,
                            document=span,
                        )
                    )
    return spans


def otlp_document(spans: Sequence[FileSpan]) -> dict[str, Any]:
    """``spans`` as one OTLP JSON document, grouped by their resource."""
    groups: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for span in spans:
        key = json.dumps(span.resource, sort_keys=True)
        groups.setdefault(key, (span.resource, []))[1].append(span.document)
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        {"key": key, "value": {"stringValue": str(value)}}
                        for key, value in resource.items()
                    ]
                },
                "scopeSpans": [{"scope": {"name": "dlscope"}, "spans": documents}],
            }
            for resource, documents in groups.values()
        ]
    }


def read_kept_spans(path: Path, trace_id: str | None = None) -> list[FileSpan]:
    """The spans of ``path`` and of the file it was last rotated to (oldest first)."""
    older = _rotated(path)
    before = read_spans(older, trace_id) if older.exists() else []
    return before + read_spans(path, trace_id)


def chrome_trace(spans: Sequence[FileSpan]) -> dict[str, Any]:
    """``spans`` in Chrome's trace event format: complete events ("X") in microseconds, a
    process per service, a track per trace level (and per thread a profiler named)."""
    by_id = {span.span_id: span for span in spans}
    processes: dict[str, int] = {}
    tracks: dict[tuple[int, str], int] = {}
    events: list[dict[str, Any]] = []
    for span in sorted(spans, key=lambda s: s.start_ns):
        service = service_of(span, by_id)
        pid = processes.setdefault(service, len(processes) + 1)
        level = str(span.attributes.get("dlscope.trace_level", "application"))
        thread = span.attributes.get("thread.id")
        track = level if thread is None else f"{level}, thread {thread}"
        tid = tracks.setdefault((pid, track), len(tracks) + 1)
        events.append(
            {
                "name": span.name,
                "cat": level,
                "ph": "X",
                "ts": span.start_ns / 1000,
                "dur": max(span.end_ns - span.start_ns, 0) / 1000,
                "pid": pid,
                "tid": tid,
                "args": {**span.attributes, "span_id": span.span_id, "parent_id": span.parent_id},
            }
        )
    names = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": service}}
        for service, pid in processes.items()
    ] + [
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": track}}
        for (pid, track), tid in tracks.items()
    ]
    return {"traceEvents": names + events, "displayTimeUnit": "ms"}


def service_of(span: FileSpan, by_id: dict[str, FileSpan]) -> str:
    """The dlscope service a span belongs to: its own ``dlscope.service``, else its nearest
    ancestor's, else its resource's service name."""
    at: FileSpan | None = span
    while at is not None:
        if "dlscope.service" in at.attributes:
            return str(at.attributes["dlscope.service"])
        at = by_id.get(at.parent_id)
    return str(span.resource.get("service.name", "dlscope"))
