"""/signin: a browser trades the API token for a session cookie, to read the pages of a
deployment whose reads need the token (``auth``).

The cookie holds a value derived from the token (``session_value``), HttpOnly and
SameSite=Strict: scripts cannot read it and no other site's request carries it. Writes still
take the token itself, as a bearer header (the launch form asks for it).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.gateway.auth import SESSION_COOKIE, session_value
from services.gateway.context import context_of
from shared.exposure import same_token

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


def _local(target: object) -> str:
    """``target`` if it is a path of this site, else "/": a sign-in link must not send the
    browser elsewhere ("//evil.example", "https://…")."""
    local = (
        isinstance(target, str)
        and target.startswith("/")
        and not target.startswith("//")
        and "\\" not in target
        and all(ord(c) >= 32 for c in target)
    )
    return target if local and isinstance(target, str) else "/"


@router.get("/signin", response_class=HTMLResponse)
async def signin_form(request: Request, next: str = "/") -> HTMLResponse:
    from services.gateway.ui.pages import page  # the pages import the API modules

    return page(request, "signin.html", title="Sign in", next=_local(next))


@router.post("/signin")
async def signin(request: Request) -> Response:
    from services.gateway.ui.pages import page

    async with request.form(max_files=0, max_fields=4) as form:
        offered, target = form.get("token"), _local(form.get("next"))
    token = context_of(request).settings.api_token
    if token is None:
        return RedirectResponse(target, status.HTTP_303_SEE_OTHER)
    if not isinstance(offered, str) or not same_token(offered, token):
        return page(
            request,
            "signin.html",
            title="Sign in",
            status_code=status.HTTP_401_UNAUTHORIZED,
            messages=[("error", "That is not this deployment's API token.")],
            next=target,
        )
    response = RedirectResponse(target, status.HTTP_303_SEE_OTHER)
    response.set_cookie(
        SESSION_COOKIE,
        session_value(token),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response
