"""Write endpoints take a bearer token when DLSCOPE_API_TOKEN is set.

The OpenAPI document says so only then: without a token no operation needs the
``Authorization`` header, and the document does not ask for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.openapi.utils import get_openapi
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.gateway.context import context_of

__all__ = ["UNAUTHORIZED", "require_token", "secured_openapi"]

# Stateless: it only parses the Authorization header.
_BEARER = HTTPBearer(auto_error=False)

UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    status.HTTP_401_UNAUTHORIZED: {"description": "no 'Authorization: Bearer <token>', or not it"}
}


async def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
) -> None:
    token = context_of(request).settings.api_token
    if token and (credentials is None or credentials.credentials != token):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "this endpoint needs 'Authorization: Bearer <token>' (DLSCOPE_API_TOKEN)",
            headers={"WWW-Authenticate": "Bearer"},
        )


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
