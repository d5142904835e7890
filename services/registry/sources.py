"""What a registration's manifest may name, and where its uploaded files go.

``admit`` takes a parsed manifest, the files uploaded with it and the registry's
``SourcePolicy``, and gives the manifest as it will be registered: every source that names an
uploaded file (a relative path, matched by sha256) now names the registry's kept copy; every
other source and labels file has passed the policy, before anything was read. Errors name the
field; a digest is only ever said of a file the caller uploaded.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shared.artifacts import ArtifactCache, SourcePolicy, is_upload
from shared.errors import ArtifactError
from shared.manifests import DatasetManifest, DatasetSource, Manifest, ModelManifest, ModelSource
from shared.messages import UploadedFile

__all__ = ["Admission", "admit"]


@dataclass
class Admission:
    """The manifest to register, and the uploads first kept for it (to discard if it is
    refused: a file some registered manifest already pins stays)."""

    manifest: Manifest
    kept: list[Path] = field(default_factory=list)

    def discard(self) -> None:
        for path in self.kept:
            path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # the same bytes kept under another name too
                path.parent.rmdir()


def admit(
    manifest: Manifest,
    files: Sequence[UploadedFile],
    *,
    policy: SourcePolicy,
    store: ArtifactCache,
) -> Admission:
    """``manifest`` with its uploaded sources kept in ``store``; ``ArtifactError`` when a
    source or labels file is not one it may name, or an upload is missing or left over."""
    uploads = {hashlib.sha256(f.content).hexdigest(): f for f in files}
    admission = Admission(manifest)
    named: set[str] = set()

    def admitted(where: str, source: ModelSource) -> ModelSource:
        if not is_upload(source.uri):
            _check(policy, source.uri, where)
            return source
        upload = uploads.get(source.sha256)
        if upload is None:
            sent = ", ".join(f"{f.name} (sha256 {d})" for d, f in uploads.items()) or "none"
            raise ArtifactError(
                f"{where}.uri {source.uri!r} names a file uploaded with the registration, and "
                f"no uploaded file has its sha256 {source.sha256} (uploaded: {sent})"
            )
        named.add(source.sha256)
        kept, new = store.keep(upload.name, source.sha256, upload.content)
        if new:
            admission.kept.append(kept)
        return source.model_copy(update={"uri": kept.as_uri()})

    try:
        admission.manifest = _with_sources(manifest, admitted)
        for where, labels in _labels_files(manifest):
            if not policy.local_paths:
                _check(policy, labels, where, hint="or list the labels in the manifest")
        unnamed = [f"{f.name} (sha256 {d})" for d, f in uploads.items() if d not in named]
        if unnamed:
            raise ArtifactError(
                f"uploaded but named by no source of the manifest: {', '.join(unnamed)}; a "
                "source names an uploaded file by a relative path and the file's sha256"
            )
    except BaseException:
        admission.discard()
        raise
    return admission


def _check(policy: SourcePolicy, uri: str, where: str, *, hint: str = "") -> None:
    try:
        policy.check(uri)
    except ArtifactError as exc:
        raise ArtifactError(f"{where}: {exc}{'; ' + hint if hint else ''}") from None


def _with_sources(
    manifest: Manifest, admitted: Callable[[str, ModelSource], ModelSource]
) -> Manifest:
    if isinstance(manifest, ModelManifest):
        graph, weights, tokenizer = manifest.source, manifest.weights, manifest.tokenizer
        return manifest.model_copy(
            update={
                "source": None if graph is None else admitted("source", graph),
                "weights": None if weights is None else admitted("weights", weights),
                "tokenizer": None if tokenizer is None else admitted("tokenizer", tokenizer),
            }
        )
    if isinstance(manifest, DatasetManifest) and manifest.source.file is not None:
        file = admitted("source", manifest.source.file)
        source = DatasetSource(
            uri=file.uri, sha256=file.sha256, archive=file.archive, member=file.member
        )
        return manifest.model_copy(update={"source": source})
    return manifest


def _labels_files(manifest: Manifest) -> list[tuple[str, str]]:
    """The labels files a manifest names by path, with the field that names each."""
    found: list[tuple[str, str]] = []
    if isinstance(manifest, ModelManifest):
        for i, output in enumerate(manifest.outputs):
            for j, step in enumerate(output.steps):
                labels = getattr(step, "labels", None)
                if isinstance(labels, str):
                    found.append((f"outputs.{i}.steps.{j}.labels", labels))
    elif isinstance(manifest, DatasetManifest) and isinstance(manifest.labels, str):
        found.append(("labels", manifest.labels))
    return found
