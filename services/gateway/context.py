"""What every route of the gateway works with, handed to it through the app's state."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from opentelemetry.trace import Tracer
from starlette.requests import Request

from shared.config import Settings
from shared.eventstore import EventStore
from shared.messages import Envelope, Payload, rpc_key
from shared.messaging import Bus

__all__ = ["GatewayContext", "ask_registry", "context_of"]


@dataclass
class GatewayContext:
    settings: Settings
    bus: Bus
    store: EventStore
    tracer: Tracer


def context_of(request: Request) -> GatewayContext:
    context: GatewayContext = request.app.state.context
    return context


async def ask_registry(
    context: GatewayContext, call: str, payload: Payload, *, correlation_id: uuid.UUID | None = None
) -> Envelope:
    """One request/reply call to the registry (``resolve``, ``register``, ``deprecate``)."""
    return await context.bus.request(
        rpc_key("registry", call),
        Envelope.wrap(payload, stream_id="registry", correlation_id=correlation_id or uuid.uuid4()),
        timeout=context.settings.rpc_timeout_s,
    )
