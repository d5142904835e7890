"""Without a Jaeger: ``dlscope run`` at trace level ``framework``, with no exporter
configured, keeps its spans in a file under DLSCOPE_HOME (or where
``DLSCOPE_OTLP_ENDPOINT=file://...`` says) and points to ``dlscope trace <id>``, not to a
Jaeger; ``dlscope trace`` turns the evaluation's trace into Chrome trace JSON
(chrome://tracing, Perfetto) and OTLP JSON; and ``dlscope layers`` reads the layers back
from the embedded event store, ranked as the run printed them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dlscope.cli.outcome import COMPLETED
from shared.config import REPOSITORY_ROOT
from shared.trace_files import default_trace_file, read_spans

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


def _top_layers(stdout: str) -> list[str]:
    """The layer names of the first per-layer table printed (its rows start with a name)."""
    rows = stdout.split("framework level: onnxruntime session profiling", 1)[1]
    rows = rows.split("time per op type", 1)[0]
    return [line.split("│")[1].strip() for line in rows.splitlines() if line.startswith("│ ")]


def test_a_run_without_an_exporter_points_to_dlscope_trace_and_counts_its_spans(
    tmp_path: Path,
) -> None:
    ran = dlscope(tmp_path, "run", "squeezenet", "-n", "5", "--trace-level", "framework")
    assert ran.returncode in COMPLETED, ran.stderr
    assert "16686" not in ran.stdout  # no link to a Jaeger nobody started
    trace_id = re.search(r"trace ([0-9a-f]{32}): dlscope trace \1", ran.stdout)
    assert trace_id is not None, ran.stdout
    kept = read_spans(default_trace_file(tmp_path), trace_id[1])
    services = sum("dlscope.trace_level" not in span.attributes for span in kept)
    (application,) = [line for line in ran.stdout.splitlines() if "│ application" in line]
    assert application.split("│")[-2].strip() == str(services) != "0"

    shown = dlscope(tmp_path, "trace", trace_id[1])
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[1].startswith("dlscope run  ")
    assert f"{len(kept)} spans" in shown.stdout.splitlines()[0]

    # The run printed its layers in the order ``dlscope layers`` lists them.
    evaluation_id = re.search(r"evaluation ([0-9a-f-]{36}), trace", ran.stdout)
    assert evaluation_id is not None
    listed = dlscope(tmp_path, "layers", evaluation_id[1])
    assert listed.returncode == 0, listed.stderr
    assert _top_layers(ran.stdout) == _top_layers(listed.stdout) != []


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
