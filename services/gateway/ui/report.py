"""A report in three forms from one document: a self-contained HTML file (styles inline,
charts inline as SVG, no script, so it opens offline anywhere), the same numbers as CSV (one
row per evaluation) and as Markdown.

What the data says is shown as written in each form, never read as markup: the HTML is
autoescaped, a Markdown value has its markup characters escaped (``markdown_text``), a CSV
cell that a spreadsheet would take for a formula starts with ``'`` (``spreadsheet_cell``)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

from services.gateway.ui.documents import EvaluationDocument, ExperimentDocument, ReportDocument
from services.gateway.ui.escaping import markdown_cell, spreadsheet_cell
from services.gateway.ui.escaping import markdown_text as _md
from services.gateway.ui.machine import cost_columns, cpu_text, memory_text
from services.gateway.ui.rendering import NONE, plain_number, render, stylesheet, svg_chart
from services.gateway.ui.views import (
    EXPLANATIONS,
    evaluation_info,
    experiment_info,
    headline_of,
    llm_headline,
    parity_matrix,
    throughput_of,
)
from shared.measurement.statistics import BOUND_LEGEND, BOUND_MARK
from shared.messages import LatencySummary, PairParity

__all__ = ["FORMATS", "MEDIA_TYPES", "ReportFormat", "report_csv", "report_html", "report_markdown"]

ReportFormat = Literal["html", "csv", "md"]
FORMATS: tuple[ReportFormat, ...] = ("html", "csv", "md")
MEDIA_TYPES: dict[ReportFormat, str] = {
    "html": "text/html; charset=utf-8",
    "csv": "text/csv; charset=utf-8",
    "md": "text/markdown; charset=utf-8",
}


def _version() -> str:
    try:
        return version("dlscope")
    except PackageNotFoundError:
        return "unknown"


def report_html(document: ReportDocument) -> str:
    """The report as one HTML file. Renders every chart (tens of ms each): call it off the
    event loop."""
    evaluations = [_item(d) for d in document.evaluations]
    by_id = {item["document"].view.evaluation_id: item for item in evaluations}
    return render(
        "report.html",
        document=document,
        experiments=[
            {
                "document": e,
                "info": experiment_info(e),
                "members": [_item(member) for member in e.details],
            }
            for e in document.experiments
        ],
        evaluations=evaluations,
        groups=[[by_id[d.view.evaluation_id] for d in group] for group in document.groups],
        chart=svg_chart,
        css=stylesheet(),
        version=_version(),
    )


def _item(document: EvaluationDocument) -> dict[str, Any]:
    return {"document": document, "info": evaluation_info(document)}


# --- CSV ------------------------------------------------------------------------------------

# A language model's token figures (blank for any other evaluation): the headline
# percentile is its TTFT's and TPOT's own (``llm_headline``).
_TOKEN_COLUMNS = (
    "ttft_p50_ms",
    "ttft_headline_ms",
    "tpot_p50_ms",
    "tpot_headline_ms",
    "output_tokens_per_s",
    "goodput_per_s",
    "requests_per_s",
    "failed_requests",
)
COLUMNS = (
    "experiment_id",
    "evaluation_id",
    "model",
    "model_version",
    "framework",
    "framework_version",
    "hardware",
    "host",
    "cpu_model",
    "status",
    "scenario",
    "batch_size",
    "queries",
    "headline",
    "headline_ms",
    "headline_low_ms",
    "headline_high_ms",
    "headline_is_bound",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "mean_ms",
    "std_ms",
    "throughput_per_s",
    "throughput_low",
    "throughput_high",
    *_TOKEN_COLUMNS,
    "top1",
    "top5",
    "verdict",
    "verdict_reasons",
    "cpu_s_per_query",
    "peak_memory_bytes",
    "peak_memory_scope",
    "device_memory_bytes",
    "energy_j_per_query",
    "energy_note",
    "other_cores",
    "cpus",
    "steal_share",
    "noise_probe_shift",
    "window_started_at",
    "window_ended_at",
    "parity_vs_reference",
    "parity_max_rel_error",
    "parity_top1_agreement",
    "parity_min_cosine",
    "error",
    "requested_at",
)


def report_csv(document: ReportDocument) -> str:
    """One row per evaluation (experiment members first), every number with its interval."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in _rows(document):
        writer.writerow({key: spreadsheet_cell(value) for key, value in row.items()})
    return out.getvalue()


