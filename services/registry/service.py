"""The registry service: model manifests and their versions, event-sourced.

State is the log's: on start it reads the ``artifacts`` projection, then follows every
``artifact.*`` event (its own included), so several registries agree and a restart loses
nothing. The built-in zoo (``manifests/``) is registered through the same events, once.
Registering publishes ``artifact.registered``; a version is immutable from then on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from typing import Any

from pydantic import ValidationError

from services.registry.catalog import Catalog, VersionConflict, digest_of
from shared.artifacts import verify
from shared.errors import ArtifactError, DlscopeError, ModelNotFound
from shared.eventstore import EventStore
from shared.manifests import ModelManifest, load_manifests
from shared.messages import (
    ArtifactDeprecated,
    ArtifactRegistered,
    DeprecateArtifact,
    DeprecationResult,
    Envelope,
    ListModels,
    ModelList,
    RegisterArtifact,
    RegistrationResult,
    ResolvedModel,
    ResolveModel,
    artifact_stream,
    rpc_key,
)
from shared.messaging import Binding
from shared.runtime import Runtime

__all__ = ["RegistryService"]

log = logging.getLogger(__name__)

CALLS = ("resolve", "list", "register", "deprecate")


class RegistryService:
    name = "registry"

    def __init__(self, runtime: Runtime) -> None:
        self._settings = runtime.settings
        self._bus = runtime.bus(self.name)
        self.catalog = Catalog()
        self._store: EventStore | None = None
        # One registration or deprecation at a time: check, then publish, then learn.
        self._writing = asyncio.Lock()

    async def start(self) -> None:
        self._store = EventStore.from_url(self._settings.resolved_database_url)
        await self._bus.start()
        topology = self._bus.topology
        # Follow the log from now on, then read what it holds already: nothing falls between.
        await self._bus.subscribe(
            topology.queue(self.name, "artifacts", f"{socket.gethostname()}-{os.getpid()}"),
            [Binding(topology.events, "artifact.*")],
            self._follow,
            durable=False,
        )
        for view in await self._store.list_artifacts(kind="model", include_deprecated=True):
            self.catalog.learn(ModelManifest.model_validate(view.manifest), digest=view.digest)
            if view.deprecated:
                self.catalog.learn_deprecation(
                    view.name, view.version, view.deprecation_reason or ""
                )
        await self._register_built_ins()
        await self._bus.subscribe(
            topology.queue(self.name),
            [Binding(topology.jobs, rpc_key(self.name, call)) for call in CALLS],
            self._answer,
        )

    async def stop(self) -> None:
        await self._bus.stop()
        if self._store is not None:
            await self._store.close()

    async def _register_built_ins(self) -> None:
        for manifest in load_manifests(self._settings.manifests_dir / "models"):
            if not isinstance(manifest, ModelManifest):
                continue
            try:
                await self._register(manifest)
            except VersionConflict as exc:
                log.error("built-in manifest not registered: %s", exc)

    async def _follow(self, envelope: Envelope) -> None:
        event = envelope.typed()
        if isinstance(event, ArtifactRegistered) and event.kind == "model":
            self.catalog.learn(event.manifest, digest=event.digest)
        elif isinstance(event, ArtifactDeprecated) and event.kind == "model":
            self.catalog.learn_deprecation(event.name, event.version, event.reason)

    async def _answer(self, request: Envelope) -> Envelope:
        call = request.typed()
        if isinstance(call, ResolveModel):
            try:
                reply: Any = ResolvedModel(manifest=self.catalog.resolve(call.name, call.version))
            except ModelNotFound as exc:
                reply = ResolvedModel(error=str(exc))
        elif isinstance(call, ListModels):
            reply = ModelList(models=self.catalog.all())
        elif isinstance(call, RegisterArtifact):
            reply = await self._answer_registration(call.manifest)
        elif isinstance(call, DeprecateArtifact):
            reply = await self._answer_deprecation(call)
        else:
            raise DlscopeError(f"the registry does not answer {request.type!r}")
        return request.caused(reply, producer=self.name)

    async def _answer_registration(self, submitted: dict[str, Any]) -> RegistrationResult:
        try:
            manifest = ModelManifest.model_validate(submitted)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '<manifest>'}: {e['msg']}"
                for e in exc.errors()
            )
            return RegistrationResult(error=f"invalid manifest: {problems}")
        if "://" not in manifest.source.uri and not os.path.isabs(manifest.source.uri):
            return RegistrationResult(
                error="source.uri: a registered manifest must name its model file absolutely "
                "(a path on the workers' hosts, file://, http(s):// or pkg://), not "
                f"{manifest.source.uri!r}"
            )
        try:
            # The file must be there and be the one the manifest pins before anyone can
            # choose it; remote sources are checked by the worker that downloads them.
            await asyncio.to_thread(verify, manifest.source, limits=self._settings.artifact_limits)
        except ArtifactError as exc:
            return RegistrationResult(error=f"source: {exc}")
        try:
            created = await self._register(manifest)
        except VersionConflict as exc:
            return RegistrationResult(error=str(exc), conflict=True)
        return RegistrationResult(manifest=manifest, created=created)

    async def _register(self, manifest: ModelManifest) -> bool:
        async with self._writing:
            if not self.catalog.check_registration(manifest):
                return False
            digest = digest_of(manifest)
            await self._bus.publish(
                Envelope(
                    # The same content registered twice, by two registries, is one event.
                    event_id=uuid.uuid5(uuid.NAMESPACE_URL, f"model:{manifest.ref}#{digest}"),
                    type=ArtifactRegistered.TYPE,
                    stream_id=artifact_stream("model", manifest.name),
                    correlation_id=uuid.uuid4(),
                    producer=self.name,
                    payload=ArtifactRegistered(
                        kind="model",
                        name=manifest.name,
                        version=manifest.version,
                        digest=digest,
                        manifest=manifest,
                    ).model_dump(mode="json"),
                )
            )
            self.catalog.learn(manifest, digest=digest)
            log.info("registered %s", manifest.ref)
            return True

    async def _answer_deprecation(self, call: DeprecateArtifact) -> DeprecationResult:
        async with self._writing:
            try:
                entry = self.catalog.entry(call.name, call.version)
            except ModelNotFound as exc:
                return DeprecationResult(error=str(exc))
            if not entry.deprecated:
                await self._bus.publish(
                    Envelope.wrap(
                        ArtifactDeprecated(
                            kind="model", name=call.name, version=call.version, reason=call.reason
                        ),
                        stream_id=artifact_stream("model", call.name),
                        correlation_id=uuid.uuid4(),
                        producer=self.name,
                    )
                )
                self.catalog.learn_deprecation(call.name, call.version, call.reason)
            return DeprecationResult()
