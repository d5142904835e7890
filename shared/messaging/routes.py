"""Typed handlers: what one subscription handles, as payload classes and their handlers.

The payload class is the contract (as faststream's handler parameter is its schema): a
handler receives its payload already validated as that class, with the envelope beside it for
the metadata (ids, stream, trace), and the subscription's bindings follow from the classes,
so the types a service handles are written once. A message of a type no route names (a
dead letter replayed to the wrong queue, a hand-published mistake) is refused as invalid,
naming what the subscription does handle, instead of being read as something it is not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from shared.errors import InvalidMessage
from shared.messages import Envelope, Payload
from shared.messaging.broker import Binding

__all__ = ["Routes", "TypedHandler"]

P = TypeVar("P", bound=Payload)

# A handler's returned envelope is sent as the reply when the message asked for one.
TypedHandler = Callable[[P, Envelope], Awaitable[Envelope | None]]


@dataclass(frozen=True, slots=True)
class _Route:
    payload: type[Payload]
    binding: Binding
    handler: TypedHandler[Any]


class Routes:
    """One subscription's handlers by payload class; called with an envelope (it is the
    bus's ``Handler``), it opens the payload as its class and calls that class's handler."""

    def __init__(self, exchange: str) -> None:
        self._exchange = exchange
        self._routes: dict[str, _Route] = {}
        self._any: _Route | None = None

    def on(
        self,
        payload: type[P],
        handler: TypedHandler[P],
        *,
        key: str | None = None,
        exchange: str | None = None,
    ) -> Routes:
        """Handle ``payload`` messages with ``handler``; they arrive under ``key`` (the type,
        as events are routed; a call's own key for a request/reply call)."""
        if payload.TYPE in self._routes:
            raise ValueError(f"{payload.TYPE!r} is routed twice")
        binding = Binding(exchange or self._exchange, key or payload.TYPE)
        self._routes[payload.TYPE] = _Route(payload, binding, handler)
        return self

    def on_any(self, handler: TypedHandler[Payload], *, key: str) -> Routes:
        """Handle every registered type arriving under ``key`` (the recorder's ``#``), each
        opened as the class its type names."""
        self._any = _Route(Payload, Binding(self._exchange, key), handler)
        return self

    @property
    def bindings(self) -> list[Binding]:
        routes = [*self._routes.values(), *([self._any] if self._any else [])]
        return list(dict.fromkeys(route.binding for route in routes))

    @property
    def types(self) -> list[str]:
        return sorted(self._routes)

    async def __call__(self, envelope: Envelope) -> Envelope | None:
        route = self._routes.get(envelope.type)
        if route is not None:
            return await route.handler(envelope.open(route.payload), envelope)
        if self._any is not None:
            return await self._any.handler(envelope.typed(), envelope)
        raise InvalidMessage(
            f"{envelope.type!r} is not handled here; this subscription handles "
            f"{', '.join(self.types)}"
        )
