"""Request/reply with the registry: resolve a model name and version constraint."""

from __future__ import annotations

from pydantic import Field

from shared.manifests import ModelManifest
from shared.messages.envelope import Payload

__all__ = ["ListModels", "ModelList", "ResolveModel", "ResolvedModel"]


class ResolveModel(Payload):
    TYPE = "registry.resolve"

    name: str = Field(min_length=1)
    version: str = "*"


class ResolvedModel(Payload):
    """The reply: the highest version matching the constraint, or the reason there is none."""

    TYPE = "registry.resolved"

    manifest: ModelManifest | None = None
    error: str | None = None


class ListModels(Payload):
    TYPE = "registry.list"


class ModelList(Payload):
    TYPE = "registry.models"

    models: list[ModelManifest]
