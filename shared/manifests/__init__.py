"""Model manifests: what is evaluated, pinned by version and checksum."""

from shared.manifests.loading import load_manifest, load_manifests
from shared.manifests.model import (
    FrameworkRequirement,
    ModelManifest,
    ModelSource,
    TensorSpec,
)
from shared.manifests.versions import matches, parse_constraint, parse_version

__all__ = [
    "FrameworkRequirement",
    "ModelManifest",
    "ModelSource",
    "TensorSpec",
    "load_manifest",
    "load_manifests",
    "matches",
    "parse_constraint",
    "parse_version",
]
