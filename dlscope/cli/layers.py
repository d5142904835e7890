"""``dlscope layers <id>``: an evaluation's layer breakdown, from its stored layer summary.

Without ``--gateway`` it reads the event store this machine writes to (``dlscope run``'s
SQLite under ``DLSCOPE_HOME``, or ``DLSCOPE_DATABASE_URL``); with it, a running gateway's
``GET /v1/evaluations/{id}/layers``. ``--compare`` lines other evaluations' layers up with
it (the same model on other frameworks).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from dlscope.cli.client import LAYERS_TOP, LayersWanted
from dlscope.cli.gateway_options import Token, gateway_option
from dlscope.cli.target import client_for
from dlscope.cli.terminal import console, fail
from shared.messages import PROFILED_LEVELS, ProfiledLevel

__all__ = [
    "layers_command",
    "print_passes",
    "show_layers",
    "show_member_layers",
    "tracing_table",
]


def layers_command(
    evaluation_id: Annotated[uuid.UUID, typer.Argument(help="the evaluation")],
    compare: Annotated[
        list[uuid.UUID] | None,
        typer.Option("--compare", "-c", help="line its layers up with this one's (repeatable)"),
    ] = None,
    top: Annotated[
        int, typer.Option("--top", "-k", min=1, max=1000, help="layers listed")
    ] = LAYERS_TOP,
    level: Annotated[
        str | None, typer.Option(help=f"only this pass: one of {', '.join(PROFILED_LEVELS)}")
    ] = None,
    gateway: Annotated[str | None, gateway_option("a running gateway; default: the store")] = None,
    token: Token = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write the breakdown here as JSON")
    ] = None,
) -> None:
    """An evaluation's layers (traced at framework level or deeper): the slowest, the time per
    op type, each level's overhead; with --compare, lined up with other evaluations'."""
    only = _level(level)
    others = compare or []
    document = client_for(gateway, token).layers(LayersWanted(evaluation_id, others, top, only))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(document, indent=2))
    _print(document)


def _level(level: str | None) -> ProfiledLevel | None:
    if level is None:
        return None
    for known in PROFILED_LEVELS:
        if level == known:
            return known
    raise fail(f"--level must be one of {', '.join(PROFILED_LEVELS)}, got {level!r}", 2)


class _Literal(Table):
    """A table whose title and cells are shown as written (a layer's name such as
    ``conv[0]``, a reason, a path): never read as rich markup."""

    def __init__(self, *args: Any, title: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, title=None if title is None else Text(title), **kwargs)

    def add_row(self, *cells: Any, **kwargs: Any) -> None:
        super().add_row(*(Text(c) if isinstance(c, str) else c for c in cells), **kwargs)


def tracing_table(tracing: list[dict[str, Any]]) -> Table:
    """Each trace level asked for: captured (with what served it and what it cost) or why not."""
    table = _Literal(title="trace levels (overhead: traced query p50 / untraced p50)")
    for column in ("level", "captured by", "overhead", "spans"):
        table.add_column(column, justify="right" if column in ("overhead", "spans") else "left")
    for outcome in tracing:
        if outcome["captured"]:
            overhead = outcome.get("overhead")
            table.add_row(
                outcome["level"],
                outcome.get("source") or "",
                "" if overhead is None else f"{overhead:.2f}x",
                _spans(outcome),
            )
        else:
            table.add_row(outcome["level"], f"not captured: {outcome['reason']}", "", "")
    return table


def _spans(outcome: dict[str, Any]) -> str:
    """Its spans; blank for the application level's where nobody counted them (the stored
    outcome: the services' spans are made in every service, not counted in one place)."""
    spans = int(outcome.get("spans", 0))
    return "" if outcome["level"] == "application" and spans == 0 else str(spans)


def _us(ns: float) -> str:
    return f"{ns / 1e3:,.1f}"


def _print(document: dict[str, Any]) -> None:
    console.print(
        f"evaluation {document['evaluation_id']} on {document['framework']}, "
        f"traced at level {document['trace_level']}",
        markup=False,
    )
    console.print(tracing_table(document["levels"]))
    print_passes(document)
    comparison = document.get("comparison")
    if comparison:
        _print_comparison(comparison)


