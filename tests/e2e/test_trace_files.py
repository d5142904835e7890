"""Without a Jaeger: ``dlscope run`` at trace level ``framework`` with
``DLSCOPE_OTLP_ENDPOINT=file://...`` writes its spans to a file; ``dlscope trace`` turns the
evaluation's trace into Chrome trace JSON (chrome://tracing, Perfetto) and OTLP JSON; and
``dlscope layers`` reads the layers back from the embedded event store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dlscope.cli.outcome import COMPLETED
from shared.config import REPOSITORY_ROOT

pytestmark = pytest.mark.e2e


def dlscope(home: Path, *arguments: str, **environment: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    env.update(DLSCOPE_HOME=str(home), COLUMNS="200", **environment)
    return subprocess.run(
        [sys.executable, "-m", "dlscope", *arguments],
        env=env,
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_traced_run_becomes_a_chrome_trace_and_keeps_its_layers(tmp_path: Path) -> None:
    spans = tmp_path / "spans.jsonl"
    ran = dlscope(
        tmp_path,
        "run",
        "squeezenet",
        "-n",
        "5",
        "--trace-level",
        "framework",
        "--trace-queries",
        "2",
        "--json",
        str(tmp_path / "result.json"),
        DLSCOPE_OTLP_ENDPOINT=f"file://{spans}",
    )
    assert ran.returncode in COMPLETED, ran.stderr
    assert "onnxruntime session profiling" in ran.stdout  # the trace levels, reported
    result = json.loads((tmp_path / "result.json").read_text())
    trace_id = result["trace_id"]
    evaluation_id = result["evaluation"]["evaluation_id"]

    chrome, otlp = tmp_path / "trace.json", tmp_path / "otlp.json"
    converted = dlscope(
        tmp_path,
        "trace",
        str(spans),
        "--trace-id",
        trace_id,
        "--chrome",
        str(chrome),
        "--otlp",
        str(otlp),
    )
    assert converted.returncode == 0, converted.stderr
    events: list[dict[str, Any]] = json.loads(chrome.read_text())["traceEvents"]
    processes = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert {"scheduler", "worker", "analyzer", "recorder"} <= processes
    slices = [e for e in events if e["ph"] == "X"]
    queries = [e for e in slices if e["cat"] == "framework" and e["name"].startswith("query")]
    nodes = [e for e in slices if e["cat"] == "framework" and "dlscope.layer.op_type" in e["args"]]
    assert len(queries) == 2
    assert {e["args"]["dlscope.layer.op_type"] for e in nodes} >= {"Conv", "Concat"}
    for node in nodes:  # each inside the query that ran it, on the same track
        (query,) = [q for q in queries if q["args"]["span_id"] == node["args"]["parent_id"]]
        assert query["ts"] <= node["ts"] <= query["ts"] + query["dur"]
    document = json.loads(otlp.read_text())
    ids = {
        span["traceId"]
        for group in document["resourceSpans"]
        for scope in group["scopeSpans"]
        for span in scope["spans"]
    }
    assert ids == {trace_id}

    shown = dlscope(tmp_path, "layers", evaluation_id, "--top", "3")
    assert shown.returncode == 0, shown.stderr
    assert "framework level: onnxruntime session profiling" in shown.stdout
    assert "time per op type" in shown.stdout

    # Without --trace-id, a file of several traces (every start-up is one) asks for one.
    traces = {
        span["traceId"]
        for line in spans.read_text().splitlines()
        for group in json.loads(line)["resourceSpans"]
        for scope in group["scopeSpans"]
        for span in scope["spans"]
    }
    assert len(traces) > 1
    unnamed = dlscope(tmp_path, "trace", str(spans), "--chrome", str(chrome))
    assert unnamed.returncode == 2
    assert "pick one with --trace-id" in " ".join(unnamed.stderr.split())
