"""The registry's contracts: its events, and its request/reply calls.

Events (stream ``artifact-<kind>-<name>``, on the events exchange, recorded like any other):

    artifact.registered   a manifest version became available; immutable from then on
    artifact.deprecated   a version should no longer be chosen by constraints

Request/reply (routing key ``rpc.registry.<call>`` on the jobs exchange):

    resolve     model name + version constraint -> the highest matching model manifest
    resolve-artifact   the same for any kind (model, dataset, framework)
    list        every registered, non-deprecated model manifest
    register    a manifest, as submitted -> registered, already registered, or refused
    deprecate   name + version + reason -> done or refused
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from shared.manifests import Manifest, ModelManifest
from shared.messages.envelope import Payload

__all__ = [
    "ArtifactDeprecated",
    "ArtifactRegistered",
    "DeprecateArtifact",
    "DeprecationResult",
    "ListModels",
    "ModelList",
    "RegisterArtifact",
    "RegistrationResult",
    "ResolveArtifact",
    "ResolveModel",
    "ResolvedArtifact",
    "ResolvedModel",
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


class ResolveModel(Payload):
    TYPE = "registry.resolve"

    name: str = Field(min_length=1)
    version: str = "*"


class ResolvedModel(Payload):
    """The reply: the highest version matching the constraint, or the reason there is none."""

    TYPE = "registry.resolved"

    manifest: ModelManifest | None = None
    error: str | None = None


class ResolveArtifact(Payload):
    TYPE = "registry.resolve-artifact"

    kind: str = Field(description="model, dataset or framework")
    name: str = Field(min_length=1)
    version: str = "*"


class ResolvedArtifact(Payload):
    TYPE = "registry.resolved-artifact"

    manifest: Manifest | None = None
    error: str | None = None


class ListModels(Payload):
    TYPE = "registry.list"


class ModelList(Payload):
    TYPE = "registry.models"

    models: list[ModelManifest]


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
