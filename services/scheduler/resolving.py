"""The registry, as the scheduler asks it: a manifest by kind, name and version, or why there
is none. An exact version's answer never changes, so it is kept once asked; a constraint's
changes with registrations, which the scheduler does not follow, so it is asked each time."""

from __future__ import annotations

from shared.artifacts.resolutions import Resolutions
from shared.config import Settings
from shared.manifests import Manifest
from shared.messages import Envelope, ResolveArtifact, ResolvedArtifact, rpc_key
from shared.messaging import Bus

__all__ = ["Resolver"]


class Resolver:
    def __init__(self, bus: Bus, settings: Settings, *, producer: str) -> None:
        self._bus = bus
        self._settings = settings
        self._producer = producer
        # Exact versions only (what the gateway pinned): ttl 0 keeps no constraint's answer.
        self._resolutions = Resolutions(ttl_s=0)

    async def resolve(self, cause: Envelope, kind: str, name: str, version: str) -> Manifest | str:
        """The registry's manifest for ``kind`` ``name`` ``version``, or why there is none; an
        exact version's from what this scheduler keeps, once asked."""
        kept = self._resolutions.get(kind, name, version)
        if kept is not None and kept.manifest is not None:
            return kept.manifest
        found = await self._bus.ask(
            rpc_key("registry", "resolve"),
            # A fresh id per call (not one derived from the cause: two calls of one type would
            # share it); the causation still names the request.
            Envelope.wrap(
                ResolveArtifact(kind=kind, name=name, version=version),
                stream_id="registry",
                correlation_id=cause.correlation_id,
                causation_id=cause.event_id,
                producer=self._producer,
            ),
            ResolvedArtifact,
            timeout=self._settings.rpc_timeout_s,
        )
        self._resolutions.put(kind, name, version, found)
        if found.manifest is not None:
            return found.manifest
        return found.error or f"no {kind} {name!r} in the registry"
