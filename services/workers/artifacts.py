"""Fetching model artifacts into a content-addressed cache, verifying their sha256 first.

A file is usable only once its bytes hash to the manifest's sha256; the cached copy lives
under ``<home>/artifacts/sha256/<digest>/`` and is re-verified on every use, so a file
changed behind dlscope's back is caught rather than measured.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

from shared.errors import ArtifactError
from shared.manifests import ModelSource

__all__ = ["ArtifactCache", "locate", "sha256_of"]

_CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def locate(uri: str) -> Path:
    """The local file a source URI names: a path, ``file://`` or ``pkg://<package>/<path>``."""
    parsed = urlparse(uri)
    if parsed.scheme == "pkg":
        spec = importlib.util.find_spec(parsed.netloc)
        if spec is None or not spec.submodule_search_locations:
            raise ArtifactError(f"{uri}: Python package {parsed.netloc!r} is not installed")
        root = Path(next(iter(spec.submodule_search_locations)))
        return root / parsed.path.lstrip("/")
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return Path(uri)
    raise ArtifactError(
        f"{uri}: unsupported source scheme {parsed.scheme!r} (use a path, file:// or pkg://)"
    )


class ArtifactCache:
    def __init__(self, root: Path) -> None:
        self._root = root / "sha256"

    def fetch(self, source: ModelSource) -> Path:
        """A verified local copy of ``source``; ``ArtifactError`` says why there is none."""
        cached = self._root / source.sha256 / locate(source.uri).name
        if cached.exists():
            if sha256_of(cached) == source.sha256:
                return cached
            cached.unlink()  # corrupted in the cache: fetch it again
        origin = locate(source.uri)
        if not origin.is_file():
            raise ArtifactError(f"{source.uri}: model file not found at {origin}")
        actual = sha256_of(origin)
        if actual != source.sha256:
            raise ArtifactError(
                f"{source.uri}: sha256 mismatch, expected {source.sha256} but the file has "
                f"{actual}; the file is not the one the manifest pins"
            )
        cached.parent.mkdir(parents=True, exist_ok=True)
        # Copy then rename, so a reader never sees a half-written file under the final name.
        with (
            tempfile.NamedTemporaryFile(dir=cached.parent, delete=False) as tmp,
            origin.open("rb") as src,
        ):
            shutil.copyfileobj(src, tmp, _CHUNK)
        Path(tmp.name).replace(cached)
        if sha256_of(cached) != source.sha256:  # changed while we copied it
            cached.unlink()
            raise ArtifactError(f"{source.uri}: the file changed while it was being cached")
        return cached
