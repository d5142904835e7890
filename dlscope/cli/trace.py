"""Tracing on the command line: the ``--trace-level`` and ``--trace-queries`` options of the
commands that request an evaluation, and ``dlscope trace``, which turns a trace file
(``DLSCOPE_OTLP_ENDPOINT=file://...``) into a file chrome://tracing or Perfetto opens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from dlscope.cli.terminal import console, fail
from shared.messages import DEFAULT_TRACE_LEVEL, DEFAULT_TRACE_QUERIES, TRACE_LEVELS, TraceLevel
from shared.trace_files import chrome_trace, otlp_document, read_spans

__all__ = [
    "DEFAULT_TRACE_LEVEL",
    "DEFAULT_TRACE_QUERIES",
    "TraceLevelOpt",
    "TraceQueriesOpt",
    "checked_trace_level",
    "trace_command",
    "trace_fields",
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


def trace_command(
    spans_file: Annotated[
        Path, typer.Argument(help="spans written with DLSCOPE_OTLP_ENDPOINT=file://<path>")
    ],
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
    """One evaluation's trace from a spans file, as Chrome trace JSON or OTLP JSON."""
    if chrome is None and otlp is None:
        raise fail("say where to write the trace: --chrome FILE and/or --otlp FILE", 2)
    try:
        spans = read_spans(spans_file)
    except (OSError, ValueError) as exc:
        raise fail(f"cannot read the spans in {spans_file}: {exc}", 2) from exc
    traces = sorted({span.trace_id for span in spans})
    if trace_id is None:
        if len(traces) != 1:
            listed = ", ".join(traces) or "none"
            raise fail(
                f"{spans_file} holds {len(traces)} traces ({listed}): pick one with --trace-id", 2
            )
        trace_id = traces[0]
    chosen = [span for span in spans if span.trace_id == trace_id]
    if not chosen:
        raise fail(f"no span of trace {trace_id} in {spans_file}; it holds: {', '.join(traces)}", 2)
    for path, document in ((chrome, chrome_trace), (otlp, otlp_document)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(document(chosen)))
            console.print(f"trace {trace_id}: {len(chosen)} spans written to {path}")
