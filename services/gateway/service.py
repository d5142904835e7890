"""The gateway service: the HTTP API served by uvicorn inside dlscope's own lifespan."""

from __future__ import annotations

import uuid

from services.gateway.app import GatewayContext, create_app
from services.gateway.progress import ProgressFeed
from shared.artifacts.resolutions import Resolutions
from shared.eventstore import EventStore
from shared.exposure import check_exposure
from shared.messages import ArtifactDeprecated, ArtifactRegistered, Envelope
from shared.messaging import Routes
from shared.runtime import Runtime
from shared.serving import InProcessServer

__all__ = ["GatewayService"]


class GatewayService:
    name = "gateway"

    def __init__(self, runtime: Runtime, *, host: str = "127.0.0.1", port: int = 8080) -> None:
        self._runtime = runtime
        self._bus = runtime.bus(self.name)
        self.host = host
        self.port = port
        self._store: EventStore | None = None
        self._server: InProcessServer | None = None

    async def start(self) -> None:
        settings = self._runtime.settings
        check_exposure(
            self.host, settings, "gateway", token=settings.api_token, setting="DLSCOPE_API_TOKEN"
        )
        self._store = EventStore.from_url(self._runtime.settings.resolved_database_url)
        await self._bus.start()
        progress = ProgressFeed()
        await progress.listen(self._bus)
        context = GatewayContext(
            settings=self._runtime.settings,
            bus=self._bus,
            store=self._store,
            tracer=self._runtime.telemetry.tracer,
            progress=progress,
        )
        await self._follow_registry(context.resolutions)
        app = create_app(context)
        self._server = InProcessServer(
            app, host=self.host, port=self.port, name="gateway", setting="--host and --port"
        )
        await self._server.start()
        self.port = self._server.port

    async def _follow_registry(self, resolutions: Resolutions) -> None:
        """Forget what a constraint resolved to when an artifact of its name is registered or
        deprecated by anyone (another gateway, a client of the broker), on a queue of this
        gateway's own."""

        async def changed(event: ArtifactRegistered | ArtifactDeprecated, _: Envelope) -> None:
            resolutions.forget(event.kind, event.name)

        topology = self._bus.topology
        await self._bus.handle(
            topology.queue(self.name, "artifacts", uuid.uuid4().hex),
            Routes(topology.events).on(ArtifactRegistered, changed).on(ArtifactDeprecated, changed),
            durable=False,
        )

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()
        await self._bus.stop()
        if self._store is not None:
            await self._store.close()
