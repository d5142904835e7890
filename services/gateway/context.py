"""What every route of the gateway works with, handed to it through the app's state."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from opentelemetry.trace import Tracer
from starlette.requests import Request

from shared.config import Settings
from shared.errors import BrokerUnavailable
from shared.eventstore import EventStore
from shared.messages import Envelope, Payload, rpc_key
from shared.messaging import Bus

__all__ = ["PUBLISH_BOUND_S", "GatewayContext", "ask_registry", "context_of", "publish"]

# The longest an HTTP request waits for the broker to take a message. The broker's own
# bound (10 s, for services that would rather wait out a reconnect) is too long to keep a
# client: past this the request is answered 503 and the client retries.
PUBLISH_BOUND_S = 2.0


@dataclass
class GatewayContext:
    settings: Settings
    bus: Bus
    store: EventStore
    tracer: Tracer


def context_of(request: Request) -> GatewayContext:
    context: GatewayContext = request.app.state.context
    return context


async def publish(context: GatewayContext, envelope: Envelope) -> None:
    """Publish ``envelope``, or raise ``BrokerUnavailable`` within ``PUBLISH_BOUND_S``."""
    _check_connected(context)
    try:
        async with asyncio.timeout(PUBLISH_BOUND_S):
            await context.bus.publish(envelope)
    except TimeoutError as exc:
        # The broker may or may not have taken it; the client's retry is a new request.
        raise BrokerUnavailable(
            f"the broker did not take {envelope.type!r} within {PUBLISH_BOUND_S:g} s"
        ) from exc


async def ask_registry(
    context: GatewayContext, call: str, payload: Payload, *, correlation_id: uuid.UUID | None = None
) -> Envelope:
    """One request/reply call to the registry (``resolve``, ``register``, ``deprecate``)."""
    _check_connected(context)
    timeout = context.settings.rpc_timeout_s
    try:
        # The reply's own wait is bounded by rpc_timeout_s; this bounds sending the request.
        async with asyncio.timeout(timeout + PUBLISH_BOUND_S):
            return await context.bus.request(
                rpc_key("registry", call),
                Envelope.wrap(
                    payload, stream_id="registry", correlation_id=correlation_id or uuid.uuid4()
                ),
                timeout=timeout,
            )
    except TimeoutError as exc:
        raise BrokerUnavailable(f"the broker did not take the registry's {call!r} call") from exc


def _check_connected(context: GatewayContext) -> None:
    # A broker known to be away (aio-pika is reconnecting) fails the request at once.
    if not context.bus.is_connected:
        raise BrokerUnavailable("the broker is unavailable (reconnecting); try again shortly")
