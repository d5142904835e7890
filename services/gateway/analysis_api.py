"""/v1/evaluations/{id}/figures and /v1/history: what the analyzer draws from the stored raw
measurements (histogram, CDF, latency over the run, batch curves, warm-up, layers) and the
history of one model x framework x hardware, asked of the analyzer over the broker.

Also the ``Source`` the pages and reports read documents from, with the analyzer drawing.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, status

from services.gateway.analysis import draw, history_of
from services.gateway.context import GatewayContext, context_of
from services.gateway.schemas import NotFound
from services.gateway.ui.documents import Source
from shared.inputs import MAX_NAME
from shared.messages import EvaluationFigures, EvaluationHistory, FiguresReply, Framework, Hardware

__all__ = ["router", "source"]

router = APIRouter(tags=["analysis"])
Context = Annotated[GatewayContext, Depends(context_of)]


def source(context: GatewayContext) -> Source:
    """Documents for pages and reports, from the store, figures drawn by the analyzer."""

    async def figures(ids: list[uuid.UUID]) -> FiguresReply:
        return await draw(context, ids)

    return Source(context.store, context.settings, figures)


@router.get(
    "/v1/evaluations/{evaluation_id}/figures",
    response_model=EvaluationFigures,
    responses={
        **NotFound,
        409: {"description": "the evaluation has no measurement (yet): running, or failed first"},
    },
)
async def evaluation_figures(evaluation_id: uuid.UUID, context: Context) -> EvaluationFigures:
    """Histogram, CDF, latency over the query index, batch curves, warm-up and layers, drawn
    by the analyzer from the stored raw latencies."""
    view = await context.store.get_evaluation(evaluation_id)
    if view is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no evaluation {evaluation_id} (yet)")
    reply = await draw(context, [evaluation_id])
    if not reply.figures:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"evaluation {evaluation_id} is {view.status} and has no measurement"
            + (f": {view.error}" if view.error else " yet"),
        )
    return reply.figures[0]


@router.get("/v1/history", response_model=EvaluationHistory)
async def history(
    context: Context,
    model: Annotated[str, Query(min_length=1, max_length=MAX_NAME, description="a model name")],
    framework: Framework,
    hardware: Hardware = "cpu",
    limit: Annotated[int, Query(ge=1, le=5000, description="the newest this many")] = 200,
) -> EvaluationHistory:
    """The completed evaluations of one model x framework x hardware, oldest first, each
    with what changed in its environment since the one before."""
    return await history_of(context, model, framework, hardware, limit)
