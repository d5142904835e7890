"""Reports, figures and history through the gateway, embedded and on RabbitMQ + PostgreSQL:
the analyzer draws from the stored raw latencies; a report is one HTML file that needs no
network (no script, no link out, every chart inline as SVG), with the same numbers as CSV and
Markdown; the pages answer people with pages, including when something is not there."""

from __future__ import annotations

import csv
import io
import re
import uuid
from typing import Any

import pytest

from services.gateway.headers import DOCUMENT_POLICY, PAGE_POLICY
from tests.integration.conftest import Stack

SCENARIO = {"iterations": 200, "min_duration_s": 0, "warmup": 8}


async def completed(stack: Stack, **scenario: Any) -> dict[str, Any]:
    evaluation = await stack.evaluate("squeezenet", scenario={**SCENARIO, **scenario})
    assert evaluation["status"] == "completed", evaluation["error"]
    return evaluation


def offline(html: str) -> None:
    """Nothing in ``html`` loads from anywhere: no script, stylesheet or image by URL."""
    assert "<script" not in html
    assert not re.search(r"<link[^>]+href=", html)
    assert not re.search(r"""\ssrc=["']?(https?:)?//""", html)
    assert "@import" not in html


async def test_an_evaluation_report_opens_offline_with_every_chart(any_stack: Stack) -> None:
    evaluation = await completed(any_stack)
    evaluation_id = evaluation["id"]

    response = await any_stack.http.get(f"/v1/evaluations/{evaluation_id}/report")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    # Opened from the gateway as from a file: its inline styles, no script at all.
    assert response.headers["content-security-policy"] == DOCUMENT_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    html = response.text
    offline(html)
    # Histogram, CDF, latency over the run and the warm-up, each an inline SVG with marks.
    assert html.count("<svg") >= 4
    assert html.count('class="marks"') >= 4
    for words in ("Verdict", "Statistics", "Environment", "95% bootstrap confidence"):
        assert words in html
    assert evaluation_id in html

    table = await any_stack.http.get(f"/v1/evaluations/{evaluation_id}/report?format=csv")
    assert table.headers["content-type"].startswith("text/csv")
    (row,) = list(csv.DictReader(io.StringIO(table.text)))
    assert row["evaluation_id"] == evaluation_id
    assert float(row["headline_low_ms"]) <= float(row["headline_ms"])
    assert float(row["headline_ms"]) <= float(row["headline_high_ms"])
    assert row["verdict"] in ("VALID", "INVALID")
    assert int(row["queries"]) >= 200

    markdown = await any_stack.http.get(f"/v1/evaluations/{evaluation_id}/report?format=md")
    assert markdown.text.startswith("# dlscope report: squeezenet on onnxruntime (cpu)")
    assert "Statistics (ms, 95% intervals)" in markdown.text


async def test_figures_are_drawn_from_the_stored_latencies(any_stack: Stack) -> None:
    evaluation = await completed(any_stack)
    response = await any_stack.http.get(f"/v1/evaluations/{evaluation['id']}/figures")
    assert response.status_code == 200
    figures = response.json()
    (phase,) = figures["phases"]
    assert phase["count"] == evaluation["result"]["count"]
    binned = sum(b["count"] for b in phase["histogram"]) + phase["above_count"]
    assert binned == phase["count"]
    assert phase["cdf"][-1]["fraction"] == 1.0
    assert phase["cdf"][-1]["latency_ms"] == pytest.approx(evaluation["result"]["max_ms"])
    assert figures["warmup"]["latencies_ms"]

    missing = await any_stack.http.get(f"/v1/evaluations/{uuid.uuid4()}/figures")
    assert missing.status_code == 404


