"""Where the files of a model or a data set come from, pinned by sha256.

A source names one file. When that file is an archive, ``member`` names the file inside it
that is meant (left out, the whole unpacked tree is), and the sha256 pins the archive: the
member is pinned through it, since unpacking the same bytes always yields the same member.
Several sources may share one archive (a graph and its weights in the same tarball); a cache
keyed by sha256 fetches it once.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from shared.manifests.fields import SHA256_PATTERN, Strict, digest_text, resolve_local

__all__ = ["ArchiveFormat", "DatasetSource", "ModelSource"]

ArchiveFormat = Literal["tar", "tar.gz", "zip"]


def _check_member(value: str | None) -> str | None:
    # Refused here rather than when unpacking: a member outside the archive's own tree
    # ("zip slip") must never reach the code that writes files.
    if value is None:
        return value
    path = PurePosixPath(value)
    if "\\" in value or path.is_absolute() or ".." in path.parts or value.strip("/.") == "":
        raise ValueError(
            f"{value!r} is not a path inside an archive (use a relative POSIX path such as "
            "'resnet50/model.onnx', without '..')"
        )
    return value


def _check_archive(archive: ArchiveFormat | None, member: str | None) -> None:
    if member is not None and archive is None:
        raise ValueError("member names a file inside an archive: say which kind with archive")


class ModelSource(Strict):
    """One file of a model (its graph, or its weights), where to get it and its sha256.

    - ``uri``: a path (relative to the manifest; made absolute when the manifest is read), a
      ``file://`` URL, or ``pkg://<package>/<path>`` for a file inside an installed Python
      package. Other schemes are for the artifact fetcher to support.
    - ``sha256``: lowercase hex digest of the bytes ``uri`` names (of the archive, when
      ``archive`` is set). Always verified before the file is used.
    - ``archive``: ``tar``, ``tar.gz`` or ``zip`` when ``uri`` names an archive.
    - ``member``: with ``archive``, the relative POSIX path of the file (or folder) to use
      inside it; left out, the whole unpacked tree is the artifact (a TensorFlow SavedModel
      folder, say).
    """

    uri: str = Field(min_length=1)
    sha256: str = Field(pattern=SHA256_PATTERN)
    archive: ArchiveFormat | None = None
    member: str | None = None

    @field_validator("uri")
    @classmethod
    def _relative_to_manifest(cls, value: str, info: ValidationInfo) -> str:
        return resolve_local(value, info)

    _member = field_validator("member")(_check_member)
    _sha256 = field_validator("sha256", mode="before")(digest_text)

    @model_validator(mode="after")
    def _together(self) -> ModelSource:
        _check_archive(self.archive, self.member)
        return self


class DatasetSource(Strict):
    """Where a data set's samples come from: a file like a model's, or a built-in one.

    Either ``uri`` and ``sha256`` (with optional ``archive`` and ``member``, as in
    ``ModelSource``), or ``builtin: "<provider>:<name>"`` for data shipped inside an installed
    Python package (``sklearn:digits``, ``skimage:astronaut``), which the package's own
    version pins.
    """

    uri: str | None = Field(default=None, min_length=1)
    sha256: str | None = Field(default=None, pattern=SHA256_PATTERN)
    archive: ArchiveFormat | None = None
    member: str | None = None
    builtin: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_]*:[A-Za-z0-9_./-]+$")

    @field_validator("uri")
    @classmethod
    def _relative_to_manifest(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else resolve_local(value, info)

    _member = field_validator("member")(_check_member)
    _sha256 = field_validator("sha256", mode="before")(digest_text)

    @model_validator(mode="after")
    def _one_origin(self) -> DatasetSource:
        if self.builtin is not None:
            if any(v is not None for v in (self.uri, self.sha256, self.archive, self.member)):
                raise ValueError("a builtin source takes no uri, sha256, archive or member")
        elif self.uri is None or self.sha256 is None:
            raise ValueError("give either uri and sha256, or builtin: '<provider>:<name>'")
        _check_archive(self.archive, self.member)
        return self

    @property
    def file(self) -> ModelSource | None:
        """The file to fetch and verify, as an artifact cache takes it; None when built in."""
        if self.uri is None or self.sha256 is None:
            return None
        return ModelSource(
            uri=self.uri, sha256=self.sha256, archive=self.archive, member=self.member
        )
