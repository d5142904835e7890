"""An ASGI app served by uvicorn inside a service's own lifespan: the gateway's API and the
registry's artifact server start and stop with their service, on its event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp

from shared.errors import ConfigurationError

__all__ = ["InProcessServer"]


class _Server(uvicorn.Server):
    # The process's lifespan owns SIGINT/SIGTERM and stops the server with everything else.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class InProcessServer:
    """``app`` on ``host``:``port`` (0: any free port, read back from ``port`` once started)."""

    def __init__(self, app: ASGIApp, *, host: str, port: int, name: str, setting: str) -> None:
        self.host = host
        self.port = port
        self._name = name
        self._setting = setting  # what to change when the address is taken
        self._server = _Server(
            uvicorn.Config(
                app, host=host, port=port, log_level="warning", lifespan="off", access_log=False
            )
        )
        self._serving: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._serving = asyncio.create_task(self._serve(), name=self._name)
        while not self._server.started:
            if self._serving.done():  # the address is taken, say: uvicorn has logged why
                await self._serving
                raise ConfigurationError(
                    f"the {self._name} could not listen on {self.host}:{self.port} "
                    f"({self._setting})"
                )
            await asyncio.sleep(0.01)
        if self.port == 0:
            self.port = self._server.servers[0].sockets[0].getsockname()[1]

    async def _serve(self) -> None:
        try:
            await self._server.serve()
        except SystemExit:
            # uvicorn exits when it cannot listen. Out of a task, SystemExit stops the event
            # loop at once, with every other service of the process and a traceback; here it
            # ends this task, and start() names the setting to change.
            return

    async def stop(self) -> None:
        if self._serving is not None:
            self._server.should_exit = True
            await self._serving
            self._serving = None
