"""The registry's catalogue: manifest versions by kind and name, immutable once registered.

Plain data and logic: the service feeds it what the log says (``learn``) and asks it what a
new registration or a deprecation would mean before publishing the event that makes it so.
It also knows every file its manifests pin, by sha256: the artifact server serves those.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, replace

import orjson
from packaging.version import Version

from shared.errors import ModelNotFound
from shared.manifests import (
    DatasetManifest,
    Manifest,
    ModelManifest,
    ModelSource,
    matches,
    parse_constraint,
)

__all__ = [
    "Catalog",
    "RegisteredVersion",
    "UnknownArtifact",
    "VersionConflict",
    "digest_of",
    "files_of",
]


def digest_of(manifest: Manifest) -> str:
    """sha256 of the manifest's canonical JSON: equal content, equal digest. Fields left at
    their defaults are out of it, so adding an optional field to the schema later does not
    change the digest of every manifest registered before."""
    canonical = orjson.dumps(
        manifest.model_dump(mode="json", exclude_defaults=True), option=orjson.OPT_SORT_KEYS
    )
    return hashlib.sha256(canonical).hexdigest()


class UnknownArtifact(ModelNotFound):
    """No artifact of that kind and name is registered (as opposed to no matching version)."""


class VersionConflict(ModelNotFound):
    """The version is registered already, with other content."""


@dataclass(frozen=True)
class RegisteredVersion:
    """One version of a manifest as the catalogue holds it: its content, the digest it was
    registered with, and whether (and why) it has been deprecated since."""

    manifest: Manifest
    digest: str
    deprecated: bool = False
    deprecation_reason: str | None = None


def _ref(manifest: Manifest) -> str:
    return f"{manifest.name}@{manifest.version}"


def files_of(manifest: Manifest) -> list[tuple[str, ModelSource]]:
    """The files a manifest pins, with the field that names each."""
    if isinstance(manifest, ModelManifest):
        return [
            ("source" if role == "graph" else role, source)
            for role, source in manifest.sources.items()
        ]
    if isinstance(manifest, DatasetManifest) and manifest.source.file is not None:
        return [("source", manifest.source.file)]
    return []


class Catalog:
    def __init__(self) -> None:
        self._versions: dict[tuple[str, str], dict[str, RegisteredVersion]] = {}
        # Every file pinned by a registered version, deprecated ones included (a job may pin
        # one exactly), by its sha256.
        self._files: dict[str, ModelSource] = {}

    def learn(self, manifest: Manifest, *, digest: str | None = None) -> None:
        """Take in a registration from the log; the first one of a version stands."""
        versions = self._versions.setdefault((manifest.kind, manifest.name), {})
        if manifest.version in versions:
            return
        versions[manifest.version] = RegisteredVersion(manifest, digest or digest_of(manifest))
        for _, source in files_of(manifest):
            self._files.setdefault(source.sha256, source)

    def file(self, sha256: str) -> ModelSource | None:
        """A source of a registered manifest whose bytes hash to ``sha256``, if any."""
        return self._files.get(sha256)

    def learn_deprecation(self, kind: str, name: str, version: str, reason: str) -> None:
        registered = self._versions.get((kind, name), {}).get(version)
        if registered is not None and not registered.deprecated:
            self._versions[kind, name][version] = replace(
                registered, deprecated=True, deprecation_reason=reason
            )

    def check_registration(self, manifest: Manifest) -> bool:
        """True if registering ``manifest`` adds a version, False if that exact content is
        registered already; ``VersionConflict`` if the version exists with other content."""
        existing = self._versions.get((manifest.kind, manifest.name), {}).get(manifest.version)
        if existing is None:
            return True
        if existing.digest == digest_of(manifest):
            return False
        raise VersionConflict(
            f"{manifest.kind} {_ref(manifest)} is already registered with different content; "
            "versions are immutable: register the change as a new version"
        )

    def registered(self, kind: str, name: str, version: str) -> RegisteredVersion:
        try:
            return self._versions[kind, name][version]
        except KeyError:
            raise ModelNotFound(f"{kind} {name}@{version} is not registered") from None

    def all(self, kind: str, *, include_deprecated: bool = False) -> list[Manifest]:
        return [
            e.manifest
            for (k, name) in sorted(self._versions)
            if k == kind
            for e in self._sorted(kind, name)
            if include_deprecated or not e.deprecated
        ]

    def resolve(self, kind: str, name: str, constraint: str = "*") -> Manifest:
        """The highest version of ``name`` satisfying ``constraint``. Deprecated versions are
        chosen only when pinned exactly (``==1.2.0``, or ``===1.2.0`` as services pin one)."""
        if (kind, name) not in self._versions:
            names = sorted(n for k, n in self._versions if k == kind)
            near = difflib.get_close_matches(name, names, n=3)
            guess = f"did you mean: {', '.join(near)}? " if near else ""
            known = ", ".join(names) or "none"
            raise UnknownArtifact(f"unknown {kind} {name!r}; {guess}registered {kind}s: {known}")
        try:
            parse_constraint(constraint)
        except ValueError as exc:
            raise ModelNotFound(str(exc)) from exc
        versions = self._sorted(kind, name)
        pinned = constraint.strip().removeprefix("===").removeprefix("==").strip()
        for registered in reversed(versions):
            if not matches(registered.manifest.version, constraint):
                continue
            if registered.deprecated and registered.manifest.version != pinned:
                continue
            return registered.manifest
        available = ", ".join(
            v.manifest.version + (" (deprecated)" if v.deprecated else "") for v in versions
        )
        raise ModelNotFound(
            f"no version of {kind} {name!r} satisfies {constraint!r}; available: {available}"
        )

    def _sorted(self, kind: str, name: str) -> list[RegisteredVersion]:
        return sorted(
            self._versions[kind, name].values(), key=lambda e: Version(e.manifest.version)
        )