def _rows(document: ReportDocument) -> Iterator[dict[str, Any]]:
    for experiment in document.experiments:
        parity = _reference_parity(experiment)
        for member in experiment.details:
            yield _csv_row(member, str(experiment.view.experiment_id), parity)
    for evaluation in document.evaluations:
        yield _csv_row(evaluation, evaluation.experiment_id or "", {})


def _reference_parity(experiment: ExperimentDocument) -> dict[str, PairParity]:
    comparison = experiment.comparison
    if comparison is None or comparison.reference is None:
        return {}
    found = {}
    for pair in comparison.parity:
        if pair.reference == comparison.reference:
            found[str(pair.candidate)] = pair
        elif pair.candidate == comparison.reference:
            found[str(pair.reference)] = pair
    return found


def _csv_row(
    document: EvaluationDocument, experiment_id: str, parity: dict[str, PairParity]
) -> dict[str, Any]:
    view, summary = document.view, document.summary
    environment = view.environment or {}
    row: dict[str, Any] = {
        "experiment_id": experiment_id,
        "evaluation_id": str(view.evaluation_id),
        "model": view.model,
        "model_version": view.model_version,
        "framework": view.framework,
        "framework_version": environment.get("framework_version", ""),
        "hardware": view.hardware,
        "host": view.host,
        "cpu_model": environment.get("cpu_model", ""),
        "status": view.status,
        "error": view.error or "",
        "requested_at": view.requested_at.isoformat(),
    }
    pair = parity.get(str(view.evaluation_id))
    if pair is not None:
        row |= {
            "parity_vs_reference": "within" if pair.within_tolerance else "outside",
            "parity_max_rel_error": pair.max_rel_error,
            "parity_top1_agreement": pair.top1_agreement,
            "parity_min_cosine": pair.min_cosine,
        }
    if summary is None:
        return row
    headline, throughput = headline_of(summary), throughput_of(summary)
    assert headline is not None, "a summary has a headline"
    assert throughput is not None, "and a throughput"
    return row | {
        "scenario": summary.scenario.name,
        "batch_size": summary.batch_size,
        "queries": summary.count,
        "headline": summary.headline,
        "headline_ms": headline.value,
        "headline_low_ms": headline.low,
        "headline_high_ms": headline.high,
        "headline_is_bound": headline.bound,
        "p50_ms": summary.p50_ms,
        "p90_ms": summary.p90_ms,
        "p99_ms": summary.p99_ms,
        "mean_ms": summary.mean_ms,
        "std_ms": summary.std_ms,
        "throughput_per_s": throughput.value,
        "throughput_low": throughput.low,
        "throughput_high": throughput.high,
        "top1": None if summary.accuracy is None else summary.accuracy.top1,
        "top5": None if summary.accuracy is None else summary.accuracy.top5,
        "verdict": None if summary.verdict is None else summary.verdict.status,
        "verdict_reasons": ""
        if summary.verdict is None
        else "; ".join(r.code for r in summary.verdict.reasons),
        **cost_columns(summary),
        **_token_columns(summary),
    }


def _token_columns(summary: LatencySummary) -> dict[str, Any]:
    """A language model's token figures, blank for any other evaluation (one header for a
    report of both)."""
    llm = llm_headline(summary)
    if llm is None:
        return dict.fromkeys(_TOKEN_COLUMNS)

    def value(estimate: Any) -> float | None:
        return None if estimate is None else estimate.value

    return {
        "ttft_p50_ms": value(llm["ttft_median"]),
        "ttft_headline_ms": value(llm["ttft_headline"]),
        "tpot_p50_ms": value(llm["tpot_median"]),
        "tpot_headline_ms": value(llm["tpot_headline"]),
        "output_tokens_per_s": llm["tokens_per_s"],
        "goodput_per_s": llm["goodput_per_s"],
        "requests_per_s": llm["requests_per_s"],
        "failed_requests": llm["failed"],
    }


# --- Markdown -------------------------------------------------------------------------------


