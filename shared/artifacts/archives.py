"""Reading tar and zip archives without trusting them.

An archive names its own paths, so a hostile or careless one can write outside the directory
it is extracted into (``../``, absolute paths, links), create devices, or expand to fill the
disk. Every member is checked before a byte of it is written; links and special files are
refused outright, since a model needs neither. Callers extract into a staging directory they
delete on any error, so a refused archive leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import re
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Literal, Protocol, get_args

from shared.artifacts.digests import CHUNK
from shared.artifacts.limits import ArtifactLimits
from shared.errors import ArtifactError

__all__ = [
    "Archive",
    "ArchiveFormat",
    "ArchiveSpec",
    "archive_format",
    "archive_of",
    "check_archive",
    "extract_archive",
    "member_path",
    "no_member",
]

ArchiveFormat = Literal["tar", "tar.gz", "zip"]
_FORMATS: dict[str, ArchiveFormat] = {name: name for name in get_args(ArchiveFormat)}
# Strict modes: an archive declared "tar.gz" that is not gzip-compressed is a wrong manifest.
_TAR_MODES: dict[str, Literal["r:", "r:gz"]] = {"tar": "r:", "tar.gz": "r:gz"}
_SUFFIXES: tuple[tuple[str, ArchiveFormat], ...] = (
    (".tar.gz", "tar.gz"),
    (".tgz", "tar.gz"),
    (".tar", "tar"),
    (".zip", "zip"),
)
_DRIVE = re.compile(r"^[A-Za-z]:")
_SEPARATORS = re.compile(r"[/\\]")


class ArchiveSpec(Protocol):
    """How to read a source as an archive; the manifest schema's archive description fits it."""

    @property
    def format(self) -> str | None:
        """``tar``, ``tar.gz`` or ``zip``; ``None`` to infer it from the source's file name."""

    @property
    def member(self) -> str | None:
        """The ``/``-separated path of the member wanted; ``None`` for the whole extraction."""


@dataclass(frozen=True)
class Archive:
    """An ``ArchiveSpec`` for callers that do not read it from a manifest."""

    format: ArchiveFormat | None = None
    member: str | None = None


def archive_of(source: object) -> Archive | None:
    """The archive a manifest's source describes (its ``archive`` and ``member``), if any."""
    archive_format = getattr(source, "archive", None)
    if archive_format is None:
        return None
    return Archive(format=archive_format, member=getattr(source, "member", None))


def archive_format(spec: ArchiveSpec, name: str, uri: str) -> ArchiveFormat:
    """The format ``spec`` declares, or the one the file name's suffix implies."""
    if spec.format is not None:
        if spec.format in _FORMATS:
            return _FORMATS[spec.format]
        raise ArtifactError(
            f"{uri}: unknown archive format {spec.format!r} (use one of {', '.join(_FORMATS)})"
        )
    for suffix, implied in _SUFFIXES:
        if name.lower().endswith(suffix):
            return implied
    raise ArtifactError(
        f"{uri}: cannot tell the archive format from the name {name!r}; "
        f"declare it (one of {', '.join(_FORMATS)})"
    )


def member_path(spec: ArchiveSpec, uri: str) -> PurePosixPath | None:
    """The member ``spec`` asks for, checked like any member name; ``None`` for all of them."""
    if spec.member is None:
        return None
    return _relative(spec.member, uri)


def no_member(uri: str, member: PurePosixPath) -> ArtifactError:
    return ArtifactError(f"{uri}: the archive has no member {member.as_posix()!r}")


def check_archive(
    archive: Path, fmt: ArchiveFormat, limits: ArtifactLimits, uri: str
) -> frozenset[PurePosixPath]:
    """Read every member header as extraction would, writing nothing; the paths it holds.

    The answer includes directories implied by the members' paths, so a caller can ask
    whether a member it wants, file or directory, is there.
    """
    paths: set[PurePosixPath] = set()
    with _translated(uri, fmt), _opened(archive, fmt, uri) as entries:
        for path, _ in _checked(entries, limits, uri):
            paths.add(path)
            paths.update(p for p in path.parents if p != PurePosixPath("."))
    return frozenset(paths)


def extract_archive(
    archive: Path, fmt: ArchiveFormat, destination: Path, limits: ArtifactLimits, uri: str
) -> dict[str, str]:
    """Extract into ``destination`` (created); the sha256 of every file, by relative path.

    ``destination`` must be a fresh directory the caller removes if this raises: members
    already written stay there until it does.
    """
    destination.mkdir(parents=True)
    digests: dict[str, str] = {}
    written = 0
    with _translated(uri, fmt), _opened(archive, fmt, uri) as entries:
        for path, entry in _checked(entries, limits, uri):
            # Safe to join: the path is relative without "..", and no link was ever written
            # under ``destination`` that it could pass through.
            target = destination.joinpath(*path.parts)
            if entry.is_dir:
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256()
            # Written with our own permissions, never the archive's: no setuid bits or
            # world-writable files arrive in the cache.
            with entry.open() as src, target.open("wb") as out:
                while chunk := src.read(CHUNK):
                    # Headers can under-declare sizes; what is actually written is what counts.
                    written += len(chunk)
                    if written > limits.max_extracted_bytes:
                        raise _too_large(uri, entry.name, limits)
                    digest.update(chunk)
                    out.write(chunk)
            digests[path.as_posix()] = digest.hexdigest()
    return digests


