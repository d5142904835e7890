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

import httpx
import typer

from dlscope.terminal import console, fail, progress
from shared.config import Settings
from shared.errors import DlscopeError

__all__ = ["report_command"]

Ids = Annotated[list[str], typer.Argument(help="evaluation or experiment ids, any mix")]
Gateway = Annotated[
    str | None,
    typer.Option(envvar="DLSCOPE_GATEWAY_URL", help="a running gateway; default: embedded"),
]
Token = Annotated[str | None, typer.Option(envvar="DLSCOPE_API_TOKEN")]
Output = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="where to write, without extension: PATH.html, PATH.csv and PATH.md "
        "(default: ./dlscope-report-<first id>)",
    ),
]
FORMATS = ("html", "csv", "md")


def report_command(
    ids: Ids, gateway: Gateway = None, token: Token = None, output: Output = None
) -> None:
    """Write a report of evaluations and experiments: HTML (self-contained, charts inline,
    opens offline), CSV and Markdown."""
    keys = _ids(ids)
    base = output or Path(f"dlscope-report-{str(keys[0])[:8]}")
    if base.suffix in {f".{f}" for f in FORMATS}:
        base = base.with_suffix("")
    if base.parent != Path() and not base.parent.is_dir():
        raise fail(f"--output: no directory {base.parent}", 2)
    documents = _from_gateway(gateway, token, keys) if gateway else _embedded(keys)
    for fmt, text in documents.items():
        path = base.with_name(f"{base.name}.{fmt}")
        path.write_text(text, encoding="utf-8")
        console.print(f"wrote {path}")


def _ids(ids: list[str]) -> list[uuid.UUID]:
    keys = []
    for text in ids:
        try:
            keys.append(uuid.UUID(text))
        except ValueError:
            raise fail(f"not an evaluation or experiment id: {text!r}", 2) from None
    return keys


def _embedded(keys: list[uuid.UUID]) -> dict[str, str]:
    import uvloop

    from dlscope.embedded import embedded_settings
    from services.analyzer.calls import AnalyzerCalls
    from services.gateway.ui.documents import ReportDocument, Source
    from services.gateway.ui.report import report_csv, report_html, report_markdown
    from shared.eventstore import EventStore

    settings = embedded_settings(Settings())

    async def read() -> ReportDocument:
        store = EventStore.from_url(settings.resolved_database_url)
        try:
            return await Source(store, settings, AnalyzerCalls(store, "dlscope").figures).report(
                keys
            )
        finally:
            await store.close()

    with progress() as bar:
        task = bar.add_task("reading the event store", total=4)
        try:
            document = uvloop.run(read())
        except DlscopeError as exc:
            raise fail(str(exc), 1) from exc
        _nothing_found(document.not_found, keys)
        bar.update(task, advance=1, description="drawing the charts")
        html = report_html(document)
        bar.update(task, advance=1, description="writing CSV")
        csv = report_csv(document)
        bar.update(task, advance=1, description="writing Markdown")
        markdown = report_markdown(document)
        bar.update(task, advance=1, description="done")
    return {"html": html, "csv": csv, "md": markdown}


def _nothing_found(not_found: list[str], keys: list[uuid.UUID]) -> None:
    if len(not_found) == len(keys):
        raise fail(f"no evaluation or experiment {', '.join(not_found)} is stored here", 1)


def _from_gateway(gateway: str, token: str | None, keys: list[uuid.UUID]) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    written = {}
    with httpx.Client(base_url=gateway, headers=headers, timeout=120) as client, progress() as bar:
        task = bar.add_task("asking the gateway", total=len(FORMATS))
        for fmt in FORMATS:
            bar.update(task, description=f"fetching the {fmt} report")
            try:
                response = client.get(
                    "/v1/reports", params={"id": [str(k) for k in keys], "format": fmt}
                )
            except httpx.HTTPError as exc:
                raise fail(f"cannot reach the gateway at {gateway}: {exc}", 2) from exc
            if response.status_code != 200:
                raise fail(f"the gateway answered {response.status_code}: {_detail(response)}", 1)
            written[fmt] = response.text
            bar.advance(task)
    return written


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text
