"""The registry service: model, dataset and framework manifests and their versions,
event-sourced.

State is the log's: on start it reads the ``artifacts`` projection, then follows every
``artifact.*`` event (its own included), so several registries agree and a restart loses
nothing. The built-in zoo (``manifests/``) is registered through the same events, once.
Registering publishes ``artifact.registered``; a version is immutable from then on.
With ``DLSCOPE_ARTIFACT_URL`` set it also serves the files its manifests pin, to workers on
other hosts (``artifacts``).

A registration names only files it may (``sources``, ``shared.artifacts.policy``): files
uploaded with it, which the registry keeps by sha256 in its store (``DLSCOPE_ARTIFACT_STORE``),
``pkg://`` resources, URLs, and paths under the operator's ``DLSCOPE_REGISTRY_SOURCE_ROOTS``;
any path only for a local user of an embedded registry.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from dataclasses import replace

from pydantic import TypeAdapter

from services.registry.artifacts import ArtifactServer, listen_address
from services.registry.catalog import (
    Catalog,
    UnknownArtifact,
    VersionConflict,
    digest_of,
    files_of,
)
from services.registry.sources import admit
from shared.artifacts import ArtifactCache, SourcePolicy, is_remote, verify
from shared.errors import ArtifactError, ManifestError, ModelNotFound
from shared.eventstore import EventStore
from shared.manifests import Manifest, load_manifests, parse_manifest
from shared.messages import (
    ArtifactDeprecated,
    ArtifactRegistered,
    DeprecateArtifact,
    DeprecationResult,
    Envelope,
    RegisterArtifact,
    RegistrationResult,
    ResolveArtifact,
    ResolvedArtifact,
    artifact_stream,
    rpc_key,
)
from shared.messaging import Routes
from shared.runtime import Runtime

__all__ = ["RegistryService"]

log = logging.getLogger(__name__)

_MANIFEST: TypeAdapter[Manifest] = TypeAdapter(Manifest)


class RegistryService:
    name = "registry"

    def __init__(self, runtime: Runtime) -> None:
        self._settings = runtime.settings
        self._bus = runtime.bus(self.name)
        self.catalog = Catalog()
        self._store: EventStore | None = None
        # One registration or deprecation at a time: check, then publish, then learn.
        self._writing = asyncio.Lock()
        self.artifacts: ArtifactServer | None = None
        settings = runtime.settings
        self.store = ArtifactCache(settings.resolved_artifact_store, settings.artifact_limits)
        self.policy = SourcePolicy(
            roots=(*settings.registry_source_roots, settings.resolved_artifact_store),
            hosts=settings.registry_source_hosts,
        )
        # Only a registry on an in-process broker hears from its local user alone: on a
        # shared broker, a message that says "local" could come from anyone.
        self._local_user_here = settings.broker_url.startswith("memory://")

    async def start(self) -> None:
        self._store = EventStore.from_url(self._settings.resolved_database_url)
        await self._bus.start()
        topology = self._bus.topology
        # Follow the log from now on, then read what it holds already: nothing falls between.
        await self._bus.handle(
            topology.queue(self.name, "artifacts", f"{socket.gethostname()}-{os.getpid()}"),
            Routes(topology.events)
            .on(ArtifactRegistered, self._learn_registration)
            .on(ArtifactDeprecated, self._learn_deprecation),
            durable=False,
        )
        for view in await self._store.list_artifacts(include_deprecated=True):
            self.catalog.learn(_MANIFEST.validate_python(view.manifest), digest=view.digest)
            if view.deprecated:
                self.catalog.learn_deprecation(
                    view.kind, view.name, view.version, view.deprecation_reason or ""
                )
        await self._register_built_ins()
        if self._settings.artifact_url:
            host, port = listen_address(self._settings)
            self.artifacts = ArtifactServer(
                self.catalog.file,
                servable=self.policy.servable,
                settings=self._settings,
                host=host,
                port=port,
            )
            await self.artifacts.start()
        await self._bus.handle(
            topology.queue(self.name),
            Routes(topology.jobs)
            .on(ResolveArtifact, self._answer_resolve, key=rpc_key(self.name, "resolve"))
            .on(RegisterArtifact, self._answer_registration, key=rpc_key(self.name, "register"))
            .on(DeprecateArtifact, self._answer_deprecation, key=rpc_key(self.name, "deprecate")),
            # A registration carries its uploaded files.
            max_message_bytes=self._settings.upload_message_bytes,
        )

    async def stop(self) -> None:
        if self.artifacts is not None:
            await self.artifacts.stop()
        await self._bus.stop()
        if self._store is not None:
            await self._store.close()

    async def _register_built_ins(self) -> None:
        for manifest in load_manifests(self._settings.manifests_dir):
            try:
                await self._register(manifest)
            except VersionConflict as exc:
                log.error("built-in manifest not registered: %s", exc)

    async def _learn_registration(self, event: ArtifactRegistered, envelope: Envelope) -> None:
        self.catalog.learn(event.manifest, digest=event.digest)

    async def _learn_deprecation(self, event: ArtifactDeprecated, envelope: Envelope) -> None:
        self.catalog.learn_deprecation(event.kind, event.name, event.version, event.reason)

    async def _answer_resolve(self, call: ResolveArtifact, request: Envelope) -> Envelope:
        try:
            found = self.catalog.resolve(call.kind, call.name, call.version)
            reply = ResolvedArtifact(manifest=found)
        except ModelNotFound as exc:
            problem = "unknown" if isinstance(exc, UnknownArtifact) else "version"
            reply = ResolvedArtifact(error=str(exc), problem=problem)
        return request.caused(reply, producer=self.name)

    async def _answer_registration(self, call: RegisterArtifact, request: Envelope) -> Envelope:
        return request.caused(await self._registration(call), producer=self.name)

    async def _registration(self, call: RegisterArtifact) -> RegistrationResult:
        try:
            submitted = parse_manifest(call.manifest, origin="manifest")
        except ManifestError as exc:
            return RegistrationResult(error=f"invalid {exc}")
        policy = replace(self.policy, local_paths=call.local and self._local_user_here)
        # One registration at a time, from its first upload kept to its event published: a
        # refused one discards only what it kept, never a file another one just came to pin.
        async with self._writing:
            return await self._admit_and_register(submitted, call, policy)

    async def _admit_and_register(
        self, submitted: Manifest, call: RegisterArtifact, policy: SourcePolicy
    ) -> RegistrationResult:
        try:
            # Checked before anything is read: a source it may not name is never opened.
            admission = await asyncio.to_thread(
                admit, submitted, call.files, policy=policy, store=self.store
            )
        except ArtifactError as exc:
            return RegistrationResult(error=str(exc))
        manifest = admission.manifest
        try:
            for where, source in files_of(manifest):
                # The files must be there and be the ones the manifest pins before anyone can
                # choose it; remote sources are checked by the worker that downloads them.
                if is_remote(source.uri):
                    continue
                try:
                    await asyncio.to_thread(verify, source, limits=self._settings.artifact_limits)
                except ArtifactError as exc:
                    admission.discard()
                    return RegistrationResult(error=f"{where}: {exc}")
            created = await self._registered(manifest)
        except VersionConflict as exc:
            admission.discard()
            return RegistrationResult(error=str(exc), conflict=True)
        except BaseException:
            admission.discard()
            raise
        return RegistrationResult(manifest=manifest, created=created)

    async def _register(self, manifest: Manifest) -> bool:
        async with self._writing:
            return await self._registered(manifest)

    async def _registered(self, manifest: Manifest) -> bool:
        """Publish ``manifest``'s registration (under ``_writing``); False when this content
        was registered already."""
        if not self.catalog.check_registration(manifest):
            return False
        digest = digest_of(manifest)
        await self._bus.publish(
            Envelope(
                # The same content registered twice, by two registries, is one event.
                event_id=uuid.uuid5(uuid.NAMESPACE_URL, f"{manifest.kind}:{manifest.ref}#{digest}"),
                type=ArtifactRegistered.TYPE,
                stream_id=artifact_stream(manifest.kind, manifest.name),
                correlation_id=uuid.uuid4(),
                producer=self.name,
                payload=ArtifactRegistered(
                    kind=manifest.kind,
                    name=manifest.name,
                    version=manifest.version,
                    digest=digest,
                    manifest=manifest,
                ).model_dump(mode="json"),
            )
        )
        self.catalog.learn(manifest, digest=digest)
        log.info("registered %s %s", manifest.kind, manifest.ref)
        return True

    async def _answer_deprecation(self, call: DeprecateArtifact, request: Envelope) -> Envelope:
        return request.caused(await self._deprecation(call), producer=self.name)

    async def _deprecation(self, call: DeprecateArtifact) -> DeprecationResult:
        async with self._writing:
            try:
                registered = self.catalog.registered(call.kind, call.name, call.version)
            except ModelNotFound as exc:
                return DeprecationResult(error=str(exc))
            if not registered.deprecated:
                await self._bus.publish(
                    Envelope.wrap(
                        ArtifactDeprecated(
                            kind=call.kind, name=call.name, version=call.version, reason=call.reason
                        ),
                        stream_id=artifact_stream(call.kind, call.name),
                        correlation_id=uuid.uuid4(),
                        producer=self.name,
                    )
                )
                self.catalog.learn_deprecation(call.kind, call.name, call.version, call.reason)
            return DeprecationResult()