@dataclass(frozen=True)
class _Entry:
    name: str
    is_dir: bool
    size: int
    open: Callable[[], IO[bytes]]


def _checked(
    entries: Iterator[_Entry], limits: ArtifactLimits, uri: str
) -> Iterator[tuple[PurePosixPath, _Entry]]:
    """Members with safe relative paths, refusing the archive once it exceeds a limit."""
    count = 0
    declared = 0
    for entry in entries:
        count += 1
        if count > limits.max_archive_members:
            raise ArtifactError(
                f"{uri}: archive too large: more than {limits.max_archive_members} members "
                f"(at {entry.name!r}; max_archive_members)"
            )
        path = _relative(entry.name, uri)
        if path is None:  # "./", the extraction directory itself
            continue
        declared += entry.size
        if declared > limits.max_extracted_bytes:
            raise _too_large(uri, entry.name, limits)
        yield path, entry


def _relative(name: str, uri: str) -> PurePosixPath | None:
    if "\x00" in name:
        raise ArtifactError(f"{uri}: archive member {name!r} has a NUL byte in its name")
    # Backslashes count as separators too: harmless on POSIX, an escape route on Windows.
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        raise ArtifactError(
            f"{uri}: archive member {name!r} is an absolute path: path escapes the cache"
        )
    parts = [part for part in _SEPARATORS.split(name) if part not in ("", ".")]
    if ".." in parts:
        raise ArtifactError(
            f"{uri}: archive member {name!r} climbs out with '..': path escapes the cache"
        )
    return PurePosixPath(*parts) if parts else None


def _too_large(uri: str, member: str, limits: ArtifactLimits) -> ArtifactError:
    return ArtifactError(
        f"{uri}: archive too large: its members expand to more than "
        f"{limits.max_extracted_bytes} bytes (at {member!r}; max_extracted_bytes)"
    )


def _link(uri: str, name: str, target: str) -> ArtifactError:
    return ArtifactError(
        f"{uri}: archive member {name!r} is a link to {target!r}: links are refused, "
        "they could lead out of the cache"
    )


def _special(uri: str, name: str) -> ArtifactError:
    return ArtifactError(
        f"{uri}: archive member {name!r} is a device, FIFO or socket: only regular files "
        "and directories are extracted"
    )


@contextmanager
def _opened(archive: Path, fmt: ArchiveFormat, uri: str) -> Iterator[Iterator[_Entry]]:
    # The archive stays open for as long as the caller walks its entries, and is closed
    # however the walk ends.
    if fmt == "zip":
        with zipfile.ZipFile(archive) as packed:
            yield _zip_entries(packed, uri)
    else:
        with tarfile.open(archive, _TAR_MODES[fmt]) as tar:
            yield _tar_entries(tar, uri)


def _tar_entries(tar: tarfile.TarFile, uri: str) -> Iterator[_Entry]:
    for info in tar:  # lazily, so a limit stops the walk before all headers are read
        if info.issym() or info.islnk():
            raise _link(uri, info.name, info.linkname)
        if info.isdir():
            yield _Entry(info.name, True, 0, _nothing)
        elif info.isreg():
            yield _Entry(info.name, False, info.size, _tar_member(tar, info))
        elif info.ischr() or info.isblk() or info.isfifo():
            raise _special(uri, info.name)
        else:
            raise ArtifactError(f"{uri}: archive member {info.name!r} has an unsupported type")


def _tar_member(tar: tarfile.TarFile, info: tarfile.TarInfo) -> Callable[[], IO[bytes]]:
    def open_member() -> IO[bytes]:
        member = tar.extractfile(info)
        if member is None:  # only for non-files, which never get here
            raise tarfile.ExtractError(f"{info.name!r} has no contents")
        return member

    return open_member


def _zip_entries(packed: zipfile.ZipFile, uri: str) -> Iterator[_Entry]:
    for info in packed.infolist():
        # Zip has no link type of its own: Unix tools record one in the file-mode bits.
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind == stat.S_IFLNK:
            with packed.open(info) as link:
                target = link.read(4096).decode("utf-8", "replace")
            raise _link(uri, info.filename, target)
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise _special(uri, info.filename)
        if info.flag_bits & 0x1:
            raise ArtifactError(f"{uri}: archive member {info.filename!r} is encrypted")
        if info.is_dir():
            yield _Entry(info.filename, True, 0, _nothing)
        else:
            yield _Entry(info.filename, False, info.file_size, _zip_member(packed, info))


def _zip_member(packed: zipfile.ZipFile, info: zipfile.ZipInfo) -> Callable[[], IO[bytes]]:
    def open_member() -> IO[bytes]:
        return packed.open(info)

    return open_member


def _nothing() -> IO[bytes]:
    raise AssertionError("a directory has no contents to open")


@contextmanager
def _translated(uri: str, fmt: ArchiveFormat) -> Iterator[None]:
    try:
        yield
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError) as exc:
        raise ArtifactError(f"{uri}: not a readable {fmt} archive: {exc}") from exc
    except OSError as exc:
        raise ArtifactError(f"{uri}: cannot extract the {fmt} archive: {exc}") from exc
