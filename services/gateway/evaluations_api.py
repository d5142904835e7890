"""/v1/evaluations: request one evaluation, follow it, read its result and its events.

A request is checked with the registry (model and dataset), published as
``evaluation.requested`` and answered 202; reads come from the ``evaluations`` read model and
the event store, which the recorder keeps.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi.responses import StreamingResponse
from opentelemetry import trace

from services.gateway.auth import UNAUTHORIZED, require_token
from services.gateway.context import GatewayContext, context_of, publish, resolve, status_path
from services.gateway.schemas import (
    ONE_EVALUATION_CONCURRENT,
    EvaluationAccepted,
    EvaluationCreate,
    EvaluationEventOut,
    EvaluationOut,
    Limit,
    NotFound,
    Offset,
    Unreadable,
)
from services.gateway.streaming import follow
from shared.config import Settings
from shared.eventstore.views import EvaluationStatus, EvaluationView
from shared.inputs import MAX_NAME
from shared.messages import (
    Envelope,
    EvaluationRequested,
    Framework,
    Hardware,
    evaluation_stream,
)
from shared.telemetry import trace_id_hex

__all__ = ["evaluation_out", "router"]

router = APIRouter(prefix="/v1/evaluations")
Context = Annotated[GatewayContext, Depends(context_of)]


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=EvaluationAccepted,
    dependencies=[Depends(require_token)],
    responses={**UNAUTHORIZED, **Unreadable},
)
async def create_evaluation(
    body: EvaluationCreate, request: Request, context: Context
) -> EvaluationAccepted:
    evaluation_id = uuid.uuid4()
    model_version = await _resolve(
        context, evaluation_id, "model", body.model, body.version, "version"
    )
    dataset_version = (
        None
        if body.dataset is None
        else await _resolve(
            context, evaluation_id, "dataset", body.dataset, body.dataset_version, "dataset"
        )
    )
    await publish(
        context,
        Envelope.wrap(
            EvaluationRequested(
                evaluation_id=evaluation_id,
                model=body.model,
                model_version=body.version,
                framework=body.framework,
                framework_version=body.framework_version,
                hardware=body.hardware,
                agent_id=body.agent_id,
                scenario=body.scenario,
                dataset=body.dataset,
                dataset_version=body.dataset_version,
                resolved_model_version=model_version,
                resolved_dataset_version=dataset_version,
                split=body.split,
                requested_by="gateway",
                trace_level=body.trace_level,
                trace_queries=body.trace_queries,
                concurrent=body.concurrent,
                sweep=body.sweep,
            ),
            stream_id=evaluation_stream(evaluation_id),
            correlation_id=evaluation_id,
        ),
    )
    trace_id = trace_id_hex(trace.get_current_span().get_span_context())
    context.remember_accepted(evaluation_id)
    return EvaluationAccepted(
        id=evaluation_id,
        trace_id=trace_id,
        trace_url=context.settings.trace_url(trace_id),
        status_url=status_path(request, "get_evaluation", evaluation_id=evaluation_id),
        warnings=[ONE_EVALUATION_CONCURRENT] if body.concurrent else [],
    )


@router.get("", response_model=list[EvaluationOut])
async def list_evaluations(
    context: Context,
    limit: Limit = 50,
    offset: Offset = 0,
    status_filter: Annotated[EvaluationStatus | None, Query(alias="status")] = None,
    model: Annotated[
        str | None, Query(min_length=1, max_length=MAX_NAME, description="a model name")
    ] = None,
    framework: Framework | None = None,
    hardware: Hardware | None = None,
) -> list[EvaluationOut]:
    """Newest first, filtered by status, model, framework and hardware."""
    views = await context.store.list_evaluations(
        limit=limit,
        offset=offset,
        status=status_filter,
        model=model,
        framework=framework,
        hardware=hardware,
    )
    return [evaluation_out(v, context.settings) for v in views]


@router.get("/{evaluation_id}", response_model=EvaluationOut, responses=NotFound)
async def get_evaluation(evaluation_id: uuid.UUID, context: Context) -> EvaluationOut:
    view = await context.stored(evaluation_id, lambda: context.store.get_evaluation(evaluation_id))
    if view is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no evaluation {evaluation_id} (yet)")
    return evaluation_out(view, context.settings)


@router.get(
    "/{evaluation_id}/events",
    response_model=list[EvaluationEventOut],
    responses={
        200: {
            "description": "The stored events in order; with 'Accept: text/event-stream', "
            "server-sent events that follow the evaluation until it completes or fails, with "
            "the worker's progress notifications between them (event: evaluation.progress). "
            "An id with no stored event within a few seconds ends the stream with "
            'event: error, data {"status": 404, "detail": ...}',
            "content": {"text/event-stream": {}},
        },
        **NotFound,
    },
)
async def evaluation_events(
    evaluation_id: uuid.UUID, request: Request, context: Context
) -> list[EvaluationEventOut] | StreamingResponse:
    if "text/event-stream" in request.headers.get("accept", ""):
        return StreamingResponse(
            follow(
                context.store,
                evaluation_stream(evaluation_id),
                request,
                missing=f"no evaluation {evaluation_id}",
                progress=context.progress,
                evaluation_id=evaluation_id,
            ),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
    events = await context.store.stream_events(evaluation_stream(evaluation_id))
    if not events:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no evaluation {evaluation_id} (yet)")
    return [EvaluationEventOut.model_validate(e, from_attributes=True) for e in events]


async def _resolve(
    context: GatewayContext,
    evaluation_id: uuid.UUID,
    kind: str,
    name: str,
    version: str,
    version_field: str,
) -> str:
    """The version the registry resolves ``version`` to; the request is refused (422, naming
    the field) if it knows no such artifact or version."""
    found = await resolve(context, kind, name, version, correlation_id=evaluation_id)
    if found.manifest is None:
        field = kind if found.problem == "unknown" else version_field
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            [{"loc": ["body", field], "msg": found.error, "type": "value_error"}],
        )
    return found.manifest.version


def evaluation_out(view: EvaluationView, settings: Settings) -> EvaluationOut:
    return EvaluationOut(
        id=view.evaluation_id,
        status=view.status,
        model=view.model,
        model_version=view.model_version,
        framework=view.framework,
        hardware=view.hardware,
        agent_id=view.agent_id,
        host=view.host,
        attempts=view.attempts,
        environment=view.environment,
        trace_id=view.trace_id,
        trace_url=settings.trace_url(view.trace_id),
        requested_at=view.requested_at,
        updated_at=view.updated_at,
        result=view.result,
        error=view.error,
    )
