"""Every report says what a result cost and what else used the machine: CPU per query, peak
memory, energy or why it was not measured, and each timed window, in HTML, CSV and
Markdown; a figure the machine did not give is said to be missing, never written as 0."""

from __future__ import annotations

import csv
import io

import pytest

from services.analyzer.summary import summarize
from services.gateway.ui.documents import EvaluationDocument, ReportDocument
from services.gateway.ui.report import report_csv, report_html, report_markdown
from shared.measurement.cost import JobReadings, PeakMemory
from shared.measurement.noise import NoiseProbe
from shared.messages import EvaluationMeasured
from tests.unit.test_costs import measured, window
from tests.unit.test_report_escaping import view

# A reason a machine gives may hold anything: a path, an exception's text.
HOSTILE_REASON = "not measured: /x/energy_uj | [link](https://evil.example) is root's"


@pytest.fixture
def document() -> ReportDocument:
    seen = window(own_cpu_s=3.6).model_copy(update={"not_exposed": {"energy": HOSTILE_REASON}})
    readings = JobReadings(
        noise=NoiseProbe(before_ns=2_400_000, after_ns=2_460_000),
        peak_memory=PeakMemory(bytes=300 * 2**20, scope="job", method="VmHWM"),
    )
    return report_of(measured(seen, readings))


def report_of(measurement: EvaluationMeasured) -> ReportDocument:
    """The report of one completed evaluation with ``measurement``."""
    summary = summarize(measurement)
    completed = view("completed", result=summary)
    return ReportDocument(
        experiments=[],
        evaluations=[
            EvaluationDocument(
                view=completed, trace_url="http://jaeger/trace/0", figures=None, events=[]
            )
        ],
        notes=[],
        not_found=[],
    )


def test_the_csv_has_the_cost_and_the_window_as_numbers(document: ReportDocument) -> None:
    (row,) = csv.DictReader(io.StringIO(report_csv(document)))
    assert float(row["cpu_s_per_query"]) == pytest.approx(0.009)
    assert int(row["peak_memory_bytes"]) == 300 * 2**20
    assert row["peak_memory_scope"] == "job"
    assert row["energy_j_per_query"] == ""  # not measured: empty, never 0
    assert row["energy_note"] == HOSTILE_REASON
    assert float(row["other_cores"]) == pytest.approx(0.02)
    assert row["cpus"] == "2"
    assert float(row["noise_probe_shift"]) == pytest.approx(0.025)
    assert row["window_started_at"] == "2023-11-14 22:13:20.000"


def test_the_markdown_says_the_cost_and_escapes_what_the_machine_said(
    document: ReportDocument,
) -> None:
    text = report_markdown(document)
    assert "### Cost, and the machine while timed" in text
    assert "- CPU per query: 9 ms of CPU" in text
    assert "- peak memory: 300 MiB over the job" in text
    # A value's leading number is written as it is: "0.02" opens no ordered list ("0. " would).
    assert "- other processes: 0.02 of 2 cores" in text
    assert "Noise probe: 2.400 ms before the warm-up, 2.460 ms after the timed queries" in text
    assert "\\| \\[link\\](https://evil.example)" in text  # shown as text, no cell, no link


def test_the_html_report_shows_the_cost_beside_the_headline(document: ReportDocument) -> None:
    html = report_html(document)
    assert "CPU per query" in html
    assert "9 ms" in html
    assert "300 MiB" in html
    assert "Timed window" in html
    assert "[link](https://evil.example)" in html  # as text: escaped by the template
    assert '<a href="https://evil.example' not in html


def test_a_gpu_runs_device_memory_is_in_every_report() -> None:
    seen = window(own_cpu_s=3.6).model_copy(
        update={"gpu_processes": (), "device_memory_bytes": 1536 * 2**20}
    )
    document = report_of(measured(seen, JobReadings()))
    (row,) = csv.DictReader(io.StringIO(report_csv(document)))
    assert int(row["device_memory_bytes"]) == 1536 * 2**20
    assert "- device memory: 1,536 MiB held by the framework process on the GPU" in (
        report_markdown(document)
    )
    assert "1,536 MiB held by the framework process on the GPU" in report_html(document)


def test_a_drawn_workload_is_said_where_the_report_says_what_ran() -> None:
    summary = summarize(measured(window(own_cpu_s=3.6), JobReadings()))
    scenario = {
        "input_tokens": {"distribution": "uniform", "min": 16, "max": 96},
        "output_tokens": {"distribution": "normal", "mean": 24, "stddev": 8.0, "min": 1},
    }
    asked = view("completed", result=summary, request={"scenario": scenario})
    document = ReportDocument(
        experiments=[],
        evaluations=[
            EvaluationDocument(view=asked, trace_url="http://jaeger/t", figures=None, events=[])
        ],
        notes=[],
        not_found=[],
    )
    html = report_html(document)
    assert "prompts of uniform 16-96, outputs of normal 24±8 in 1-56 tokens, seeded" in html


def test_a_replayed_trace_is_said_where_the_report_says_what_ran() -> None:
    summary = summarize(measured(window(own_cpu_s=3.6), JobReadings()))
    replay = {
        "source": "day.jsonl, sha256 0123456789abcdef",
        "at_ms": [0, 1500, 3000],
        "input_tokens": [10, 20, 30],
        "output_tokens": [5, 6, 7],
    }
    asked = view("completed", result=summary, request={"scenario": {"replay": replay}})
    document = ReportDocument(
        experiments=[],
        evaluations=[
            EvaluationDocument(view=asked, trace_url="http://jaeger/t", figures=None, events=[])
        ],
        notes=[],
        not_found=[],
    )
    assert (
        "replay of 3 requests over 3.0 s (day.jsonl, sha256 0123456789abcdef): each request at "
        "its time in the trace, with its prompt and output lengths"
    ) in report_html(document)
