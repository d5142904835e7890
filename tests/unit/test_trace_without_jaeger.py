"""A trace is seen where it was kept: a link to Jaeger only where spans go to a collector;
otherwise ``dlscope trace <id>`` prints it from the spans file that ``dlscope run`` keeps
under DLSCOPE_HOME, which is rotated before it fills the disk. What a run says it wrote is
what this process exported, the services' own spans included."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from typer.testing import CliRunner

from dlscope.cli import app
from dlscope.embedded import embedded_settings
from services.analyzer.summary import summarize
from services.gateway.ui.documents import EvaluationDocument, ReportDocument
from services.gateway.ui.report import report_html, report_markdown
from shared.config import Settings
from shared.telemetry import SpanCounter, trace_id_hex
from shared.trace_files import OtlpJsonFileExporter, default_trace_file, read_kept_spans
from tests.unit.test_report_escaping import view
from tests.unit.test_result_summary import measured, phase


def test_a_link_to_jaeger_only_where_spans_go_to_a_collector(tmp_path: Path) -> None:
    trace_id = "ab" * 16
    nothing = Settings(home=tmp_path)
    assert nothing.trace_url(trace_id) is None
    assert "not exported: set DLSCOPE_OTLP_ENDPOINT" in nothing.trace_where(trace_id)

    to_file = Settings(home=tmp_path, otlp_endpoint=f"file://{tmp_path}/spans.jsonl")
    assert to_file.trace_url(trace_id) is None
    assert to_file.trace_where(trace_id) == (
        f"dlscope trace {trace_id} (spans in {tmp_path}/spans.jsonl)"
    )

    collector = Settings(home=tmp_path, otlp_endpoint="http://jaeger:4318")
    assert collector.trace_url(trace_id) == f"http://localhost:16686/trace/{trace_id}"
    assert collector.trace_where(trace_id) == collector.trace_url(trace_id)


def test_the_embedded_mode_keeps_its_spans_under_home_unless_told_otherwise(
    tmp_path: Path,
) -> None:
    kept = embedded_settings(Settings(home=tmp_path))
    assert kept.trace_file == default_trace_file(tmp_path)
    collector = embedded_settings(Settings(home=tmp_path, otlp_endpoint="http://jaeger:4318"))
    assert collector.otlp_endpoint == "http://jaeger:4318"


def _traced(path: Path, *names: str, max_bytes: int | None = None) -> tuple[str, SpanCounter]:
    """Spans ``names`` (the first the root of the others) written to ``path`` as dlscope
    writes them; the trace id, and what a counter beside the exporter counted."""
    counter = SpanCounter()
    provider = TracerProvider()
    exporter = (
        OtlpJsonFileExporter(path)
        if max_bytes is None
        else OtlpJsonFileExporter(path, max_bytes=max_bytes)
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(counter)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span(names[0]) as root:
        for name in names[1:]:
            level = {"dlscope.trace_level": "model"} if name.startswith("query") else {}
            tracer.start_span(name, attributes=level).end()
    provider.shutdown()
    return trace_id_hex(root.get_span_context()), counter


def test_dlscope_trace_prints_a_run_s_trace_from_the_file_under_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DLSCOPE_OTLP_ENDPOINT", raising=False)
    monkeypatch.setenv("DLSCOPE_HOME", str(tmp_path))
    trace_id, counter = _traced(
        default_trace_file(tmp_path), "dlscope run", "job.onnxruntime.cpu process", "query 0"
    )
    _traced(default_trace_file(tmp_path), "agent.heartbeat publish")  # another trace
    # What the run says it wrote: the services' spans apart from each level's.
    assert counter.of(trace_id) == {None: 2, "model": 1}

    shown = CliRunner().invoke(app, ["trace", trace_id])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[0] == f"trace {trace_id}: 3 spans in {default_trace_file(tmp_path)}"
    assert lines[1].startswith("dlscope run  ")
    assert lines[2].startswith("  job.onnxruntime.cpu process  ")
    assert "agent.heartbeat" not in shown.output

    chrome = tmp_path / "trace.json"
    written = CliRunner().invoke(app, ["trace", trace_id, "--chrome", str(chrome)])
    assert written.exit_code == 0, written.output
    assert chrome.exists()

    missing = CliRunner().invoke(app, ["trace", "0" * 32])
    assert missing.exit_code == 2
    assert f"no span of trace {'0' * 32}" in " ".join(missing.output.split())


def test_a_home_without_spans_says_where_spans_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DLSCOPE_OTLP_ENDPOINT", raising=False)
    monkeypatch.setenv("DLSCOPE_HOME", str(tmp_path))
    shown = CliRunner().invoke(app, ["trace", "ab" * 16])
    assert shown.exit_code == 2
    said = " ".join(shown.output.split())
    assert f"no spans file {default_trace_file(tmp_path)}" in said
    assert "dlscope run keeps the spans of the runs it makes here" in said


def test_a_full_trace_file_is_rotated_and_both_halves_are_read(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    first, _ = _traced(path, "first run", "query 0")
    full = path.stat().st_size
    # Past its cap, the file is set aside as it is written to next, and a new one begun.
    second, _ = _traced(path, "second run", "query 0", max_bytes=full - 1)
    assert {s.trace_id for s in read_kept_spans(tmp_path / "traces.jsonl.1")} == {first}
    assert {span.trace_id for span in read_kept_spans(path)} == {first, second}


def test_a_report_without_a_collector_says_how_to_see_the_trace_instead_of_linking(
    tmp_path: Path,
) -> None:
    settings = embedded_settings(Settings(home=tmp_path))
    evaluation = view("completed", result=summarize(measured(phase([1.0] * 10))))
    trace_id = evaluation.trace_id
    document = ReportDocument(
        experiments=[],
        evaluations=[
            EvaluationDocument(
                view=evaluation,
                trace_url=settings.trace_url(trace_id),
                trace_where=settings.trace_where(trace_id),
                figures=None,
                events=[],
            )
        ],
        notes=[],
        not_found=[],
    )
    html = report_html(document)
    assert "open in Jaeger" not in html
    assert f"dlscope trace {trace_id}" in html
    assert f"- trace: dlscope trace {trace_id}" in report_markdown(document).replace("\\", "")
