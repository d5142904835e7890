"""Hashing artifacts, and saying plainly when the bytes are not the ones a manifest pins."""

from __future__ import annotations

import hashlib
from pathlib import Path

from shared.errors import ArtifactError

__all__ = ["CHUNK", "mismatch", "sha256_of"]

# Large enough to keep hashing I/O-bound, small enough not to matter in memory.
CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def mismatch(uri: str, expected: str) -> ArtifactError:
    # The digest the bytes do have is not said: whoever reads this error may not be whoever
    # may read the file, and a digest is enough to ask a content-addressed server for it.
    return ArtifactError(
        f"{uri}: sha256 mismatch: the file is not the one the manifest pins (sha256 {expected})"
    )