async def test_a_report_of_several_says_what_it_compares_and_what_it_cannot(
    any_stack: Stack,
) -> None:
    one = await completed(any_stack)
    two = await completed(any_stack)
    offline_run = await completed(any_stack, name="offline")
    # squeezenet takes batches of 1 only: this one fails, and is shown with its reason.
    failed = await any_stack.evaluate("squeezenet", scenario={**SCENARIO, "batch_size": 2})
    assert failed["status"] == "failed"
    unknown = uuid.uuid4()
    ids = [one["id"], two["id"], offline_run["id"], failed["id"], str(unknown)]
    response = await any_stack.http.get("/v1/reports", params={"id": ids, "format": "md"})
    assert response.status_code == 200
    text = response.text
    assert "Compared: 2 evaluations of squeezenet (single-stream, batch size 1, cpu)" in text
    assert "different scenarios or batch sizes are shown apart, not compared" in text
    assert f"Not found (neither an evaluation nor an experiment): {unknown}" in text
    assert f"Evaluation {failed['id']} is failed (predictor: " in text
    assert "shown, not compared" in text

    nothing = await any_stack.http.get("/v1/reports", params={"id": [str(unknown)]})
    assert nothing.status_code == 404
    assert str(unknown) in nothing.json()["detail"]
    not_an_id = await any_stack.http.get("/v1/reports", params={"id": ["x"]})
    assert not_an_id.status_code == 422
    bad_format = await any_stack.http.get(
        f"/v1/evaluations/{one['id']}/report", params={"format": "pdf"}
    )
    assert bad_format.status_code == 422


async def test_history_lists_the_evaluations_of_one_model_on_one_framework(
    any_stack: Stack,
) -> None:
    first = await completed(any_stack)
    second = await completed(any_stack)
    response = await any_stack.http.get(
        "/v1/history", params={"model": "squeezenet", "framework": "onnxruntime"}
    )
    assert response.status_code == 200
    points = response.json()["points"]
    assert [p["evaluation_id"] for p in points] == [first["id"], second["id"]]
    assert points[0]["changed"] == []
    unknown = await any_stack.http.get(
        "/v1/history", params={"model": "squeezenet", "framework": "caffe"}
    )
    assert unknown.status_code == 422
    assert unknown.json()["detail"][0]["loc"] == ["query", "framework"]


async def test_pages_answer_people_with_pages(any_stack: Stack) -> None:
    evaluation = await completed(any_stack)
    html = {"accept": "text/html"}
    page = await any_stack.http.get(f"/evaluations/{evaluation['id']}", headers=html)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert 'data-chart-for="chart-' in page.text  # the charts' specifications, for the browser
    assert "/static/vendor/vega-embed.min.js" in page.text
    # No inline script, no eval, no frame: the charts are drawn by the pages' own files.
    assert page.headers["content-security-policy"] == PAGE_POLICY
    assert page.headers["x-frame-options"] == "DENY"
    assert not re.search(r"<script(?![^>]*(\ssrc=|type=\"application/json\"))", page.text)

    for path in (f"/evaluations/{uuid.uuid4()}", f"/experiments/{uuid.uuid4()}", "/nowhere"):
        missing = await any_stack.http.get(path, headers=html)
        assert missing.status_code == 404, path
        assert "<h1>Not found</h1>" in missing.text
    not_an_id = await any_stack.http.get("/evaluations/not-an-id", headers=html)
    assert not_an_id.status_code == 404
    bad = await any_stack.http.get("/evaluations?framework=caffe", headers=html)
    assert bad.status_code == 422
    assert "framework: unknown value &#39;caffe&#39;" in bad.text
    listed = await any_stack.http.get(
        "/evaluations?framework=onnxruntime&status=completed&limit=25", headers=html
    )
    assert evaluation["id"] in listed.text
    # Scripts keep getting JSON from the API, whatever the path.
    assert (await any_stack.http.get("/nowhere")).json() == {"detail": "Not Found"}
    for static in ("/static/dlscope.js", "/static/vendor/vega.min.js"):
        assert (await any_stack.http.get(static)).status_code == 200
