"""The content-addressed cache a worker loads models from."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path, PurePosixPath

from shared.artifacts.archives import (
    ArchiveFormat,
    ArchiveSpec,
    archive_format,
    archive_of,
    extract_archive,
    member_path,
    no_member,
)
from shared.artifacts.digests import CHUNK, mismatch, sha256_of
from shared.artifacts.downloads import download
from shared.artifacts.limits import ArtifactLimits
from shared.artifacts.sources import file_name, is_remote, locate, not_found
from shared.errors import ArtifactError
from shared.manifests import ModelSource

__all__ = ["ArtifactCache"]

_EXTRACTED = "extracted"
_FILES = "files"
_INDEX = "sha256.json"


class ArtifactCache:
    """Verified copies of model artifacts under ``<root>``, one directory per sha256.

    Nothing appears under its final name until it is complete and verified: files and
    extracted trees are built in ``<root>/staging`` and renamed into place, so a reader
    (another worker on the host included) sees all of an entry or none of it.
    """

    def __init__(
        self,
        root: Path,
        limits: ArtifactLimits | None = None,
        *,
        tokens: Mapping[str, str] | None = None,
    ) -> None:
        self._root = root / "sha256"
        self._staging = root / "staging"
        self.limits = limits or ArtifactLimits()
        # Bearer tokens by URL prefix: DLSCOPE_API_TOKEN for the deployment's own artifact
        # server, sent to nothing else.
        self._tokens = dict(tokens or {})

    def fetch(self, source: ModelSource, archive: ArchiveSpec | None = None) -> Path:
        """A verified local copy of ``source``; ``ArtifactError`` says why there is none.

        With ``archive`` (by default the one the source itself describes), ``source.sha256``
        is the archive's: it is verified, extracted once
        and re-used, and the answer is its ``archive.member`` (the extraction directory when
        no member is named).
        """
        archive = archive or archive_of(source)
        if archive is None:
            return self._file(source)
        return self._member(source, archive)

    def keep(self, name: str, sha256: str, data: bytes) -> tuple[Path, bool]:
        """``data``, which must hash to ``sha256``, kept as ``name`` (its last path component)
        under its digest: how a registry stores the files uploaded with a registration. The
        path, and whether this call put it there (False: it was kept already)."""
        base = PurePosixPath(name.replace("\\", "/")).name
        safe = base if base not in ("", ".", "..") else "artifact"
        cached = self._root / sha256 / safe
        if cached.is_file() and sha256_of(cached) == sha256:
            return cached, False
        self._store(iter((data,)), cached, ModelSource(uri=safe, sha256=sha256))
        return cached, True

    def _file(self, source: ModelSource) -> Path:
        cached = self._root / source.sha256 / file_name(source.uri)
        if cached.is_file():
            if sha256_of(cached) == source.sha256:
                return cached
            cached.unlink(missing_ok=True)  # corrupted in the cache: fetch it again
        if is_remote(source.uri):
            with download(source.uri, self.limits, self._headers(source.uri)) as chunks:
                self._store(chunks, cached, source)
            return cached
        origin = locate(source.uri)
        if not origin.is_file():
            raise not_found(source.uri, origin)
        try:
            with origin.open("rb") as handle:
                self._store(iter(partial(handle.read, CHUNK), b""), cached, source)
        except OSError as exc:
            raise ArtifactError(f"{source.uri}: cannot read {origin}: {exc}") from exc
        return cached

    def _headers(self, uri: str) -> dict[str, str]:
        for prefix, token in self._tokens.items():
            if uri.startswith(prefix.rstrip("/") + "/"):
                return {"Authorization": f"Bearer {token}"}
        return {}

    def _store(self, chunks: Iterable[bytes], cached: Path, source: ModelSource) -> None:
        # Hashing the bytes as they are written checks exactly what lands in the cache, even
        # if the origin changes while it is read, and reads it once rather than twice.
        try:
            self._staging.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=self._staging, prefix="file-")
        except OSError as exc:
            raise ArtifactError(f"{source.uri}: cannot write to the cache: {exc}") from exc
        staged = Path(name)
        try:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != source.sha256:
                raise mismatch(source.uri, source.sha256)
            cached.parent.mkdir(parents=True, exist_ok=True)
            staged.replace(cached)
        except OSError as exc:
            staged.unlink(missing_ok=True)
            raise ArtifactError(f"{source.uri}: cannot write to the cache: {exc}") from exc
        except BaseException:
            staged.unlink(missing_ok=True)
            raise

    def _member(self, source: ModelSource, archive: ArchiveSpec) -> Path:
        fmt = archive_format(archive, file_name(source.uri), source.uri)
        member = member_path(archive, source.uri)
        extracted = self._root / source.sha256 / _EXTRACTED
        if extracted.is_dir():
            found = _verified(extracted, member, source.uri)
            if found is not None:
                return found
            self._discard(extracted)  # changed since it was extracted: extract it again
        self._extract(self._file(source), fmt, extracted, source.uri)
        found = _verified(extracted, member, source.uri)
        if found is None:
            raise ArtifactError(f"{source.uri}: the extracted files changed while being checked")
        return found

    def _extract(self, packed: Path, fmt: ArchiveFormat, extracted: Path, uri: str) -> None:
        self._staging.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(dir=self._staging, prefix="extract-"))
        try:
            digests = extract_archive(packed, fmt, staged / _FILES, self.limits, uri)
            (staged / _INDEX).write_text(json.dumps(digests, indent=1, sort_keys=True))
            try:
                staged.rename(extracted)
            except OSError:
                if not extracted.is_dir():
                    raise
                # Another worker on this host extracted it first; theirs is as good as ours.
        except ArtifactError:
            # A refused archive is of no use to anyone: leave no trace of it in the cache.
            packed.unlink(missing_ok=True)
            _remove_if_empty(packed.parent)
            raise
        except OSError as exc:
            raise ArtifactError(f"{uri}: cannot write the extracted archive: {exc}") from exc
        finally:
            shutil.rmtree(staged, ignore_errors=True)

    def _discard(self, tree: Path) -> None:
        # Renamed away before it is deleted, so no reader finds a half-deleted tree.
        self._staging.mkdir(parents=True, exist_ok=True)
        doomed = Path(tempfile.mkdtemp(dir=self._staging, prefix="stale-"))
        try:
            tree.rename(doomed / "tree")
        except FileNotFoundError:
            pass  # another worker discarded it already
        finally:
            shutil.rmtree(doomed, ignore_errors=True)


def _verified(extracted: Path, member: PurePosixPath | None, uri: str) -> Path | None:
    """The wanted path of an extraction if every file under it still has its digest."""
    try:
        index = json.loads((extracted / _INDEX).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(index, dict):
        return None
    files = extracted / _FILES
    target = files.joinpath(*member.parts) if member is not None else files
    prefix = member.as_posix() if member is not None else ""
    wanted = {
        str(rel): str(digest)
        for rel, digest in index.items()
        if not prefix or rel == prefix or str(rel).startswith(prefix + "/")
    }
    if member is not None and not wanted and not target.is_dir():
        raise no_member(uri, member)
    for rel, digest in wanted.items():
        path = files / rel
        if not path.is_file() or sha256_of(path) != digest:
            return None
    if target.is_dir():
        present = {p.relative_to(files).as_posix() for p in target.rglob("*") if not p.is_dir()}
        if present != set(wanted):
            return None
    return target


def _remove_if_empty(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not empty: the same bytes cached under another name
        directory.rmdir()
