"""The registry's catalogue: model manifests by name and version, and constraint resolution."""

from __future__ import annotations

from collections.abc import Iterable

from packaging.version import Version

from shared.errors import ModelNotFound
from shared.manifests import ModelManifest, matches, parse_constraint

__all__ = ["Catalog"]


class Catalog:
    def __init__(self, manifests: Iterable[ModelManifest]) -> None:
        self._by_name: dict[str, list[ModelManifest]] = {}
        for manifest in manifests:
            self._by_name.setdefault(manifest.name, []).append(manifest)
        for versions in self._by_name.values():
            versions.sort(key=lambda m: Version(m.version))

    def all(self) -> list[ModelManifest]:
        return [m for name in sorted(self._by_name) for m in self._by_name[name]]

    def resolve(self, name: str, constraint: str = "*") -> ModelManifest:
        """The highest version of ``name`` that satisfies ``constraint``."""
        versions = self._by_name.get(name)
        if not versions:
            known = ", ".join(sorted(self._by_name)) or "none"
            raise ModelNotFound(f"unknown model {name!r}; registered models: {known}")
        try:
            parse_constraint(constraint)
        except ValueError as exc:
            raise ModelNotFound(str(exc)) from exc
        for manifest in reversed(versions):
            if matches(manifest.version, constraint):
                return manifest
        available = ", ".join(m.version for m in versions)
        raise ModelNotFound(
            f"no version of model {name!r} satisfies {constraint!r}; available: {available}"
        )
