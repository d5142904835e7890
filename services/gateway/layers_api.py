"""/v1/evaluations/{id}/layers: the layer breakdown of an evaluation traced at ``framework``
level or deeper, from its stored ``evaluation.profiled`` event (not from Jaeger, whose spans
expire): per profiled pass, the top-k layers and the time per op type; with ``compare``, its
layers lined up with other evaluations' (the same model on other frameworks)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, status

from services.gateway.context import GatewayContext, context_of
from services.gateway.schemas import NotFound
from shared.breakdown import LayerReport, profile_of, report
from shared.messages import EvaluationProfiled, ProfiledLevel, evaluation_stream

__all__ = ["router"]

router = APIRouter(prefix="/v1/evaluations", tags=["layers"])
Context = Annotated[GatewayContext, Depends(context_of)]
# Evaluations one comparison lines up besides the first.
MAX_COMPARED = 7


@router.get(
    "/{evaluation_id}/layers",
    response_model=LayerReport,
    responses={
        **NotFound,
        422: {"description": "a bad parameter, or a compared evaluation without that level"},
    },
)
async def evaluation_layers(
    evaluation_id: uuid.UUID,
    context: Context,
    top: Annotated[int, Query(ge=1, le=1000, description="layers listed per pass")] = 10,
    level: Annotated[
        ProfiledLevel | None, Query(description="only this profiled level's pass")
    ] = None,
    compare: Annotated[
        list[uuid.UUID],
        Query(
            max_length=MAX_COMPARED,
            description="other evaluations (of the same model) whose layers to line up",
        ),
    ] = [],  # noqa: B006  (FastAPI copies a list default per request)
) -> LayerReport:
    profiled = await _profile(context, evaluation_id)
    alone = report(profiled, top=top, level=level)
    if isinstance(alone, str):  # no pass at that level
        raise HTTPException(status.HTTP_404_NOT_FOUND, alone)
    if not compare:
        return alone
    compared = [await _profile(context, other) for other in compare]
    answer = report(profiled, top=top, level=level, compared=compared)
    if isinstance(answer, str):  # a compared evaluation has no pass at that level
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            [{"loc": ["query", "compare"], "msg": answer, "type": "value_error"}],
        )
    return answer


async def _profile(context: GatewayContext, evaluation_id: uuid.UUID) -> EvaluationProfiled:
    events = await context.store.stream_events(evaluation_stream(evaluation_id))
    found = profile_of(events)
    if isinstance(found, str):
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"no layers of evaluation {evaluation_id}: {found}"
        )
    return found
