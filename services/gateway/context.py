"""What every route of the gateway works with, handed to it through the app's state."""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from opentelemetry.trace import Tracer
from starlette.requests import Request

from services.gateway.progress import ProgressFeed
from shared.artifacts.resolutions import Resolutions
from shared.config import Settings
from shared.errors import BrokerUnavailable
from shared.eventstore import EventStore
from shared.messages import Envelope, Payload, ResolveArtifact, ResolvedArtifact, rpc_key
from shared.messaging import Bus

__all__ = [
    "PUBLISH_BOUND_S",
    "GatewayContext",
    "ask_analyzer",
    "ask_registry",
    "context_of",
    "publish",
    "resolve",
    "status_path",
]

# The longest an HTTP request waits for the broker to take a message. The broker's own
# bound (10 s, for services that would rather wait out a reconnect) is too long to keep a
# client: past this the request is answered 503 and the client retries.
PUBLISH_BOUND_S = 2.0


T = TypeVar("T")
P = TypeVar("P", bound=Payload)

# How long the registry's answer for a version constraint is kept. Registrations and
# deprecations that this gateway makes or hears of forget it at once; the bound is for one
# it never heard of (made while its link to the broker was down).
RESOLUTION_KEPT_S = 30.0

# Ids this gateway accepted, kept a while: a read of one that the recorder has not stored
# yet waits for it (the client's next request after its POST), instead of a 404.
ACCEPTED_KEPT = 1000
READ_YOUR_WRITE_S = 5.0


@dataclass
class GatewayContext:
    settings: Settings
    bus: Bus
    store: EventStore
    tracer: Tracer
    progress: ProgressFeed = field(default_factory=ProgressFeed)
    accepted: OrderedDict[uuid.UUID, None] = field(default_factory=OrderedDict)
    resolutions: Resolutions = field(default_factory=lambda: Resolutions(ttl_s=RESOLUTION_KEPT_S))

    def remember_accepted(self, key: uuid.UUID) -> None:
        self.accepted[key] = None
        while len(self.accepted) > ACCEPTED_KEPT:
            self.accepted.popitem(last=False)

    async def stored(self, key: uuid.UUID, read: Callable[[], Awaitable[T | None]]) -> T | None:
        """``read()``; for an id accepted here and not stored yet, read again until it is
        (within ``READ_YOUR_WRITE_S``), so a client's read after its write finds it."""
        found = await read()
        if found is not None or key not in self.accepted:
            return found
        # Polled: the recorder, in another process, tells no one when it has stored a thing.
        for _ in range(int(READ_YOUR_WRITE_S / 0.05)):
            await asyncio.sleep(0.05)
            if (found := await read()) is not None:
                break
        return found


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
    context: GatewayContext,
    call: str,
    payload: Payload,
    answer: type[P],
    *,
    correlation_id: uuid.UUID | None = None,
    max_bytes: int | None = None,
) -> P:
    """One request/reply call to the registry (``resolve``, ``register``, ``deprecate``),
    its reply opened as ``answer``; ``max_bytes`` for a call larger than other messages (a
    registration's files)."""
    return await _ask(context, "registry", call, payload, answer, correlation_id, max_bytes)


async def resolve(
    context: GatewayContext,
    kind: str,
    name: str,
    version: str,
    *,
    correlation_id: uuid.UUID | None = None,
) -> ResolvedArtifact:
    """The registry's answer to resolving ``kind`` ``name`` ``version``: from what this
    gateway keeps (``Resolutions``), else asked, and kept."""
    kept = context.resolutions.get(kind, name, version)
    if kept is not None:
        return kept
    found = await ask_registry(
        context,
        "resolve",
        ResolveArtifact(kind=kind, name=name, version=version),
        ResolvedArtifact,
        correlation_id=correlation_id,
    )
    context.resolutions.put(kind, name, version, found)
    return found


async def ask_analyzer(context: GatewayContext, call: str, payload: Payload, answer: type[P]) -> P:
    """One request/reply call to the analyzer (``figures``, ``history``)."""
    return await _ask(context, "analyzer", call, payload, answer, None)


async def _ask(
    context: GatewayContext,
    service: str,
    call: str,
    payload: Payload,
    answer: type[P],
    correlation_id: uuid.UUID | None,
    max_bytes: int | None = None,
) -> P:
    _check_connected(context)
    timeout = context.settings.rpc_timeout_s
    try:
        # The reply's own wait is bounded by rpc_timeout_s; this bounds sending the request.
        async with asyncio.timeout(timeout + PUBLISH_BOUND_S):
            return await context.bus.ask(
                rpc_key(service, call),
                Envelope.wrap(
                    payload, stream_id=service, correlation_id=correlation_id or uuid.uuid4()
                ),
                answer,
                timeout=timeout,
                max_bytes=max_bytes,
            )
    except TimeoutError as exc:
        raise BrokerUnavailable(f"the broker did not take the {service}'s {call!r} call") from exc


def _check_connected(context: GatewayContext) -> None:
    # A broker known to be away (aio-pika is reconnecting) fails the request at once.
    if not context.bus.is_connected:
        raise BrokerUnavailable("the broker is unavailable (reconnecting); try again shortly")


def status_path(request: Request, route: str, **params: object) -> str:
    """Where an accepted request's state is read: a path on this gateway, not a URL built
    from the request's Host header, which any client writes (a 202 pointing elsewhere would
    send the next request, its token with it, to whoever the header names; issue 42)."""
    path = request.app.url_path_for(route, **params)
    return f"{request.scope.get('root_path', '')}{path}"
