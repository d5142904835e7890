"""The headers every answer of the gateway carries, so that nothing a page shows can run as
a script there, frame it, or be read as another type than the one it is sent as:

- ``Content-Security-Policy``: scripts only from the gateway's own files (no inline code,
  no ``eval``, nothing from another origin), no plug-ins, no ``<base>``, forms sent only
  back here, never in a frame (``PAGE_POLICY``). A response that says its own policy keeps
  it (a report: ``DOCUMENT_POLICY``, no script at all).
- ``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY`` (for browsers that predate
  ``frame-ancestors``), ``Referrer-Policy: same-origin``.

FastAPI's own documentation pages (Swagger UI, ReDoc) load their scripts from a CDN and
start them with an inline script: their policy (``api_docs_policy``) names those origins and
the hash of each inline script of the page, and allows no other script.

A plain ASGI middleware, as ``tracing``: an answer passes through as it is sent (an event
stream is never held back); only a documentation page, a few kB, is read whole first.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["DOCUMENT_POLICY", "PAGE_POLICY", "SecurityHeaders", "api_docs_policy"]

PAGE_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        # No inline style either: dlscope.js asks Vega-Embed and its tooltips not to add
        # their <style> elements (dlscope.css has their rules). Vega sets the SVG's styles
        # through the DOM, which a policy does not restrict.
        "style-src 'self'",
        # The pages' favicon is an empty data: URL.
        "img-src 'self' data:",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
# A document that opens anywhere, offline (a report): its styles inline, its charts inline
# SVG; it loads nothing and runs nothing.
DOCUMENT_POLICY = "; ".join(
    (
        "default-src 'none'",
        "style-src 'unsafe-inline'",
        "img-src data:",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
_HEADERS = (
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "same-origin"),
)
_INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)
_SCRIPT_SOURCE = re.compile(rb"""<script[^>]*\ssrc=["']?([^"' >]+)""")


def api_docs_policy(page: bytes) -> str:
    """The policy of an API documentation page: its scripts are the CDN's files it names
    and its own inline scripts, by hash; the CDN's styles, fonts and images too."""
    origins = sorted(
        {
            f"{url.scheme}://{url.netloc}"
            for source in _SCRIPT_SOURCE.findall(page)
            if (url := urlsplit(source.decode())).scheme == "https"
        }
    )
    hashes = [
        "'sha256-" + base64.b64encode(hashlib.sha256(code).digest()).decode() + "'"
        for code in _INLINE_SCRIPT.findall(page)
    ]
    return "; ".join(
        (
            "default-src 'self' https: data: blob:",
            " ".join(("script-src 'self'", *origins, *hashes)),
            "style-src 'self' 'unsafe-inline' https:",
            "worker-src 'self' blob:",  # ReDoc parses the schema in a worker of its own
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        )
    )


class SecurityHeaders:
    """Adds the headers to every HTTP answer that has not set them itself. ``api_docs``: the
    paths of the documentation pages (``app.docs_url``, ``app.redoc_url``), whose body is
    read to write their policy."""

    def __init__(self, app: ASGIApp, api_docs: Iterable[str | None] = ()) -> None:
        self.app = app
        self.api_docs = frozenset(path for path in api_docs if path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] in self.api_docs:
            await self._api_docs(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                _secure(message, PAGE_POLICY)
            await send(message)

        await self.app(scope, receive, send_secured)

    async def _api_docs(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A page of a few kB, answered at once: held until its body is whole.
        start: Message | None = None
        body: list[bytes] = []

        async def send_secured(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] == "http.response.body" and start is not None:
                body.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                _secure(start, api_docs_policy(b"".join(body)))
                await send(start)
                await send({**message, "body": b"".join(body)})
                start = None
                return
            await send(message)

        await self.app(scope, receive, send_secured)


def _secure(start: Message, policy: str) -> None:
    headers = MutableHeaders(scope=start)
    headers.setdefault("content-security-policy", policy)
    for name, value in _HEADERS:
        headers.setdefault(name, value)
