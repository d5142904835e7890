"""Artifacts served by URL, for workers that do not share the control plane's filesystem.

A worker on another host cannot read a path (or ``file://``) of the control plane's host,
and need not have its Python packages (``pkg://``). When a deployment names the URL its
workers reach the registry's artifact server at (``DLSCOPE_ARTIFACT_URL``), jobs carry every
such local source as a URL under it, addressed by content:

    <artifact url>/sha256/<digest>/<file name>

The digest is the source's pinned sha256, the one the worker verifies the download against:
the address names exactly the bytes the manifest pins, so it never goes stale, and any copy
of them (any version, any manifest) answers it. The file name is there for people and for
the archive format a name implies (``.tar.gz``); the server goes by the digest alone.
``http(s)://`` sources are left as they are: the worker downloads them from where they live.

Where a source or a labels file would reach a worker on another host as a path, with no
server to fetch it from, ``host_paths`` names it, so the job is refused with the reason
rather than failing on the worker with "file not found".
"""

from __future__ import annotations

import re
from pathlib import PurePath, PurePosixPath
from typing import TypeVar
from urllib.parse import quote, unquote, urlparse

from shared.artifacts.sources import is_remote
from shared.errors import ConfigurationError
from shared.manifests import DatasetManifest, DatasetSource, ModelManifest, ModelSource

__all__ = [
    "SERVED_ROUTE",
    "SERVER_HEADER",
    "check_artifact_url",
    "host_paths",
    "is_host_path",
    "served_manifest",
    "served_uri",
]

# The route of the artifact server, as Starlette spells its parameters.
SERVED_ROUTE = "/sha256/{digest}/{name}"
# On the artifact server's refusals: a worker quotes the text of those alone in its errors
# (another server's error page may hold anything, and the user who reads the failure may
# not be someone that server would show it to).
SERVER_HEADER = "X-Dlscope-Artifact-Server"
_DIGEST = re.compile(r"^[0-9a-f]{64}$")

Served = TypeVar("Served", ModelManifest, DatasetManifest)


def check_artifact_url(url: str) -> str:
    """``url`` if it can be a base of served artifacts (http(s), with a host); else why not."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigurationError(
            f"DLSCOPE_ARTIFACT_URL must be an http:// or https:// URL with a host that the "
            f"workers can reach (e.g. http://10.0.0.5:8081), not {url!r}"
        )
    if parsed.query or parsed.fragment:
        raise ConfigurationError(
            f"DLSCOPE_ARTIFACT_URL is a base URL: it takes no query or fragment, not {url!r}"
        )
    return url


def is_host_path(uri: str) -> bool:
    """Whether ``uri`` names a file by its path on the host that reads it (a path or
    ``file://``): a worker on another host would look for it in the wrong place."""
    scheme = urlparse(uri).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and PurePath(uri).is_absolute())


def served_uri(base_url: str, sha256: str, uri: str) -> str:
    """Where the artifact server at ``base_url`` serves the file ``uri`` names, pinned by
    ``sha256``."""
    if not _DIGEST.match(sha256):
        raise ValueError(f"{sha256!r} is not a sha256 hex digest")
    name = quote(_file_name(uri), safe="")
    return f"{base_url.rstrip('/')}/sha256/{sha256}/{name}"


def served_manifest(manifest: Served, base_url: str) -> Served:
    """``manifest`` with every local source (path, ``file://``, ``pkg://``) named by its URL
    on the artifact server at ``base_url``; remote sources unchanged."""
    if isinstance(manifest, ModelManifest):
        changes: dict[str, ModelSource | DatasetSource | None] = {
            "source": None if manifest.source is None else _served(manifest.source, base_url),
            "weights": None if manifest.weights is None else _served(manifest.weights, base_url),
            "tokenizer": (
                None if manifest.tokenizer is None else _served(manifest.tokenizer, base_url)
            ),
        }
        return manifest.model_copy(update=changes)
    source = manifest.source
    if source.uri is None or source.sha256 is None or is_remote(source.uri):
        return manifest
    url = served_uri(base_url, source.sha256, source.uri)
    return manifest.model_copy(update={"source": source.model_copy(update={"uri": url})})


def host_paths(
    manifest: ModelManifest, dataset: DatasetManifest | None, *, served: bool
) -> list[tuple[str, str]]:
    """The fields of a job that name a file by a path of the control plane's host, with
    that path: what a worker on another host could not read. Sources count only when no
    artifact server serves them (``served``); a labels file always does, since nothing
    pins its bytes for a server to vouch for."""
    found: list[tuple[str, str]] = []
    if not served:
        for role, source in manifest.sources.items():
            if is_host_path(source.uri):
                found.append((f"model {manifest.ref} {role}", source.uri))
        if dataset is not None and dataset.source.uri and is_host_path(dataset.source.uri):
            found.append((f"dataset {dataset.ref} source", dataset.source.uri))
    for i, output in enumerate(manifest.outputs):
        for j, step in enumerate(output.steps):
            labels = getattr(step, "labels", None)
            if isinstance(labels, str):
                found.append((f"model {manifest.ref} outputs[{i}].steps[{j}].labels", labels))
    if dataset is not None and isinstance(dataset.labels, str):
        found.append((f"dataset {dataset.ref} labels", dataset.labels))
    return found


def _served(source: ModelSource, base_url: str) -> ModelSource:
    if is_remote(source.uri):
        return source
    return source.model_copy(update={"uri": served_uri(base_url, source.sha256, source.uri)})


def _file_name(uri: str) -> str:
    # Read from the URI alone: locating a pkg:// source would import its package, which the
    # host rewriting the URI (the scheduler's) need not have.
    parsed = urlparse(uri)
    path = unquote(parsed.path) if parsed.scheme in ("file", "pkg") else uri
    name = PurePosixPath(path.replace("\\", "/")).name
    return name if name not in ("", ".", "..") else "artifact"
