"""Checking a source when it is registered, before any worker depends on it."""

from __future__ import annotations

from shared.artifacts.archives import (
    ArchiveSpec,
    archive_format,
    archive_of,
    check_archive,
    member_path,
    no_member,
)
from shared.artifacts.digests import mismatch, sha256_of
from shared.artifacts.limits import ArtifactLimits
from shared.artifacts.sources import is_remote, locate, not_found
from shared.errors import ArtifactError
from shared.manifests import ModelSource

__all__ = ["verify"]


def verify(
    source: ModelSource,
    archive: ArchiveSpec | None = None,
    *,
    limits: ArtifactLimits | None = None,
) -> None:
    """Raise ``ArtifactError`` unless ``source`` is there and is what its manifest pins.

    Nothing is copied or cached. A local source must exist and hash to its sha256; an
    archive must also be safe to extract within ``limits`` and hold the member it names.

    A remote (``http(s)://``) source is not checked: downloading up to gigabytes to register
    a manifest would make registration as slow and flaky as the network, and the bytes would
    be thrown away. Workers verify it when they fetch it, before it is ever loaded. Callers
    that want to say so can ask ``is_remote(source.uri)``.
    """
    if is_remote(source.uri):
        return
    archive = archive or archive_of(source)
    origin = locate(source.uri)
    if not origin.is_file():
        raise not_found(source.uri, origin)
    try:
        actual = sha256_of(origin)
    except OSError as exc:
        raise ArtifactError(f"{source.uri}: cannot read {origin}: {exc}") from exc
    if actual != source.sha256:
        raise mismatch(source.uri, source.sha256)
    if archive is None:
        return
    fmt = archive_format(archive, origin.name, source.uri)
    member = member_path(archive, source.uri)
    contents = check_archive(origin, fmt, limits or ArtifactLimits(), source.uri)
    if member is not None and member not in contents:
        raise no_member(source.uri, member)
