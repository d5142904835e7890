"""/healthz (the process answers) and /readyz (it can do its work: broker, event store, and
no consumer paused for an outage)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response, status

from services.gateway.context import GatewayContext, context_of
from shared.errors import DlscopeError
from shared.messaging import paused_consumers

__all__ = ["router"]

router = APIRouter()
Context = Annotated[GatewayContext, Depends(context_of)]


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(response: Response, context: Context) -> dict[str, Any]:
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
