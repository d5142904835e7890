"""What the data says is shown as written in every form a report takes, never read as markup:
a Markdown report forges no link, image, HTML, code or table cell from a model's name, a
host's or an error message; a CSV report's text cells start no spreadsheet formula, and its
numbers stay numbers; the HTML report stays escaped; JSON in a page's script element cannot
end it."""

from __future__ import annotations

import csv
import io
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from markdown_it import MarkdownIt

from services.analyzer.summary import summarize
from services.gateway.ui.documents import EvaluationDocument, ReportDocument
from services.gateway.ui.escaping import markdown_text, script_json, spreadsheet_cell
from services.gateway.ui.report import report_csv, report_html, report_markdown
from shared.eventstore import EvaluationView
from tests.unit.test_result_summary import measured, phase

SCRIPT = "</script><script>alert(1)</script>"
COMMENT = "<!-- hidden -->"
LINK = "[click me](https://evil.example) ![pixel](https://evil.example/p.png)"
CELL = "a | b | c"
CODE = "`rm -rf /` ```"
FORMULA = '=HYPERLINK("https://evil.example","x")'
HOSTILE = [SCRIPT, COMMENT, LINK, CELL, CODE, FORMULA, "- item", "# heading", "1. first"]


def view(status: str, **fields: Any) -> EvaluationView:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    values: dict[str, Any] = {
        "evaluation_id": uuid.uuid4(),
        "status": status,
        "model": f"squeezenet {LINK}",
        "model_version": FORMULA,
        "framework": "onnxruntime",
        "hardware": "cpu",
        "agent_id": "worker-1",
        "host": f"{SCRIPT} {CELL}",
        "environment": {
            "framework_version": f"@SUM(A1) {CODE}",
            "cpu_model": f"-2+3 {COMMENT}",
            "kernel": "\n".join(HOSTILE),
        },
        "attempts": 1,
        "trace_id": "0" * 32,
        "request": {},
        "result": None,
        "error": None,
        "requested_at": now,
        "updated_at": now,
        "last_position": 1,
    }
    return EvaluationView(**{**values, **fields})


@pytest.fixture
def document() -> ReportDocument:
    summary = summarize(measured(phase([float(i) for i in range(1, 101)])))
    completed = view("completed", result=summary)
    failed = view("failed", error="predictor: " + " ".join(HOSTILE))
    return ReportDocument(
        experiments=[],
        evaluations=[
            EvaluationDocument(view=v, trace_url="http://jaeger/trace/0", figures=None, events=[])
            for v in (completed, failed)
        ],
        notes=[f"Evaluation {failed.evaluation_id} is failed ({failed.error})", *HOSTILE],
        not_found=[],
    )


def inline_tokens(tokens: list[Any]) -> list[Any]:
    found = []
    for token in tokens:
        found.append(token)
        found.extend(inline_tokens(token.children or []))
    return found


def test_a_markdown_report_shows_the_data_as_text(document: ReportDocument) -> None:
    text = report_markdown(document)
    parser = MarkdownIt("commonmark").enable("table").enable("strikethrough")
    tokens = inline_tokens(parser.parse(text))
    types = {token.type for token in tokens}
    # No markup came from the data: no HTML, link, image or code, and no heading or list
    # but the report's own.
    for forged in ("html_inline", "html_block", "link_open", "image", "fence", "code_block"):
        assert forged not in types, forged
    ids = {str(e.view.evaluation_id) for e in document.evaluations}
    assert {t.content for t in tokens if t.type == "code_inline"} == ids  # the report's own
    assert "ordered_list_open" not in types
    headings = [t for t in tokens if t.type == "inline" and t.level == 1]
    assert not any(h.content.startswith(("heading", "\\# heading")) for h in headings)
    # Every row of every table has as many cells as its header.
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---"):
            width = lines[i - 1].count(" | ")
            for row in lines[i + 1 :]:
                if not row.startswith("| "):
                    break
                assert row.replace("\\|", "").count(" | ") == width, row
    # ... and the data is there, as written.
    html = parser.render(text)
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "[click me](https://evil.example)" in html
    assert "&lt;!-- hidden --&gt;" in html
    assert "`rm -rf /` ```" in html
    assert "a | b | c" in html
    assert "<script" not in html
    assert "<a " not in html
    assert "<img" not in html


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("<b>x</b>", "\\<b\\>x\\</b\\>"),
        ("[x](y)", "\\[x\\](y)"),
        ("a|b", "a\\|b"),
        ("`x`", "\\`x\\`"),
        ("*x* _y_ ~z~", "\\*x\\* \\_y\\_ \\~z\\~"),
        ("a & b", "a \\& b"),
        ("- x", "\\- x"),
        ("+ x", "\\+ x"),
        ("12. x", "12\\. x"),
        ("3) x", "3\\) x"),
        ("# x", "\\# x"),
        ("> x", "\\> x"),
        ("one\ntwo\r\nthree\u2028four", "one two three four"),
        ("  indented", "indented"),
        ("back\\slash", "back\\\\slash"),
        ("squeezenet 1.0.1 (cpu), p90", "squeezenet 1.0.1 (cpu), p90"),
    ],
)
def test_markdown_text_escapes_what_markdown_would_read(value: str, shown: str) -> None:
    assert markdown_text(value) == shown


