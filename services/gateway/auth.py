"""Write endpoints take a bearer token when DLSCOPE_API_TOKEN is set."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.gateway.context import context_of

__all__ = ["require_token"]

# Stateless: it only parses the Authorization header.
_BEARER = HTTPBearer(auto_error=False)


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
