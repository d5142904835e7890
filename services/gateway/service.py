"""The gateway service: the HTTP API served by uvicorn inside dlscope's own lifespan."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import uvicorn

from services.gateway.app import GatewayContext, create_app
from services.gateway.progress import ProgressFeed
from shared.eventstore import EventStore
from shared.exposure import check_exposure
from shared.runtime import Runtime

__all__ = ["GatewayService"]


class _Server(uvicorn.Server):
    # The process's lifespan owns SIGINT/SIGTERM and stops the gateway with everything else.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class GatewayService:
    name = "gateway"

    def __init__(self, runtime: Runtime, *, host: str = "127.0.0.1", port: int = 8080) -> None:
        self._runtime = runtime
        self._bus = runtime.bus(self.name)
        self.host = host
        self.port = port
        self._store: EventStore | None = None
        self._server: _Server | None = None
        self._serving: asyncio.Task[None] | None = None

    async def start(self) -> None:
        settings = self._runtime.settings
        check_exposure(
            self.host, settings, "gateway", token=settings.api_token, setting="DLSCOPE_API_TOKEN"
        )
        self._store = EventStore.from_url(self._runtime.settings.resolved_database_url)
        await self._bus.start()
        progress = ProgressFeed()
        await progress.listen(self._bus)
        app = create_app(
            GatewayContext(
                settings=self._runtime.settings,
                bus=self._bus,
                store=self._store,
                tracer=self._runtime.telemetry.tracer,
                progress=progress,
            )
        )
        config = uvicorn.Config(
            app,
            host=self.host,
            port=self.port,
            log_level="warning",
            lifespan="off",
            access_log=False,
        )
        self._server = _Server(config)
        self._serving = asyncio.create_task(self._server.serve(), name="gateway http")
        while not self._server.started:
            if self._serving.done():  # e.g. the port is taken: surface uvicorn's error
                await self._serving
                raise RuntimeError(f"the gateway could not listen on {self.host}:{self.port}")
            await asyncio.sleep(0.01)
        if self.port == 0:
            sockets = self._server.servers[0].sockets
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None and self._serving is not None:
            self._server.should_exit = True
            await self._serving
        await self._bus.stop()
        if self._store is not None:
            await self._store.close()
