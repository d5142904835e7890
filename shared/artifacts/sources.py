"""What a source URI names: a local file (path, ``file://``, ``pkg://``) or a download."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

from shared.errors import ArtifactError

__all__ = ["file_name", "is_remote", "locate", "not_found"]

_REMOTE = frozenset({"http", "https"})


def is_remote(uri: str) -> bool:
    """Whether ``uri`` is downloaded (``http://``, ``https://``) rather than read locally."""
    return urlparse(uri).scheme in _REMOTE


def not_found(uri: str, origin: Path) -> ArtifactError:
    """The error for a local source with no file: where it was looked for, except inside a
    package, whose place on the host (its install path) is not the caller's to learn."""
    parsed = urlparse(uri)
    if parsed.scheme == "pkg":
        return ArtifactError(f"{uri}: model file not found in package {parsed.netloc!r}")
    return ArtifactError(f"{uri}: model file not found at {origin}")


def locate(uri: str) -> Path:
    """The local file a source URI names: a path, ``file://`` or ``pkg://<package>/<path>``."""
    parsed = urlparse(uri)
    if parsed.scheme == "pkg":
        try:
            spec = importlib.util.find_spec(parsed.netloc)
        except (ImportError, ValueError):  # "a.b" whose parent "a" is not installed
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise ArtifactError(f"{uri}: Python package {parsed.netloc!r} is not installed")
        root = Path(next(iter(spec.submodule_search_locations)))
        path = root / unquote(parsed.path).lstrip("/")
        # A pkg:// source names a file the package ships, nothing else: "..", or a link out
        # of the package, would make it a way to read any file of the host.
        if not Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root)):
            raise ArtifactError(f"{uri}: the path leaves package {parsed.netloc!r}")
        return path
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return Path(uri)
    if parsed.scheme in _REMOTE:
        raise ArtifactError(f"{uri}: a {parsed.scheme} source is not a local file; fetch it")
    raise ArtifactError(
        f"{uri}: unsupported source scheme {parsed.scheme!r} "
        "(use a path, file://, pkg://, http:// or https://)"
    )


def file_name(uri: str) -> str:
    """The name the cached copy takes: the last path component, as the source names it."""
    if not is_remote(uri):
        return locate(uri).name
    # Only the URL's path counts: a query string is not part of the file's name, and a
    # decoded "%2F" must not smuggle a directory into the cache.
    name = PurePosixPath(unquote(urlparse(uri).path)).name
    return name if name not in ("", ".", "..") else "artifact"