def report_markdown(document: ReportDocument) -> str:
    """The report as Markdown: every value from the data through ``_md`` (or a table cell),
    so that none can add a link, an image, HTML, code or a cell of its own."""
    lines = [
        f"# {_md(document.title)}",
        "",
        f"Generated {document.generated_at:%Y-%m-%d %H:%M:%S %Z} by dlscope {_version()}.",
        "",
        "## What this report compares",
        "",
        *(f"- {_md(note)}" for note in document.notes),
        "",
    ]
    for experiment in document.experiments:
        lines += _experiment_markdown(experiment)
    for evaluation in document.evaluations:
        lines += _evaluation_markdown(evaluation, level=2)
    return "\n".join(lines).rstrip() + "\n"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A table whose every cell, header included, is text (escaped); where a cell is a
    bound, the legend under it says once what that means."""
    cells = [[markdown_cell(c) for c in row] for row in rows]
    bounded = any(f"{BOUND_MARK} " in str(c) for row in rows for c in row)
    return [
        "| " + " | ".join(markdown_cell(c) for c in header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(row) + " |" for row in cells),
        "",
        *([_md(BOUND_LEGEND), ""] if bounded else []),
    ]


def _ms(value: float | None) -> str:
    return NONE if value is None else plain_number(value)


def _estimate(value: float, low: float | None, high: float | None, bound: bool = False) -> str:
    text = (f"{BOUND_MARK} " if bound else "") + _ms(value)
    if low is not None:
        text += f" [{_ms(low)}, {'∞' if high is None else _ms(high)}]"
    return text


def _experiment_markdown(experiment: ExperimentDocument) -> list[str]:
    view, comparison = experiment.view, experiment.comparison
    lines = [
        f"## Experiment: {_md(experiment.title)}",
        "",
        f"- experiment `{view.experiment_id}`, status **{_md(view.status)}**",
        f"- trace: {experiment.trace_url or _md(experiment.trace_where)}",
    ]
    if comparison is not None:
        parity = {
            True: "every pair within tolerance",
            False: "NOT every pair within tolerance",
            None: "fewer than two completed",
        }[comparison.parity_ok]
        lines.append(
            f"- parity: {parity} (atol {comparison.tolerance.atol} x scale, top-1 agreement >= "
            f"{comparison.tolerance.min_top1_agreement:g})"
        )
        if not comparison.complete:
            lines.append("- **incomplete**: the deadline passed before every member's outcome")
    lines.append("")
    rows = []
    for member in experiment.members:
        summary = member.result
        headline, throughput = headline_of(summary), throughput_of(summary)
        rows.append(
            [
                member.framework,
                (member.environment or {}).get("framework_version", ""),
                member.host or "",
                member.status,
                NONE
                if headline is None or summary is None
                else f"{summary.headline} "
                + _estimate(headline.value, headline.low, headline.high, headline.bound),
                NONE
                if throughput is None
                else _estimate(throughput.value, throughput.low, throughput.high),
                NONE
                if summary is None or summary.machine is None
                else cpu_text(summary.machine.cost),
                NONE
                if summary is None or summary.machine is None
                else memory_text(summary.machine.cost, short=True),
                NONE
                if summary is None or summary.accuracy is None
                else f"{summary.accuracy.top1:.2%}",
                NONE if summary is None or summary.verdict is None else summary.verdict.status,
                member.error or "",
            ]
        )
    lines += [
        "### Comparison",
        "",
        *_table(
            [
                "framework",
                "version",
                "host",
                "status",
                "headline ms (95% CI)",
                "samples/s (95% CI)",
                "CPU per query",
                "peak memory",
                "top-1",
                "verdict",
                "error",
            ],
            rows,
        ),
    ]
    matrix = parity_matrix(experiment)
    if matrix:
        header = ["", *(cell.label for cell in matrix[0][1])]
        body = []
        for label, cells in matrix:
            body.append([label, *(_parity_text(cell.parity, cell.diagonal) for cell in cells)])
        lines += ["### Output parity", "", *_table(header, body)]
    failures = [] if comparison is None else comparison.failures
    if failures:
        lines += ["### Failures", ""]
        lines += [f"- {_md(g.framework or g.model or 'member')}: {_md(g.reason)}" for g in failures]
        lines.append("")
    return lines


def _parity_text(parity: PairParity | None, diagonal: bool) -> str:
    if diagonal:
        return "—"
    if parity is None:
        return "not compared"
    if not parity.comparable:
        return f"not comparable: {parity.reason}"
    verdict = "within" if parity.within_tolerance else "OUTSIDE"
    if parity.tokens_compared is not None:  # greedy tokens: how many agree, no arithmetic
        agreed = f"{parity.tokens_agreeing} of {parity.tokens_compared}"
        return f"{verdict}; {agreed} greedy tokens agree"
    agreement = NONE if parity.top1_agreement is None else f"{parity.top1_agreement:.0%}"
    cosine = "" if parity.min_cosine is None else f"; min cosine {parity.min_cosine:.6f}"
    return f"{verdict}; max rel {parity.max_rel_error or 0:.2e}; top-1 {agreement}{cosine}"


def _tokens_markdown(info: dict[str, Any], mark: str) -> list[str]:
    llm, rows = info["llm"], info["tokens"]
    label = llm["headline_label"]

    def pair(low: Any, high: Any) -> str:
        if low is None:
            return NONE
        shown = (_estimate(p.value, None, None, p.bound) for p in (low, high))
        return " / ".join(shown)

    rate = (
        f"goodput {_ms(llm['goodput_per_s'])} requests/s of {_ms(llm['requests_per_s'])}"
        if llm["goodput_per_s"] is not None
        else f"{_ms(llm['requests_per_s'])} requests/s (no bound asked: no goodput)"
    )
    lines = [
        f"{mark}# Tokens",
        "",
        f"- TTFT p50 / {label}: {pair(llm['ttft_median'], llm['ttft_headline'])} ms",
        f"- TPOT p50 / {label}: {pair(llm['tpot_median'], llm['tpot_headline'])} ms",
        f"- output tokens/s: {_ms(llm['tokens_per_s'])}; {rate}",
        f"- timed requests: {llm['requests']}, {llm['failed']} failed (never samples)",
        "",
    ]
    figures = (llm["ttft_median"], llm["ttft_headline"], llm["tpot_median"], llm["tpot_headline"])
    if any(figure is not None and figure.bound for figure in figures):
        lines += [_md(BOUND_LEGEND), ""]
    if rows:
        header = ["metric", "values", "mean", *rows[0]["percentiles"]]
        table = [
            [
                row["metric"],
                row["count"],
                _ms(row["mean_ms"]),
                *(_estimate(p.value, p.low, p.high, p.bound) for p in row["percentiles"].values()),
            ]
            for row in rows
        ]
        lines += ["Token latencies (ms, 95% intervals):", "", *_table(header, table)]
    return lines


def _evaluation_markdown(document: EvaluationDocument, *, level: int) -> list[str]:
    view, summary = document.view, document.summary
    mark = "#" * level
    lines = [
        f"{mark} Evaluation: {_md(document.title)}",
        "",
        f"- evaluation `{view.evaluation_id}`, status **{_md(view.status)}**",
        f"- model {_md(view.model)} {_md(view.model_version or '')}; framework "
        f"{_md(view.framework)} {_md((view.environment or {}).get('framework_version', ''))}; "
        f"host {_md(view.host or '?')}",
        f"- trace: {document.trace_url or _md(document.trace_where)}",
    ]
    if view.error:
        lines.append(f"- error: {_md(view.error)}")
    lines.append("")
    if summary is None:
        return lines
    info = evaluation_info(document)
    if info["llm"] is not None:  # a language model leads with its token figures, as its page
        lines += _tokens_markdown(info, mark)
    header = ["batch", "queries", "mean ± std", *info["rows"][0]["percentiles"], "samples/s"]
    rows = [
        [
            row["batch_size"],
            row["count"],
            f"{_ms(row['mean_ms'])} ± {_ms(row['std_ms'])}",
            *(_estimate(p.value, p.low, p.high, p.bound) for p in row["percentiles"].values()),
            _estimate(row["throughput"].value, row["throughput"].low, row["throughput"].high),
        ]
        for row in info["rows"]
    ]
    if rows:
        lines += [f"{mark}# Statistics (ms, 95% intervals)", "", *_table(header, rows)]
    if summary.verdict is not None:
        lines += [f"{mark}# Verdict: {_md(summary.verdict.status)}", ""]
        for reason in summary.verdict.reasons:
            lines.append(
                f"- {_md(reason.severity)}: {_md(reason.message)}. "
                f"{_md(EXPLANATIONS.get(reason.code, ''))}"
            )
        if not summary.verdict.reasons:
            lines.append("- every run rule was met; nothing questioned the conditions")
        lines.append("")
    machine = info["machine"]
    if machine is not None:
        lines += [f"{mark}# Cost, and the machine while timed", ""]
        lines += [f"- {_md(label)}: {_md(text)}" for label, text in machine["cost"]]
        for label, rows in machine["windows"]:
            lines += ["", f"Timed window{_md(', ' + label if label else '')}:", ""]
            lines += [f"- {_md(key)}: {_md(text)}" for key, text in rows]
        if machine["noise"]:
            lines += ["", f"Noise probe: {_md(machine['noise'])}"]
        lines.append("")
    first, _ = info["environment"]
    if first:
        lines += [f"{mark}# Environment", "", *(f"- {_md(k)}: {_md(v)}" for k, v in first), ""]
    return lines
