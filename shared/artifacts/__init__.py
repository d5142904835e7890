"""Model artifacts: fetched, verified against the manifest's sha256, and cached by content.

A file is usable only once its bytes hash to the sha256 the manifest pins. Sources are local
paths, ``file://`` URLs, ``pkg://<package>/<path>`` (a file shipped inside an installed
Python package: how the built-in zoo points at its models) and ``http(s)://`` downloads. An
archive source is verified as a whole and extracted once, safely, beside it in the cache.

    <root>/staging/                          temporary files and trees, renamed into place
    <root>/sha256/<digest>/<file name>       the verified bytes (a model file or an archive)
    <root>/sha256/<digest>/extracted/files/  an archive's members, once extracted
    <root>/sha256/<digest>/extracted/sha256.json   the digest of every extracted file

Everything in ``sha256/`` is re-verified on every use, so a file changed behind dlscope's back
is replaced rather than measured.

Workers on other hosts get local sources as URLs of the registry's artifact server
(``served``), addressed by the same sha256.
"""

from shared.artifacts.archives import Archive, ArchiveFormat, ArchiveSpec
from shared.artifacts.cache import ArtifactCache
from shared.artifacts.digests import sha256_of
from shared.artifacts.limits import ArtifactLimits
from shared.artifacts.policy import SourcePolicy, is_upload
from shared.artifacts.served import (
    SERVED_ROUTE,
    SERVER_HEADER,
    check_artifact_url,
    host_paths,
    is_host_path,
    served_manifest,
    served_uri,
)
from shared.artifacts.sources import is_remote, locate
from shared.artifacts.verification import verify

__all__ = [
    "SERVED_ROUTE",
    "SERVER_HEADER",
    "Archive",
    "ArchiveFormat",
    "ArchiveSpec",
    "ArtifactCache",
    "ArtifactLimits",
    "SourcePolicy",
    "check_artifact_url",
    "host_paths",
    "is_host_path",
    "is_remote",
    "is_upload",
    "locate",
    "served_manifest",
    "served_uri",
    "sha256_of",
    "verify",
]
