"""Tracing in middleware, not in handlers: every HTTP request is a SERVER span, the root of
what it causes. A plain ASGI middleware: Starlette's BaseHTTPMiddleware costs about a
millisecond per request, which the dispatch-latency budget cannot spare."""

from __future__ import annotations

from opentelemetry.trace import SpanKind, Tracer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["TracingMiddleware"]


class TracingMiddleware:
    def __init__(self, app: ASGIApp, tracer: Tracer) -> None:
        self.app = app
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        with self.tracer.start_as_current_span(
            f"{method} {path}",
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path},
        ) as span:

            async def send_traced(message: Message) -> None:
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message["status"])
                await send(message)

            await self.app(scope, receive, send_traced)
