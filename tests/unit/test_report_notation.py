"""A report and a page write what a person would: version numbers and figures as plain text
(``1.31.1``, ``85410``, never ``1\\.31.1`` or ``8\\.541e+04``), and a percentile with too few
queries in the one notation the command line uses, ``≥ x``, its legend said once."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup

from services.analyzer.summary import summarize
from services.gateway.ui.documents import EvaluationDocument, ExperimentDocument, ReportDocument
from services.gateway.ui.escaping import markdown_cell, markdown_text
from services.gateway.ui.rendering import format_ms, plain_number, render, stylesheet
from services.gateway.ui.report import _item, report_html, report_markdown
from services.gateway.ui.views import experiment_info
from shared.eventstore import EvaluationView, ExperimentView
from shared.measurement.statistics import BOUND_LEGEND
from tests.unit.test_result_summary import measured, phase

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def view(latencies_ms: list[float], **fields: Any) -> EvaluationView:
    values: dict[str, Any] = {
        "evaluation_id": uuid.uuid4(),
        "status": "completed",
        "model": "squeezenet",
        "model_version": "1.0.1",
        "framework": "onnxruntime",
        "hardware": "cpu",
        "agent_id": "worker-1",
        "host": "vm",
        "environment": {"framework_version": "1.31.1"},
        "attempts": 1,
        "trace_id": "0" * 32,
        "request": {},
        "result": summarize(measured(phase(latencies_ms))),
        "error": None,
        "requested_at": NOW,
        "updated_at": NOW,
        "last_position": 1,
    }
    return EvaluationView(**{**values, **fields})


def document(*views: EvaluationView) -> EvaluationDocument:
    return EvaluationDocument(
        view=views[0], trace_url="http://jaeger/trace/0", figures=None, events=[]
    )


# 100 queries: enough for p50 and p90 (11 and 64), too few for p99 (662).
HUNDRED = [float(i) for i in range(1, 101)]
# Figures of tens of seconds: 85 410 ms and the like.
SLOW = [85_000.0 + 10 * i for i in range(100)]


def report(*views: EvaluationView) -> ReportDocument:
    return ReportDocument(
        experiments=[],
        evaluations=[document(v) for v in views],
        notes=["squeezenet 1.0.1 on onnxruntime 1.31.1"],
        not_found=[],
    )


def test_numbers_are_plain_decimals_never_exponents() -> None:
    assert plain_number(85410.0) == "85410"
    assert plain_number(8.5412) == "8.541"
    assert plain_number(80.0) == "80"
    assert plain_number(0.0001234) == "0.0001234"
    assert format_ms(85410.0) == "85410 ms"


def test_a_markdown_report_writes_versions_and_numbers_as_they_are() -> None:
    markdown = report_markdown(report(view(SLOW)))
    assert "1.31.1" in markdown
    assert "1\\.31" not in markdown
    assert "1.0.1" in markdown
    assert "e+0" not in markdown
    assert "\\." not in markdown, markdown
    assert "| 1 | 100 | 85495 ± 290.1 |" in markdown


def test_a_cell_escapes_markdown_but_not_what_only_opens_a_block_at_a_line_start() -> None:
    assert markdown_cell("1.31.1") == "1.31.1"
    assert markdown_cell("-0.3") == "-0.3"
    assert markdown_cell("a|b [x](y)") == "a\\|b \\[x\\](y)"
    assert markdown_text("1.31.1") == "1.31.1", "a version opens no ordered list"
    assert markdown_text("1. first") == "1\\. first"


def test_a_markdown_report_marks_each_bound_with_the_cli_notation_and_its_legend() -> None:
    markdown = report_markdown(report(view(HUNDRED)))
    row = next(line for line in markdown.splitlines() if line.startswith("| 1 | 100 |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    header = next(line for line in markdown.splitlines() if line.startswith("| batch |"))
    labels = [cell.strip() for cell in header.strip("|").split("|")]
    shown = dict(zip(labels, cells, strict=True))
    assert shown["p99"].startswith("≥ "), shown
    assert not shown["p90"].startswith("≥"), shown
    assert "≤" not in markdown
    assert markdown.count(markdown_text(BOUND_LEGEND)) == 1


def test_a_page_marks_each_bound_with_the_cli_notation_and_its_legend() -> None:
    html = report_html(report(view(HUNDRED)))
    assert "≤" not in html
    assert "(bound)" not in html
    assert '<span class="bound" title="bound: fewer than the 662 queries needed">≥ </span>' in html
    assert BOUND_LEGEND.replace("'", "&#39;") in html


def experiment_of(members: list[EvaluationView], *, model: str) -> ExperimentDocument:
    """A compared experiment of ``members``, each with its evaluation's details."""
    frameworks = [member.framework for member in members]
    return ExperimentDocument(
        view=ExperimentView(
            experiment_id=uuid.uuid4(),
            status="compared",
            model=model,
            trace_id="0" * 32,
            request={"frameworks": frameworks},
            members=None,
            skipped=None,
            comparison=None,
            error=None,
            requested_at=NOW,
            updated_at=NOW,
            last_position=1,
        ),
        trace_url="http://jaeger/trace/0",
        members=members,
        figures={},
        details=[document(member) for member in members],
    )


def test_an_experiments_page_marks_its_members_p50_and_p99_where_they_are_bounds() -> None:
    member = view(HUNDRED)
    experiment = experiment_of([member], model="squeezenet")
    info = experiment_info(experiment)
    assert info["bounded"]
    assert info["rows"][0]["p99"].bound
    assert not info["rows"][0]["p50"].bound
    html = render(
        "report.html",
        document=ReportDocument(experiments=[experiment], evaluations=[], notes=[], not_found=[]),
        experiments=[
            {"document": experiment, "info": info, "members": [_item(experiment.details[0])]}
        ],
        evaluations=[],
        groups=[],
        chart=lambda spec: Markup(""),
        css=stylesheet(),
        version="test",
    )
    comparison = html[html.index('<table id="comparison">') : html.index("</table>")]
    assert comparison.count("≥ </span>") == 1, "the p99 of 100 queries, and only it"
    assert BOUND_LEGEND.replace("'", "&#39;") in html
