"""The gateway's HTTP API (FastAPI), assembled: one router per resource, one error table,
tracing middleware. Stateless: writes are published, reads come from the read models the
recorder maintains.

| module | serves |
|---|---|
| ``evaluations_api`` | /v1/evaluations (create, list, get, events as JSON or SSE) |
| ``layers_api`` | /v1/evaluations/{id}/layers (layer breakdown of a profiled evaluation) |
| ``agents_api`` | /v1/agents |
| ``models_api`` | /v1/models (registry) |
| ``experiments_api`` | /v1/experiments |
| ``health_api`` | /healthz, /readyz |
| ``analysis_api`` | /v1/evaluations/{id}/figures, /v1/history (asked of the analyzer) |
| ``reports_api`` | /v1/evaluations/{id}/report, /v1/experiments/{id}/report, /v1/reports |
| ``ui`` | the web pages at / (``ui.pages``), their charts, templates and static files |
| ``errors`` | dlscope's errors → HTTP statuses |
| ``guards`` | every request first: body size (413), NUL and non-Unicode text (422) |
| ``auth``, ``signin`` | the token for writes, and for reads unless they are public |
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.gateway.agents_api import router as agents_router
from services.gateway.analysis_api import router as analysis_router
from services.gateway.auth import ReadGuard, secured_openapi
from services.gateway.context import GatewayContext
from services.gateway.errors import UNAVAILABLE, dlscope_error, http_error, validation_error
from services.gateway.evaluations_api import router as evaluations_router
from services.gateway.experiments_api import router as experiments_router
from services.gateway.guards import InputGuard
from services.gateway.headers import SecurityHeaders
from services.gateway.health_api import router as health_router
from services.gateway.layers_api import router as layers_router
from services.gateway.models_api import router as models_router
from services.gateway.reports_api import router as reports_router
from services.gateway.signin import router as signin_router
from services.gateway.sweeps_api import router as sweeps_router
from services.gateway.tracing import TracingMiddleware
from services.gateway.ui.pages import router as pages_router
from services.gateway.ui.rendering import STATIC
from shared.errors import DlscopeError

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
    app.add_middleware(ReadGuard, settings=context.settings)
    # Outermost: nothing reads a body, a query or a path before it is bounded and checked.
    app.add_middleware(
        InputGuard,
        max_body_bytes=context.settings.max_body_bytes,
        max_upload_bytes=context.settings.max_upload_bytes,
    )
    # Around everything, so every answer (a guard's refusal too) carries the headers that
    # keep a page's data from running as script; it reads nothing of the request.
    app.add_middleware(SecurityHeaders, api_docs=(app.docs_url, app.redoc_url))
    app.add_exception_handler(DlscopeError, dlscope_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)

    app.include_router(evaluations_router)
    app.include_router(layers_router)
    app.include_router(agents_router)
    app.include_router(models_router)
    app.include_router(experiments_router)
    app.include_router(sweeps_router)
    app.include_router(health_router)
    app.include_router(analysis_router)
    app.include_router(reports_router)
    app.include_router(signin_router)
    # The web UI: pages at /, their scripts and styles (vendored, pinned) under /static.
    app.include_router(pages_router)
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    return app
