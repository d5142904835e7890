"""Tracing on the command line: the ``--trace-level`` and ``--trace-queries`` options of the
commands that request an evaluation, and ``dlscope trace``, which shows a trace without a
Jaeger: from the spans ``dlscope run`` keeps under DLSCOPE_HOME (or a trace file,
``DLSCOPE_OTLP_ENDPOINT=file://...``), as a tree on the terminal or as a file
chrome://tracing or Perfetto opens."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from dlscope.cli.terminal import console, fail
from shared.config import Settings
from shared.messages import DEFAULT_TRACE_LEVEL, DEFAULT_TRACE_QUERIES, TRACE_LEVELS, TraceLevel
from shared.trace_files import (
    FileSpan,
    chrome_trace,
    default_trace_file,
    otlp_document,
    read_kept_spans,
    service_of,
)

__all__ = [
    "DEFAULT_TRACE_LEVEL",
    "DEFAULT_TRACE_QUERIES",
    "TraceLevelOpt",
    "TraceQueriesOpt",
    "checked_trace_level",
    "trace_command",
    "trace_fields",
    "tree_lines",
]

TraceLevelOpt = Annotated[
    str,
    typer.Option(
        "--trace-level",
        help=f"how deep to trace: {', '.join(TRACE_LEVELS)}; framework and deeper profile "
        "the layers in passes of their own, after the timed one",
    ),
]
TraceQueriesOpt = Annotated[
    int,
    typer.Option(
        "--trace-queries", min=1, max=100, help="queries each traced pass runs (and exports)"
    ),
]


def checked_trace_level(level: str) -> TraceLevel:
    """``level`` if it is one; else the command fails naming the allowed ones."""
    for known in TRACE_LEVELS:
        if level == known:
            return known
    raise fail(f"--trace-level must be one of {', '.join(TRACE_LEVELS)}, got {level!r}", 2)


def trace_fields(level: str, queries: int) -> dict[str, str | int]:
    """The request fields that ask for a trace other than the default one (a gateway that
    predates tracing takes a request without them)."""
    fields: dict[str, str | int] = {}
    if checked_trace_level(level) != DEFAULT_TRACE_LEVEL:
        fields["trace_level"] = level
    if queries != DEFAULT_TRACE_QUERIES:
        fields["trace_queries"] = queries
    return fields


# What ``dlscope trace ID`` prints of a trace: at most this many spans under one parent (a
# deep trace has hundreds of layers under each query), and this many lines in all.
_CHILDREN_SHOWN = 12
_LINES_SHOWN = 200
_TRACE_ID = re.compile(r"[0-9a-f]{32}")


def trace_command(
    what: Annotated[
        str | None,
        typer.Argument(
            metavar="TRACE_ID|SPANS_FILE",
            help="the trace (dlscope run prints its id); or, as before, a spans file",
        ),
    ] = None,
    spans: Annotated[
        Path | None,
        typer.Option(
            "--spans",
            help="spans written with DLSCOPE_OTLP_ENDPOINT=file://<path> (default: that "
            "file, else the one dlscope run keeps under DLSCOPE_HOME)",
        ),
    ] = None,
    trace_id: Annotated[
        str | None,
        typer.Option("--trace-id", help="the trace (dlscope prints it); needed if several"),
    ] = None,
    chrome: Annotated[
        Path | None,
        typer.Option(help="write it here as Chrome trace JSON (chrome://tracing, Perfetto)"),
    ] = None,
    otlp: Annotated[
        Path | None, typer.Option(help="write it here as one OTLP JSON document")
    ] = None,
) -> None:
    """One evaluation's trace, without a Jaeger: printed as a tree of its spans, or written
    as Chrome trace JSON (--chrome) or OTLP JSON (--otlp).

    dlscope run keeps its spans in a file under DLSCOPE_HOME where no exporter is configured;
    with DLSCOPE_OTLP_ENDPOINT=file://<path>, that file."""
    if what is not None and _TRACE_ID.fullmatch(what) and not Path(what).exists():
        trace_id = trace_id or what
    elif what is not None:
        spans = Path(what)
    spans_file = spans or _kept_spans()
    try:
        found = read_kept_spans(spans_file)
    except FileNotFoundError as exc:
        raise fail(f"no spans file {spans_file}: {_no_spans_why()}", 2) from exc
    except (OSError, ValueError) as exc:
        raise fail(f"cannot read the spans in {spans_file}: {exc}", 2) from exc
    traces = sorted({span.trace_id for span in found})
    if trace_id is None:
        if len(traces) != 1:
            listed = ", ".join(traces) or "none"
            raise fail(
                f"{spans_file} holds {len(traces)} traces ({listed}): pick one with --trace-id", 2
            )
        trace_id = traces[0]
    chosen = [span for span in found if span.trace_id == trace_id]
    if not chosen:
        raise fail(f"no span of trace {trace_id} in {spans_file}; {_no_spans_why()}", 2)
    if chrome is None and otlp is None:
        console.print(f"trace {trace_id}: {len(chosen)} spans in {spans_file}", soft_wrap=True)
        for line in tree_lines(chosen):
            console.print(line, soft_wrap=True, highlight=False, markup=False)
        return
    for path, document in ((chrome, chrome_trace), (otlp, otlp_document)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(document(chosen)))
            console.print(f"trace {trace_id}: {len(chosen)} spans written to {path}")


def _kept_spans() -> Path:
    settings = Settings()
    return settings.trace_file or default_trace_file(settings.home)


def _no_spans_why() -> str:
    settings = Settings()
    if settings.otlp_endpoint and settings.trace_file is None:
        return f"this machine sends its spans to {settings.otlp_endpoint}, not to a file"
    return (
        "dlscope run keeps the spans of the runs it makes here (DLSCOPE_HOME); a deployment "
        "writes them where DLSCOPE_OTLP_ENDPOINT=file://<path> says"
    )


def tree_lines(spans: Sequence[FileSpan]) -> list[str]:
    """A trace's spans as indented lines, each under its parent, in the order they began:
    name, duration, start since the trace began, and the dlscope service."""
    by_id = {span.span_id: span for span in spans}
    ordered = sorted(spans, key=lambda span: span.start_ns)
    children: dict[str, list[FileSpan]] = {}
    roots = []
    for span in ordered:
        if span.parent_id in by_id:
            children.setdefault(span.parent_id, []).append(span)
        else:
            roots.append(span)
    began = ordered[0].start_ns
    lines: list[str] = []
    shown = 0

    def walk(span: FileSpan, depth: int) -> None:
        nonlocal shown
        if len(lines) >= _LINES_SHOWN:
            return
        took = max(span.end_ns - span.start_ns, 0) / 1e6
        at = (span.start_ns - began) / 1e6
        service = service_of(span, by_id)
        lines.append(f"{'  ' * depth}{span.name}  {took:.3f} ms  (at {at:.1f} ms, {service})")
        shown += 1
        under = children.get(span.span_id, [])
        for child in under[:_CHILDREN_SHOWN]:
            walk(child, depth + 1)
        if len(under) > _CHILDREN_SHOWN and len(lines) < _LINES_SHOWN:
            lines.append(f"{'  ' * (depth + 1)}… {len(under) - _CHILDREN_SHOWN} more")

    for root in roots:
        walk(root, 0)
    if shown < len(spans):
        lines.append(
            f"{shown} of {len(spans)} spans shown; --chrome FILE writes them all "
            "(chrome://tracing, https://ui.perfetto.dev)"
        )
    return lines
