"""Who may do what, when ``DLSCOPE_API_TOKEN`` is set (without one, the gateway listens on
loopback only, see ``shared.exposure``).

- Writes take ``Authorization: Bearer <token>`` (``require_token``), never a cookie, so no
  other site can make a signed-in browser start work.
- Reads (the /v1 API and the pages: the registry and every result) need the same token,
  unless ``DLSCOPE_PUBLIC_READS=true`` opens them (``ReadGuard``). A browser signs in once at
  /signin and then carries a session cookie (HttpOnly, SameSite=Strict) derived from the
  token, not the token itself. /healthz, /readyz, the OpenAPI document and the static files
  stay open: they say nothing of the registry or the results.
- Tokens are compared in constant time.

The OpenAPI document shows the bearer scheme only when a token is configured.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.openapi.utils import get_openapi
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from services.gateway.context import context_of
from shared.config import Settings
from shared.exposure import same_token

__all__ = [
    "SESSION_COOKIE",
    "UNAUTHORIZED",
    "ReadGuard",
    "require_token",
    "secured_openapi",
    "session_value",
    "signed_in",
]

# Stateless: it only parses the Authorization header.
_BEARER = HTTPBearer(auto_error=False)

UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    status.HTTP_401_UNAUTHORIZED: {"description": "no 'Authorization: Bearer <token>', or not it"}
}
SESSION_COOKIE = "dlscope_session"
# Paths anyone may read whatever the settings: probes, the API's description, the scripts.
_OPEN = ("/healthz", "/readyz", "/openapi.json", "/docs", "/redoc", "/static/", "/signin")


async def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
) -> None:
    token = context_of(request).settings.api_token
    if token and (credentials is None or not same_token(credentials.credentials, token)):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "this endpoint needs 'Authorization: Bearer <token>' (DLSCOPE_API_TOKEN)",
            headers={"WWW-Authenticate": "Bearer"},
        )


def session_value(token: str) -> str:
    """The session cookie's value for ``token``: derived from it, so the cookie is worth
    nothing anywhere else, and changes when the token does."""
    return hmac.new(token.encode(), b"dlscope web session", hashlib.sha256).hexdigest()


def signed_in(headers: dict[str, str], token: str) -> bool:
    """Whether a request with these (lower-cased) headers carries the token or the session."""
    scheme, _, offered = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and same_token(offered.strip(), token):
        return True
    for part in headers.get("cookie", "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == SESSION_COOKIE and same_token(value, session_value(token)):
            return True
    return False


class ReadGuard:
    """With a token and reads not opened: a read of the API without it is 401; a page asked
    for by a browser without it is sent to /signin."""

    def __init__(self, app: ASGIApp, *, settings: Settings) -> None:
        self.app = app
        self.token = None if settings.public_reads else settings.api_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        # Writes are their routes' to guard (bearer only); reads are this guard's.
        if (
            scope["type"] != "http"
            or self.token is None
            or scope["method"] not in ("GET", "HEAD")
            or path.startswith(_OPEN)
        ):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if signed_in(headers, self.token):
            await self.app(scope, receive, send)
            return
        if not path.startswith("/v1/") and "text/html" in headers.get("accept", ""):
            query = scope.get("query_string", b"").decode("latin-1")
            target = path + (f"?{query}" if query else "")
            await _send(send, 303, [(b"location", f"/signin?next={quote(target)}".encode())], b"")
            return
        await _send(
            send,
            401,
            [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
            b'{"detail":"reading this deployment needs \'Authorization: Bearer <token>\' '
            b'(DLSCOPE_API_TOKEN)"}',
        )


async def _send(send: Send, code: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def secured_openapi(app: FastAPI, *, token_required: bool) -> Callable[[], dict[str, Any]]:
    """``app.openapi``: FastAPI's document, whose bearer scheme and 401 answers are kept only
    when a token is configured (FastAPI lists the scheme on every operation that uses it)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                openapi_version=app.openapi_version,
                description=app.description,
                routes=app.routes,
                tags=app.openapi_tags,
                servers=app.servers,
            )
            if not token_required:
                _without_security(document)
            app.openapi_schema = document
        return app.openapi_schema

    return openapi


def _without_security(document: dict[str, Any]) -> None:
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            if operation.pop("security", None) is not None:
                operation.get("responses", {}).pop(str(status.HTTP_401_UNAUTHORIZED), None)
    schemes = document.get("components", {}).get("securitySchemes", {})
    schemes.pop("HTTPBearer", None)
    if not schemes:
        document.get("components", {}).pop("securitySchemes", None)
