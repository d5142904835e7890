"""The registry's contracts: its events, and its request/reply calls.

Events (stream ``artifact-<kind>-<name>``, on the events exchange, recorded like any other):

    artifact.registered   a manifest version became available; immutable from then on
    artifact.deprecated   a version should no longer be chosen by constraints

Request/reply (routing key ``rpc.registry.<call>`` on the jobs exchange):

    resolve     kind + name + version constraint -> the highest matching manifest
    register    a manifest, as submitted -> registered, already registered, or refused
    deprecate   name + version + reason -> done or refused
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from shared.manifests import Manifest
from shared.messages.envelope import Payload

__all__ = [
    "ArtifactDeprecated",
    "ArtifactRegistered",
    "DeprecateArtifact",
    "DeprecationResult",
    "RegisterArtifact",
    "RegistrationResult",
    "ResolveArtifact",
    "ResolvedArtifact",
    "artifact_stream",
]


def artifact_stream(kind: str, name: str) -> str:
    return f"artifact-{kind}-{name}"


class ArtifactRegistered(Payload):
    TYPE = "artifact.registered"

    kind: str
    name: str
    version: str
    digest: str = Field(description="sha256 of the manifest's canonical JSON")
    manifest: Manifest


class ArtifactDeprecated(Payload):
    TYPE = "artifact.deprecated"

    kind: str
    name: str
    version: str
    reason: str


class ResolveArtifact(Payload):
    TYPE = "registry.resolve"

    kind: str = Field(description="model, dataset or framework")
    name: str = Field(min_length=1)
    version: str = "*"


class ResolvedArtifact(Payload):
    """The reply: the highest version matching the constraint, or the reason there is none."""

    TYPE = "registry.resolved"

    manifest: Manifest | None = None
    error: str | None = None


class RegisterArtifact(Payload):
    # The manifest as submitted, unvalidated: the registry validates it and answers with
    # what is wrong, instead of the message being refused before anyone can answer.
    TYPE = "registry.register"

    manifest: dict[str, Any]


class RegistrationResult(Payload):
    TYPE = "registry.registration"

    manifest: Manifest | None = None
    created: bool = False
    error: str | None = None
    # True when the version exists with other content (versions are immutable).
    conflict: bool = False


class DeprecateArtifact(Payload):
    TYPE = "registry.deprecate"

    kind: str = "model"
    name: str
    version: str
    reason: str = Field(min_length=1)


class DeprecationResult(Payload):
    TYPE = "registry.deprecation"

    error: str | None = None
