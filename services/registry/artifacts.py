"""The registry's artifact server: the files registered manifests pin, over HTTP, by sha256.

Workers on other hosts share no filesystem with the control plane: the scheduler names each
local source of a job by its URL here (``shared.artifacts.served``), and the worker
downloads it and verifies its sha256 before using it. Only files some registered manifest
pins are served, found by their digest, so the server publishes nothing the registry was
not asked to register (and registering needs the API token).

    GET|HEAD /sha256/<digest>/<file name>   the bytes, or 404 saying why there are none
    GET      /healthz

Started by the registry when ``DLSCOPE_ARTIFACT_URL`` is set, on ``DLSCOPE_ARTIFACT_LISTEN``
(default: every interface, at the URL's port).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from urllib.parse import urlparse

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from shared.artifacts import SERVED_ROUTE, is_remote, locate
from shared.errors import ArtifactError, ConfigurationError
from shared.manifests import ModelSource

__all__ = ["ArtifactServer", "artifact_app", "listen_address"]

log = logging.getLogger(__name__)

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
# Chunks as large as the cache reads them: fewer, bigger writes for files of gigabytes.
_CHUNK = 1 << 20

FindFile = Callable[[str], ModelSource | None]


def listen_address(artifact_url: str, listen: str | None) -> tuple[str, int]:
    """Where to listen: ``listen`` ("host:port"), else every interface at the URL's port."""
    if listen:
        host, _, port = listen.rpartition(":")
        return host.strip("[]"), int(port)
    parsed = urlparse(artifact_url)
    try:
        url_port = parsed.port
    except ValueError as exc:
        raise ConfigurationError(f"DLSCOPE_ARTIFACT_URL {artifact_url!r}: {exc}") from exc
    return "0.0.0.0", url_port or (443 if parsed.scheme == "https" else 80)


def artifact_app(find: FindFile) -> Starlette:
    async def artifact(request: Request) -> Response:
        digest = request.path_params["digest"]
        if not _DIGEST.match(digest):
            return _missing(f"{digest!r} is not a sha256 hex digest (64 lowercase hex digits)")
        source = find(digest)
        if source is None:
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

    return Starlette(
        routes=[
            Route(SERVED_ROUTE, artifact, methods=["GET", "HEAD"]),
            Route("/healthz", healthz),
        ]
    )


def _missing(reason: str) -> Response:
    # Plain text: the worker quotes the body in its error, so the user reads this reason.
    return PlainTextResponse(reason, status_code=404)


class _Server(uvicorn.Server):
    # The process's lifespan owns SIGINT/SIGTERM and stops the server with everything else.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ArtifactServer:
    """The HTTP server, started and stopped with the registry."""

    name = "registry artifact server"

    def __init__(self, find: FindFile, *, host: str, port: int) -> None:
        self.host = host
        self.port = port
        config = uvicorn.Config(
            artifact_app(find),
            host=host,
            port=port,
            log_level="warning",
            lifespan="off",
            access_log=False,
        )
        self._server = _Server(config)
        self._serving: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._serving = asyncio.create_task(self._server.serve(), name=self.name)
        while not self._server.started:
            if self._serving.done():  # e.g. the address is taken: surface uvicorn's error
                await self._serving
                raise ConfigurationError(
                    f"the registry's artifact server could not listen on {self.host}:{self.port} "
                    "(DLSCOPE_ARTIFACT_LISTEN)"
                )
            await asyncio.sleep(0.01)
        if self.port == 0:
            self.port = self._server.servers[0].sockets[0].getsockname()[1]
        log.info("serving artifacts on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._serving is not None:
            self._server.should_exit = True
            await self._serving
