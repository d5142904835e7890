"""Reports: ``GET /v1/evaluations/{id}/report``, ``/v1/experiments/{id}/report`` and
``/v1/reports?id=…&id=…`` serve one self-contained HTML file (charts inline as SVG, opens
offline), or with ``format=csv`` / ``format=md`` the same numbers as CSV or Markdown. What
``dlscope report`` writes, built by the same code."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, status
from fastapi.responses import Response

from services.gateway.analysis_api import source
from services.gateway.context import GatewayContext, context_of
from services.gateway.headers import DOCUMENT_POLICY
from services.gateway.schemas import NotFound
from services.gateway.ui.documents import ReportDocument
from services.gateway.ui.report import (
    MEDIA_TYPES,
    ReportFormat,
    report_csv,
    report_html,
    report_markdown,
)

__all__ = ["router"]

router = APIRouter(tags=["reports"])
Context = Annotated[GatewayContext, Depends(context_of)]
Format = Annotated[ReportFormat, Query(description="html (self-contained), csv or md (Markdown)")]
# One report reads each id's events and draws its charts: a bound keeps one request small.
MAX_REPORT_IDS = 50

_DOCUMENTS = {
    200: {
        "description": "the report",
        "content": {media.split(";")[0]: {} for media in MEDIA_TYPES.values()},
    },
    **NotFound,
}


@router.get("/v1/evaluations/{evaluation_id}/report", response_class=Response, responses=_DOCUMENTS)
async def evaluation_report(
    evaluation_id: uuid.UUID, context: Context, format: Format = "html"
) -> Response:
    """An evaluation's report: statistics with intervals, verdict, environment, charts."""
    document = await source(context).report([evaluation_id])
    if document.not_found:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no evaluation {evaluation_id} (yet)")
    return await _answer(document, format)


@router.get("/v1/experiments/{experiment_id}/report", response_class=Response, responses=_DOCUMENTS)
async def experiment_report(
    experiment_id: uuid.UUID, context: Context, format: Format = "html"
) -> Response:
    """An experiment's report: the comparison, per-framework charts, parity, failures."""
    document = await source(context).report([experiment_id])
    if document.not_found or not document.experiments:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no experiment {experiment_id} (yet)")
    return await _answer(document, format)


@router.get("/v1/reports", response_class=Response, responses=_DOCUMENTS)
async def report(
    context: Context,
    id: Annotated[
        list[uuid.UUID],
        Query(
            min_length=1,
            max_length=MAX_REPORT_IDS,
            description="evaluation or experiment ids, any mix; repeat the parameter",
        ),
    ],
    format: Format = "html",
) -> Response:
    """One report of several evaluations and experiments, saying what it compares (the
    same model's evaluations under the same scenario) and what it will not."""
    document = await source(context).report(id)
    if len(document.not_found) == len(set(id)):
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"no evaluation or experiment {', '.join(document.not_found)} (yet)",
        )
    return await _answer(document, format)


async def _answer(document: ReportDocument, format: ReportFormat) -> Response:
    if format == "html":
        # Rendering the charts takes tens of milliseconds each: off the event loop.
        body = await asyncio.to_thread(report_html, document)
    else:
        body = report_csv(document) if format == "csv" else report_markdown(document)
    name = "dlscope-report." + format
    headers = {"Content-Disposition": f'inline; filename="{name}"'}
    if format == "html":
        # Opened here as it would be from a file: its own inline styles, no script at all.
        headers["Content-Security-Policy"] = DOCUMENT_POLICY
    return Response(body, media_type=MEDIA_TYPES[format], headers=headers)
