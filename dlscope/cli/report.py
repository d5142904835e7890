"""``dlscope report ID...``: one self-contained HTML report (charts inline as SVG, opens
offline) of evaluations and experiments, with the same numbers as CSV and Markdown beside it.

Without ``--gateway`` the report is read from the embedded home (the SQLite store under
DLSCOPE_HOME that ``dlscope run`` writes), its figures drawn here by the analyzer's own code;
with it, the running deployment's gateway writes the three files (``GET /v1/reports``).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated

import typer

from dlscope.cli.client import REPORT_FORMATS
from dlscope.cli.gateway_options import Gateway, Token
from dlscope.cli.target import client_for
from dlscope.cli.terminal import console, fail

__all__ = ["report_command"]

Ids = Annotated[list[str], typer.Argument(help="evaluation or experiment ids, any mix")]
Output = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="where to write, without extension: PATH.html, PATH.csv and PATH.md "
        "(default: ./dlscope-report-<first id>)",
    ),
]


def report_command(
    ids: Ids, gateway: Gateway = None, token: Token = None, output: Output = None
) -> None:
    """Write a report of evaluations and experiments: HTML (self-contained, charts inline,
    opens offline), CSV and Markdown."""
    keys = _ids(ids)
    base = output or Path(f"dlscope-report-{str(keys[0])[:8]}")
    if base.suffix in {f".{f}" for f in REPORT_FORMATS}:
        base = base.with_suffix("")
    if base.parent != Path() and not base.parent.is_dir():
        raise fail(f"--output: no directory {base.parent}", 2)
    documents = client_for(gateway, token).report(keys)
    for fmt, text in documents.items():
        path = base.with_name(f"{base.name}.{fmt}")
        path.write_text(text, encoding="utf-8")
        console.print(f"wrote {path}", markup=False)


def _ids(ids: list[str]) -> list[uuid.UUID]:
    keys = []
    for text in ids:
        try:
            keys.append(uuid.UUID(text))
        except ValueError:
            raise fail(f"not an evaluation or experiment id: {text!r}", 2) from None
    return keys
