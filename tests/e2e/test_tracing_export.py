"""Traces leave dlscope over OTLP/HTTP when DLSCOPE_OTLP_ENDPOINT names a collector (as
Jaeger does), and not otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from dlscope.cli.outcome import COMPLETED
from shared.config import REPOSITORY_ROOT

pytestmark = pytest.mark.e2e


class Collector(ThreadingHTTPServer):
    """A stand-in OTLP/HTTP collector: keeps every span it is sent."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[tuple[str, str, dict[str, str]]] = []  # trace id, name, attributes
        self.paths: list[str] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        self.server.paths.append(self.path)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {a.key: a.value.string_value for a in span.attributes}
                    self.server.spans.append((span.trace_id.hex(), span.name, attributes))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def run(tmp_path: Path, **environment: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    env.update(DLSCOPE_HOME=str(tmp_path), **environment)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlscope",
            "run",
            "squeezenet",
            "-n",
            "5",
            "--json",
            str(tmp_path / "result.json"),
        ],
        env=env,
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode in COMPLETED, result.stderr
    document: dict[str, object] = json.loads((tmp_path / "result.json").read_text())
    return document


def test_an_evaluation_is_exported_as_one_trace_through_every_service(
    tmp_path: Path, collector: Collector
) -> None:
    document = run(tmp_path, DLSCOPE_OTLP_ENDPOINT=collector.endpoint)
    trace_id = document["trace_id"]

    assert set(collector.paths) == {"/v1/traces"}
    in_trace = [(name, attrs) for tid, name, attrs in collector.spans if tid == trace_id]
    services = {attrs.get("dlscope.service") for _, attrs in in_trace}
    assert {"scheduler", "registry", "worker", "analyzer", "recorder"} <= services
    assert "evaluation.requested process" in {name for name, _ in in_trace}


def test_nothing_is_exported_without_an_endpoint(tmp_path: Path, collector: Collector) -> None:
    run(tmp_path)
    assert collector.spans == []