def show_layers(report: dict[str, Any], *, title: str | None = None) -> None:
    """An evaluation's layer breakdown (``LayerReport`` as JSON) as ``dlscope layers`` prints
    it, under ``title`` if given, and how to see every layer."""
    if title is not None:
        console.print(title, soft_wrap=True, highlight=False, markup=False)
    print_passes(report)
    if any(p["layers_total"] > len(p["top"]) for p in report["passes"]):
        more = f"every layer: dlscope layers {report['evaluation_id']} --top 1000"
        console.print(more, soft_wrap=True, highlight=False, markup=False)


def show_member_layers(reports: dict[uuid.UUID, dict[str, Any]]) -> None:
    """Each profiled member's layers, one after another, and how to line them up."""
    for report in reports.values():
        show_layers(report, title=f"{report['framework']} ({report['evaluation_id']}): layers")
    if len(reports) > 1:
        first, *others = reports
        compare = " ".join(f"--compare {other}" for other in others)
        console.print(
            f"line them up: dlscope layers {first} {compare}",
            soft_wrap=True,
            highlight=False,
            markup=False,
        )


def print_passes(document: dict[str, Any]) -> None:
    """Each profiled pass of a layer report (``LayerReport`` as JSON): its slowest layers
    and its time per op type, ranked as every view ranks them (``shared.breakdown``)."""
    for passed in document["passes"]:
        console.print(_layer_table(passed))
        console.print(_op_type_table(passed))


def _layer_table(passed: dict[str, Any]) -> Table:
    title = (
        f"{passed['level']} level: {passed['source']}, {passed['queries']} queries of "
        f"batch {passed['batch_size']}, query p50 {_us(passed['query_p50_ns'])} µs profiled"
    )
    table = _Literal(
        title=f"{title}; top {len(passed['top'])} of {passed['layers_total']}, "
        "by median µs per query"
    )
    for column in ("layer", "op", "calls", "p50 µs", "µs/query", "share", "total µs", "shapes"):
        table.add_column(column, justify="left" if column in ("layer", "op", "shapes") else "right")
    for layer in passed["top"]:
        shapes = " ".join(str(list(s)) for s in layer["input_shapes"])
        if layer["output_shapes"]:
            shapes += " -> " + " ".join(str(list(s)) for s in layer["output_shapes"])
        table.add_row(
            layer["node"],
            layer["op_type"],
            str(layer["calls"]),
            _us(layer["p50_ns"]),
            _us(layer["per_query_ns"]),
            f"{layer['per_query_share']:.1%}",
            _us(layer["total_ns"]),
            shapes,
        )
    return table


def _op_type_table(passed: dict[str, Any]) -> Table:
    table = _Literal(title=f"{passed['level']} level: time per op type, median µs per query")
    for column in ("op type", "layers", "calls", "µs/query", "share", "total µs"):
        table.add_column(column, justify="left" if column == "op type" else "right")
    for share in passed["op_types"]:
        table.add_row(
            share["op_type"],
            str(share["layers"]),
            str(share["calls"]),
            _us(share["per_query_ns"]),
            f"{share['per_query_share']:.1%}",
            _us(share["total_ns"]),
        )
    return table


def _print_comparison(comparison: dict[str, Any]) -> None:
    table = _Literal(title=f"layers lined up ({comparison['level']} level), p50 µs per call")
    table.add_column("kind")
    for evaluation in comparison["evaluations"]:
        table.add_column(
            f"{evaluation['framework']}\n{str(evaluation['evaluation_id'])[:8]}", justify="left"
        )
    table.add_column("matched by")
    for row in comparison["rows"]:
        cells = [
            "" if layer is None else f"{layer['node']} ({layer['op_type']}) {_us(layer['p50_ns'])}"
            for layer in row["layers"]
        ]
        table.add_row(row["kind"], *cells, row["matched_by"] or "")
    console.print(table)
