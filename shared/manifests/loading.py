"""Reading manifests from YAML files, with errors that name the file and the field."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from shared.errors import ManifestError
from shared.manifests.model import ModelManifest

__all__ = ["load_manifest", "load_manifests"]


def load_manifest(path: Path) -> ModelManifest:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ManifestError(f"{path}: cannot read manifest: {exc}") from exc
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: a manifest must be a YAML mapping")
    try:
        manifest = ModelManifest.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ManifestError(f"{path}: {problems}") from exc
    # Relative sources are relative to the manifest, wherever dlscope runs from.
    uri = manifest.source.uri
    if "://" not in uri and not Path(uri).is_absolute():
        absolute = (path.parent / uri).resolve()
        manifest = manifest.model_copy(
            update={"source": manifest.source.model_copy(update={"uri": str(absolute)})}
        )
    return manifest


def load_manifests(directory: Path) -> list[ModelManifest]:
    """Every model manifest under ``directory`` (``*.yaml``/``*.yml``), sorted by reference."""
    paths = sorted([*directory.rglob("*.yaml"), *directory.rglob("*.yml")])
    manifests = [load_manifest(p) for p in paths]
    seen: dict[str, Path] = {}
    for manifest, path in zip(manifests, paths, strict=True):
        if manifest.ref in seen:
            raise ManifestError(f"{path}: {manifest.ref} is also defined in {seen[manifest.ref]}")
        seen[manifest.ref] = path
    return sorted(manifests, key=lambda m: (m.name, m.version))