def test_a_csv_report_starts_no_formula_and_keeps_its_numbers(document: ReportDocument) -> None:
    rows = list(csv.DictReader(io.StringIO(report_csv(document))))
    assert len(rows) == 2
    for row in rows:
        for column, value in row.items():
            assert not value.startswith(("=", "+", "-", "@", "\t", "\r")), (column, value)
        assert row["model_version"] == "'" + FORMULA
        assert row["framework_version"].startswith("'@SUM(A1)")
        assert row["cpu_model"].startswith("'-2+3")
    completed = rows[0]
    assert float(completed["p50_ms"]) == pytest.approx(50.5, rel=0.02)
    assert int(completed["queries"]) == 100
    assert rows[1]["error"].startswith("predictor: ")


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("\uff1d1+1", "'\uff1d1+1"),
        ("squeezenet", "squeezenet"),
        ("", ""),
        (-1.5, -1.5),
        (-3, -3),
        (None, None),
        (True, True),
    ],
)
def test_spreadsheet_cell_quotes_text_that_starts_a_formula(value: Any, cell: Any) -> None:
    assert spreadsheet_cell(value) == cell


def test_the_html_report_stays_escaped(document: ReportDocument) -> None:
    html = report_html(document)
    assert "<script" not in html
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<!-- hidden -->" not in html


@pytest.mark.parametrize(
    "value",
    [
        {"task": "<!--<script>", "name": "</script><script>alert(1)</script>"},
        {"text": "a & b > c \u2028 \u2029", "list": ['"><img src=x onerror=alert(1)>']},
    ],
)
def test_json_in_a_script_element_cannot_end_it_and_reads_back(value: Any) -> None:
    embedded = str(script_json(value))
    for unsafe in ("<", ">", "&", "\u2028", "\u2029"):
        assert unsafe not in embedded
    assert json.loads(embedded) == value


def test_a_language_models_reports_lead_with_its_token_figures() -> None:
    from shared.messages import Scenario
    from tests.unit.test_result_summary import served_generation

    scenario = Scenario(name="server", target_qps=4.0, iterations=64, max_new_tokens=16)
    served = view("completed", model="smollm2", result=summarize(served_generation(scenario)))
    document = ReportDocument(
        experiments=[],
        evaluations=[
            EvaluationDocument(
                view=served, trace_url="http://jaeger/trace/0", figures=None, events=[]
            )
        ],
        notes=[],
        not_found=[],
    )
    markdown = report_markdown(document)
    # The stub run's first chunk came 80 ms after each arrival, then one every 20 ms.
    assert markdown.index("# Tokens") < markdown.index("# Statistics")
    # p99 of 64 values is a bound (too few to estimate it), and said to be
    assert "- TTFT p50 / p99: 80 / ≥ 80 ms" in markdown
    assert "- TPOT p50 / p99: 20 / ≥ 20 ms" in markdown
    assert "- timed requests: 64, 0 failed (never samples)" in markdown
    assert "| TTFT | 64 | 80 | 80 \\[80, 80\\] |" in markdown
    (row,) = csv.DictReader(io.StringIO(report_csv(document)))
    assert float(row["ttft_p50_ms"]) == pytest.approx(80.0, abs=0.01)
    assert float(row["tpot_p50_ms"]) == pytest.approx(20.0, abs=0.01)
    assert float(row["output_tokens_per_s"]) > 0
    assert row["failed_requests"] == "0"
    # and an image model's row leaves them blank
    image = summarize(measured(phase([float(i) for i in range(1, 101)])))
    other = ReportDocument(
        experiments=[],
        evaluations=[
            EvaluationDocument(
                view=view("completed", result=image), trace_url="t", figures=None, events=[]
            )
        ],
        notes=[],
        not_found=[],
    )
    (blank,) = csv.DictReader(io.StringIO(report_csv(other)))
    assert blank["ttft_p50_ms"] == ""


def test_a_failed_evaluation_says_why_it_has_no_verdict(document: ReportDocument) -> None:
    html = report_html(document)
    assert "No verdict: it failed before anything was measured to judge" in html
    assert "No verdict until it completes" not in html  # neither of the two is still running
