"""One table from dlscope's errors to HTTP statuses, and the handler that answers with it.

A store or broker that is away, or a service that does not answer in time, is 503 with a
``Retry-After``: the request was sound and may succeed shortly. Anything else that reaches
here is a fault of this deployment, 500.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from fastapi import Request, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.errors import (
    BrokerUnavailable,
    DlscopeError,
    MessageTooLarge,
    RequestTimeout,
    StoreUnavailable,
)
from shared.inputs import MAX_QUOTE

__all__ = [
    "RETRY_AFTER_S",
    "UNAVAILABLE",
    "dlscope_error",
    "http_error",
    "status_of",
    "validation_error",
]

# Paths of the machine interfaces: their errors are JSON; every other path is a web page,
# whose errors are pages a person reads (with the same status).
_API_PREFIXES = ("/v1/", "/healthz", "/readyz", "/openapi.json", "/docs", "/redoc", "/static/")

# Seconds a client should wait before trying again: about a broker's reconnect interval
# plus a database's restart, short enough that a retrying client is not kept long.
RETRY_AFTER_S = 5

# Most specific first: the first class the error is an instance of gives its status.
_STATUSES: tuple[tuple[type[DlscopeError], int], ...] = (
    (StoreUnavailable, status.HTTP_503_SERVICE_UNAVAILABLE),
    (BrokerUnavailable, status.HTTP_503_SERVICE_UNAVAILABLE),
    (RequestTimeout, status.HTTP_503_SERVICE_UNAVAILABLE),
    (MessageTooLarge, status.HTTP_413_CONTENT_TOO_LARGE),
)

# Documented on every operation: any of them may meet an outage.
UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    status.HTTP_503_SERVICE_UNAVAILABLE: {
        "description": "the event store or the broker is unavailable, or a service did not "
        "answer in time: try again after Retry-After seconds",
        "headers": {
            "Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}
        },
    }
}


def status_of(exc: DlscopeError) -> int:
    for kind, code in _STATUSES:
        if isinstance(exc, kind):
            return code
    return status.HTTP_500_INTERNAL_SERVER_ERROR


async def dlscope_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DlscopeError), "registered for DlscopeError only"
    code = status_of(exc)
    headers = (
        {"Retry-After": str(RETRY_AFTER_S)} if code == status.HTTP_503_SERVICE_UNAVAILABLE else None
    )
    if _is_page(request):
        return _error_page(request, code, str(exc), headers)
    return JSONResponse({"detail": str(exc)}, status_code=code, headers=headers)


async def http_error(request: Request, exc: Exception) -> Response:
    """FastAPI's answer, except that a 405's ``Allow`` lists the methods the OpenAPI document
    gives the path: Starlette names only those of the first route that matched it (GET and
    POST on /v1/evaluations are two routes)."""
    assert isinstance(exc, StarletteHTTPException), "registered for HTTPException only"
    if _is_page(request):
        return _error_page(request, exc.status_code, str(exc.detail), exc.headers)
    if exc.status_code == status.HTTP_405_METHOD_NOT_ALLOWED:
        allowed = _documented_methods(request.app.openapi(), request.url.path)
        if allowed:
            exc.headers = {**(exc.headers or {}), "Allow": ", ".join(allowed)}
    return await http_exception_handler(request, exc)


def _documented_methods(document: dict[str, Any], path: str) -> list[str]:
    for template, operations in document.get("paths", {}).items():
        if re.fullmatch(re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template)), path):
            return sorted(method.upper() for method in operations)
    return []


async def validation_error(request: Request, exc: Exception) -> Response:
    """FastAPI's 422, except on a page (an id that is not one names no page, a 404), and
    quoting at most a short prefix of what was refused: never a whole 50 MB field back."""
    assert isinstance(exc, RequestValidationError), "registered for validation errors only"
    if _is_page(request):
        return _error_page(
            request, status.HTTP_404_NOT_FOUND, f"There is no page at {request.url.path}.", None
        )
    errors = [_quoted(error) for error in exc.errors()]
    return JSONResponse(
        {"detail": jsonable_encoder(errors)}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT
    )


def _quoted(error: Mapping[str, Any]) -> dict[str, Any]:
    shown = {k: v for k, v in error.items() if k not in ("input", "url")}
    value = error.get("input")
    if isinstance(value, str):
        shown["input"] = value if len(value) <= MAX_QUOTE else f"{value[: MAX_QUOTE - 1]}…"
    elif isinstance(value, float) and not math.isfinite(value):
        shown["input"] = str(value)  # JSON has no NaN or Infinity: said as text, still a 422
    elif isinstance(value, int | float | bool) or value is None:
        shown["input"] = value
    # A mapping or a list is not echoed at all: its size is the sender's to choose.
    return shown


def _is_page(request: Request) -> bool:
    # A browser navigating asks for text/html; a script (curl, httpx) does not, and gets JSON.
    path = request.url.path
    return not path.startswith(_API_PREFIXES) and "text/html" in request.headers.get("accept", "")


_HEADINGS = {
    status.HTTP_404_NOT_FOUND: "Not found",
    status.HTTP_422_UNPROCESSABLE_CONTENT: "That cannot be shown",
    status.HTTP_503_SERVICE_UNAVAILABLE: "Temporarily unavailable",
}


def _error_page(
    request: Request, code: int, detail: str, headers: Mapping[str, str] | None
) -> Response:
    from services.gateway.ui.pages import page  # the pages import the API modules

    if code == status.HTTP_404_NOT_FOUND and detail == "Not Found":
        detail = f"There is no page at {request.url.path}."
    elif code == status.HTTP_503_SERVICE_UNAVAILABLE:
        detail += f" Try again in {RETRY_AFTER_S} s."
    response = page(
        request,
        "error.html",
        title=_HEADINGS.get(code, "Error"),
        status_code=code,
        heading=_HEADINGS.get(code, f"Error {code}"),
        detail=detail,
        links=[("/", "Home"), ("/evaluations", "Evaluations"), ("/experiments", "Experiments")],
    )
    response.headers.update(headers or {})
    return response
