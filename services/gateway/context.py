"""What every route of the gateway works with, handed to it through the app's state."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.trace import Tracer
from starlette.requests import Request

from shared.config import Settings
from shared.eventstore import EventStore
from shared.messaging import Bus

__all__ = ["GatewayContext", "context_of"]


@dataclass
class GatewayContext:
    settings: Settings
    bus: Bus
    store: EventStore
    tracer: Tracer


def context_of(request: Request) -> GatewayContext:
    context: GatewayContext = request.app.state.context
    return context
