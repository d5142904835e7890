"""The gateway's HTTP API (FastAPI). Stateless: writes are published, reads come from the
read models the recorder maintains."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response, status
from fastapi.responses import StreamingResponse
from opentelemetry import trace
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.gateway.auth import UNAUTHORIZED, require_token, secured_openapi
from services.gateway.context import GatewayContext, ask_registry, publish
from services.gateway.errors import UNAVAILABLE, dlscope_error, http_error
from services.gateway.experiments_api import router as experiments_router
from services.gateway.models_api import router as models_router
from services.gateway.schemas import (
    AgentOut,
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
from services.gateway.tracing import TracingMiddleware
from shared.config import Settings
from shared.errors import DlscopeError
from shared.eventstore.views import EvaluationStatus, EvaluationView
from shared.messages import (
    Envelope,
    EvaluationRequested,
    ResolveArtifact,
    ResolvedArtifact,
    evaluation_stream,
)
from shared.messaging import paused_consumers
from shared.telemetry import trace_id_hex

__all__ = ["GatewayContext", "create_app"]


def create_app(context: GatewayContext) -> FastAPI:
    app = FastAPI(
        title="dlscope",
        version="1",
        description="Benchmark deep-learning inference across models, frameworks and hardware.",
        responses=UNAVAILABLE,
    )
    app.state.context = context
    # Authorization is documented as required only where a token is configured.
    app.openapi = secured_openapi(app, token_required=bool(context.settings.api_token))  # type: ignore[method-assign]

    app.add_middleware(TracingMiddleware, tracer=context.tracer)
    app.add_exception_handler(DlscopeError, dlscope_error)
    app.add_exception_handler(StarletteHTTPException, http_error)

    @app.post(
        "/v1/evaluations",
        status_code=status.HTTP_202_ACCEPTED,
        response_model=EvaluationAccepted,
        dependencies=[Depends(require_token)],
        responses={**UNAUTHORIZED, **Unreadable},
    )
    async def create_evaluation(body: EvaluationCreate, request: Request) -> EvaluationAccepted:
        evaluation_id = uuid.uuid4()
        await _resolve(context, evaluation_id, "model", body.model, body.version, "version")
        if body.dataset is not None:
            await _resolve(
                context, evaluation_id, "dataset", body.dataset, body.dataset_version, "dataset"
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
                    split=body.split,
                    requested_by="gateway",
                ),
                stream_id=evaluation_stream(evaluation_id),
                correlation_id=evaluation_id,
            ),
        )
        trace_id = trace_id_hex(trace.get_current_span().get_span_context())
        return EvaluationAccepted(
            id=evaluation_id,
            trace_id=trace_id,
            trace_url=context.settings.trace_url(trace_id),
            status_url=str(request.url_for("get_evaluation", evaluation_id=evaluation_id)),
        )

    @app.get("/v1/evaluations", response_model=list[EvaluationOut])
    async def list_evaluations(
        limit: Limit = 50,
        offset: Offset = 0,
        status_filter: Annotated[EvaluationStatus | None, Query(alias="status")] = None,
    ) -> list[EvaluationOut]:
        views = await context.store.list_evaluations(
            limit=limit, offset=offset, status=status_filter
        )
        return [_evaluation_out(v, context.settings) for v in views]

    @app.get("/v1/evaluations/{evaluation_id}", response_model=EvaluationOut, responses=NotFound)
    async def get_evaluation(evaluation_id: uuid.UUID) -> EvaluationOut:
        view = await context.store.get_evaluation(evaluation_id)
        if view is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no evaluation {evaluation_id} (yet)")
        return _evaluation_out(view, context.settings)

    @app.get(
        "/v1/evaluations/{evaluation_id}/events",
        response_model=list[EvaluationEventOut],
        responses={
            200: {
                "description": "The stored events in order; with 'Accept: text/event-stream', "
                "server-sent events that follow the evaluation until it completes or fails",
                "content": {"text/event-stream": {}},
            },
            **NotFound,
        },
    )
    async def evaluation_events(
        evaluation_id: uuid.UUID, request: Request
    ) -> list[EvaluationEventOut] | StreamingResponse:
        if "text/event-stream" in request.headers.get("accept", ""):
            return StreamingResponse(
                follow(context.store, evaluation_stream(evaluation_id), request),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        events = await context.store.stream_events(evaluation_stream(evaluation_id))
        if not events:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no evaluation {evaluation_id} (yet)")
        return [
            EvaluationEventOut(
                position=e.position,
                version=e.version,
                event_id=e.event_id,
                type=e.type,
                occurred_at=e.occurred_at,
                recorded_at=e.recorded_at,
                trace_id=e.trace_id,
                causation_id=e.causation_id,
                payload=e.payload,
            )
            for e in events
        ]

    @app.get("/v1/agents", response_model=list[AgentOut])
    async def list_agents() -> list[AgentOut]:
        return [
            AgentOut(
                agent_id=a.agent_id,
                host=a.host,
                framework=a.framework,
                framework_version=a.framework_version,
                hardware=a.hardware,
                status=a.status,
                busy=a.busy,
                last_seen=a.last_seen,
                capabilities=a.capabilities,
            )
            for a in await context.store.list_agents()
        ]

    app.include_router(models_router)
    app.include_router(experiments_router)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(response: Response) -> dict[str, Any]:
        checks = {"broker": context.bus.is_connected, "event_store": True}
        try:
            await context.store.ping()
        except DlscopeError:
            checks["event_store"] = False
        # Consumers in this process paused for an unavailable dependency (every service's,
        # in the embedded mode): their messages wait, so what is read here lags behind.
        # Shown only while there are some, so a healthy answer keeps its shape.
        paused = paused_consumers(context.bus.broker)
        if paused:
            checks["consumers"] = False
        ready = all(checks.values())
        if not ready:
            response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
        return {"ready": ready, "checks": checks, **({"paused": paused} if paused else {})}

    return app


async def _resolve(
    context: GatewayContext,
    evaluation_id: uuid.UUID,
    kind: str,
    name: str,
    version: str,
    version_field: str,
) -> None:
    """Refuse the request (422, naming the field) unless the registry knows the artifact."""
    reply = await ask_registry(
        context,
        "resolve",
        ResolveArtifact(kind=kind, name=name, version=version),
        correlation_id=evaluation_id,
    )
    error = reply.open(ResolvedArtifact).error
    if error is not None:
        field = kind if f"unknown {kind}" in error else version_field
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            [{"loc": ["body", field], "msg": error, "type": "value_error"}],
        )


def _evaluation_out(view: EvaluationView, settings: Settings) -> EvaluationOut:
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
        result=view.summary(),
        error=view.error,
    )
