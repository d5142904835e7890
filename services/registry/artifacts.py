"""The registry's artifact server: the files registered manifests pin, over HTTP, by sha256.

Workers on other hosts share no filesystem with the control plane: the scheduler names each
local source of a job by its URL here (``shared.artifacts.served``), and the worker
downloads it and verifies its sha256 before using it. Only files some registered manifest
pins are served, found by their digest, and only those the registry's source policy
allows (its upload store, ``pkg://`` resources, the operator's source roots): a manifest
naming any other file, registered before that policy or by a local user, is not served.
With a token (``DLSCOPE_ARTIFACT_TOKEN``, else the API token), every request needs it
(``Authorization: Bearer``), as workers send it; ``DLSCOPE_PUBLIC_READS`` opens it only when
it is guarded by the API token alone.

    GET|HEAD /sha256/<digest>/<file name>   the bytes, or 404 saying why there are none
    GET      /healthz
    GET      /openapi.json                   this, as OpenAPI (what schemathesis checks it by)

Started by the registry when ``DLSCOPE_ARTIFACT_URL`` is set, on ``DLSCOPE_ARTIFACT_LISTEN``
(default: the URL's port, on every interface with a token and on loopback without one; see
``shared.exposure``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from shared.artifacts import SERVED_ROUTE, SERVER_HEADER, is_remote, locate
from shared.config import Settings
from shared.errors import ArtifactError, ConfigurationError
from shared.exposure import check_exposure, same_token
from shared.manifests import ModelSource
from shared.serving import InProcessServer

__all__ = ["ArtifactServer", "artifact_app", "listen_address"]

log = logging.getLogger(__name__)

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
# Chunks as large as the cache reads them: fewer, bigger writes for files of gigabytes.
_CHUNK = 1 << 20

FindFile = Callable[[str], ModelSource | None]
Servable = Callable[[str], bool]


def _openapi(token_required: bool) -> dict[str, Any]:
    """The server's OpenAPI document: the artifacts (guarded when a token is set) and the
    probe (never guarded)."""
    text = {"text/plain": {"schema": {"type": "string"}}}
    binary = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
    responses: dict[str, Any] = {
        "200": {"description": "the bytes a registered manifest pins", "content": binary},
        "404": {"description": "no registered file with that sha256 is served", "content": text},
    }
    guarded: dict[str, Any] = {}
    if token_required:
        responses["401"] = {"description": "no bearer token, or not it", "content": text}
        guarded = {"security": [{"bearer": []}]}
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in ("digest", "name")
    ]
    operation = {"parameters": parameters, "responses": responses, **guarded}
    health = {"200": {"description": "up", "content": {"application/json": {"schema": {}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "dlscope registry artifact server", "version": "1"},
        "paths": {
            SERVED_ROUTE: {
                "get": {"operationId": "artifact", **operation},
                "head": {"operationId": "artifact_head", **operation},
            },
            "/healthz": {"get": {"operationId": "healthz", "responses": health}},
        },
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


def listen_address(settings: Settings) -> tuple[str, int]:
    """Where to listen: ``DLSCOPE_ARTIFACT_LISTEN`` ("host:port"), else the artifact URL's
    port, on every interface when a token guards it and on loopback when none does."""
    if settings.artifact_listen:
        host, _, port = settings.artifact_listen.rpartition(":")
        return host.strip("[]"), int(port)
    artifact_url = settings.artifact_url or ""
    parsed = urlparse(artifact_url)
    try:
        url_port = parsed.port
    except ValueError as exc:
        raise ConfigurationError(f"DLSCOPE_ARTIFACT_URL {artifact_url!r}: {exc}") from exc
    host = "0.0.0.0" if settings.resolved_artifact_token else "127.0.0.1"
    return host, url_port or (443 if parsed.scheme == "https" else 80)


def artifact_app(find: FindFile, *, servable: Servable, token: str | None = None) -> Starlette:
    async def artifact(request: Request) -> Response:
        if token is not None and not _authorized(request, token):
            return PlainTextResponse(
                "this artifact server needs 'Authorization: Bearer <token>' (DLSCOPE_API_TOKEN)",
                status_code=401,
                headers={"WWW-Authenticate": "Bearer", SERVER_HEADER: "1"},
            )
        digest = request.path_params["digest"]
        if not _DIGEST.match(digest):
            return _missing(f"{digest[:80]!r} is not a sha256 hex digest (64 lowercase hex digits)")
        source = find(digest)
        if source is None or not (is_remote(source.uri) or servable(source.uri)):
            # A file the policy keeps back is, to whoever asks, one that is not registered.
            return _missing(f"no registered manifest pins a file with sha256 {digest}")
        if is_remote(source.uri):
            return _missing(
                f"the file with sha256 {digest} is not kept here: fetch it from {source.uri}"
            )
        try:
            path = locate(source.uri)
        except ArtifactError as exc:
            return _missing(f"the registry cannot read {source.uri}: {exc}")
        if not path.is_file():
            return _missing(f"the registry's copy of {source.uri} is missing (not a file: {path})")
        # The bytes are the worker's to verify (it hashes what it receives), so a file changed
        # behind the registry's back is refused there, with the digest it should have had.
        response = FileResponse(path, media_type="application/octet-stream")
        response.chunk_size = _CHUNK
        return response

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    document = _openapi(token is not None)

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    return Starlette(
        routes=[
            Route(SERVED_ROUTE, artifact, methods=["GET", "HEAD"]),
            Route("/healthz", healthz),
            Route("/openapi.json", openapi),
        ]
    )


def _missing(reason: str) -> Response:
    # Plain text: the worker quotes the body in its error, so the user reads this reason.
    return PlainTextResponse(reason, status_code=404, headers={SERVER_HEADER: "1"})


def _authorized(request: Request, token: str) -> bool:
    scheme, _, offered = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and same_token(offered.strip(), token)


class ArtifactServer:
    """The HTTP server, started and stopped with the registry."""

    name = "registry artifact server"

    def __init__(
        self, find: FindFile, *, servable: Servable, settings: Settings, host: str, port: int
    ) -> None:
        self.host = host
        self.port = port
        self._settings = settings
        token = settings.resolved_artifact_token
        guarded = None if settings.public_reads and not settings.artifact_token else token
        self._server = InProcessServer(
            artifact_app(find, servable=servable, token=guarded),
            host=host,
            port=port,
            name=self.name,
            setting="DLSCOPE_ARTIFACT_LISTEN",
        )

    async def start(self) -> None:
        check_exposure(
            self.host,
            self._settings,
            self.name,
            token=self._settings.resolved_artifact_token,
            setting="DLSCOPE_ARTIFACT_TOKEN (or DLSCOPE_API_TOKEN)",
        )
        await self._server.start()
        self.port = self._server.port
        log.info("serving artifacts on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        await self._server.stop()
