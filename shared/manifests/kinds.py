"""Every kind of manifest, told apart by ``kind`` (``model`` when it is left out)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Tag

from shared.manifests.dataset import DatasetManifest
from shared.manifests.framework import FrameworkManifest
from shared.manifests.model import ModelManifest

__all__ = ["MANIFEST_KINDS", "Manifest", "kind_of"]

MANIFEST_KINDS: dict[str, type[ModelManifest] | type[FrameworkManifest] | type[DatasetManifest]] = {
    "model": ModelManifest,
    "framework": FrameworkManifest,
    "dataset": DatasetManifest,
}


def kind_of(value: Any) -> Any:
    # Model manifests were written before there were other kinds: no `kind` means a model.
    if isinstance(value, dict):
        return value.get("kind", "model")
    return getattr(value, "kind", None)


Manifest = Annotated[
    Annotated[ModelManifest, Tag("model")]
    | Annotated[FrameworkManifest, Tag("framework")]
    | Annotated[DatasetManifest, Tag("dataset")],
    Discriminator(kind_of),
]
