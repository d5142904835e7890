"""The gateway's first check of every request, before any route sees it.

- A body over its bound is answered 413 naming the bound: ``DLSCOPE_MAX_BODY_BYTES`` for
  every request, ``DLSCOPE_MAX_UPLOAD_BYTES`` for a model registration (which carries its
  files). The bound is enforced on the bytes received, not only on ``Content-Length``.
- A query, a path or a JSON body holding NUL or an unpaired surrogate is answered 422
  naming where (``shared.inputs.unsafe_text``): PostgreSQL cannot store NUL, no encoder can
  write a lone surrogate, and either would otherwise fail deep inside a query as a 500.

The answers have FastAPI's shape (``detail`` with ``loc`` and ``msg``), so a client reads them
as it reads any other refusal.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.inputs import quote, unsafe_text

__all__ = ["UPLOAD_ROUTES", "InputGuard"]

# (method, path) of the requests that upload files (as multipart/form-data), bounded by
# DLSCOPE_MAX_UPLOAD_BYTES.
UPLOAD_ROUTES = frozenset({("POST", "/v1/models")})


class InputGuard:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int, max_upload_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_upload_bytes = max_upload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = _unsafe_address(scope)
        if problem is not None:
            await _answer(send, 422, {"detail": [problem]})
            return
        # Only a multipart registration carries files; its manifest alone is any other body.
        upload = (scope["method"], scope["path"].rstrip("/")) in UPLOAD_ROUTES and (
            _header_bytes(scope, b"content-type") or b""
        ).lower().startswith(b"multipart/form-data")
        limit, setting = (
            (self.max_upload_bytes, "DLSCOPE_MAX_UPLOAD_BYTES")
            if upload
            else (self.max_body_bytes, "DLSCOPE_MAX_BODY_BYTES")
        )
        too_large = {"detail": f"the request body is over {limit} bytes ({setting})"}
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _answer(send, 413, too_large)
            return
        body, more = await _read(receive, limit)
        if more:
            await _answer(send, 413, too_large)
            return
        if b"json" in (_header_bytes(scope, b"content-type") or b"") and (
            problem := _unsafe_json(body)
        ):
            await _answer(send, 422, {"detail": [problem]})
            return
        await self.app(scope, _replay(body, receive), send)


async def _read(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The body, up to ``limit`` bytes; and whether there was more than that."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return b"", True
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), False


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: a disconnect, when it comes

    return replayed


def _unsafe_address(scope: Scope) -> dict[str, Any] | None:
    problem = unsafe_text(scope["path"])
    if problem is not None:
        return _error(("path",), problem[1], scope["path"])
    try:
        pairs = parse_qsl(
            scope.get("query_string", b"").decode("latin-1"),
            keep_blank_values=True,
            encoding="utf-8",
            errors="strict",
        )
    except UnicodeDecodeError:
        return _error(("query",), "bytes that are not UTF-8", None)
    for name, value in pairs:
        if (problem := unsafe_text(name)) is not None:
            return _error(("query", name), f"a name with {problem[1]}", name)
        if (problem := unsafe_text(value)) is not None:
            return _error(("query", name), problem[1], value)
    return None


def _unsafe_json(body: bytes) -> dict[str, Any] | None:
    # orjson refuses bytes that are not UTF-8 and unpaired surrogates, where Python's json,
    # which reads the body for FastAPI, accepts escaped ones; any other fault of the JSON is
    # left to FastAPI to describe in its own words.
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "surrogate" in str(exc) or "UTF-8" in str(exc):
            return _error(("body",), f"text that is not Unicode ({exc})", None)
        return None
    # A NUL can only arrive escaped: look for the escape before walking the whole body.
    if b"\\u0000" not in body or (problem := unsafe_text(data)) is None:
        return None
    return _error(("body", *problem[0]), problem[1], None)


def _error(loc: tuple[str | int, ...], what: str, value: str | None) -> dict[str, Any]:
    error: dict[str, Any] = {
        "type": "string_unsafe",
        "loc": list(loc),
        "msg": f"the text holds {what}",
    }
    if value is not None:
        error["input"] = quote(value)
    return error


def _header_bytes(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def _header(scope: Scope, name: bytes) -> str | None:
    value = _header_bytes(scope, name)
    return None if value is None else value.decode("latin-1").strip()


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    content = orjson.dumps(body)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(content)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": content})
