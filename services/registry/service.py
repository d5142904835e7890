"""The registry service: answers model look-ups over request/reply."""

from __future__ import annotations

from services.registry.catalog import Catalog
from shared.errors import ModelNotFound
from shared.manifests import load_manifests
from shared.messages import Envelope, ListModels, ModelList, ResolvedModel, ResolveModel, rpc_key
from shared.messaging import Binding
from shared.runtime import Runtime

__all__ = ["RegistryService"]


class RegistryService:
    name = "registry"

    def __init__(self, runtime: Runtime) -> None:
        self._settings = runtime.settings
        self._bus = runtime.bus(self.name)
        self._catalog = Catalog([])

    async def start(self) -> None:
        self._catalog = Catalog(load_manifests(self._settings.manifests_dir / "models"))
        await self._bus.start()
        jobs = self._bus.topology.jobs
        await self._bus.subscribe(
            self._bus.topology.queue(self.name),
            [
                Binding(jobs, rpc_key(self.name, "resolve")),
                Binding(jobs, rpc_key(self.name, "list")),
            ],
            self._answer,
        )

    async def stop(self) -> None:
        await self._bus.stop()

    async def _answer(self, request: Envelope) -> Envelope:
        if request.type == ListModels.TYPE:
            return request.caused(ModelList(models=self._catalog.all()), producer=self.name)
        query = request.open(ResolveModel)
        try:
            reply = ResolvedModel(manifest=self._catalog.resolve(query.name, query.version))
        except ModelNotFound as exc:
            reply = ResolvedModel(error=str(exc))
        return request.caused(reply, producer=self.name)
