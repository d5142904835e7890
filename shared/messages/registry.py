"""The registry's contracts: its events, and its request/reply calls.

Events (stream ``artifact-<kind>-<name>``, on the events exchange, recorded like any other):

    artifact.registered   a manifest version became available; immutable from then on
    artifact.deprecated   a version should no longer be chosen by constraints

Request/reply (routing key ``rpc.registry.<call>`` on the jobs exchange):

    resolve     kind + name + version constraint -> the highest matching manifest
    register    a manifest, as submitted, with the files it uploads -> registered, already
                registered, or refused
    deprecate   name + version + reason -> done or refused
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

from shared.inputs import MAX_DESCRIPTION, MAX_ITEMS, MAX_NAME, Reason
from shared.manifests import Manifest
from shared.messages.envelope import Payload

__all__ = [
    "ArtifactDeprecated",
    "ArtifactRegistered",
    "DeprecateArtifact",
    "DeprecationResult",
    "RegisterArtifact",
    "RegistrationResult",
    "ResolveArtifact",
    "ResolveProblem",
    "ResolvedArtifact",
    "UploadedFile",
    "artifact_stream",
]


# Why a resolve found nothing, for a caller that must tell which field was wrong.
ResolveProblem = Literal["unknown", "version"]


def artifact_stream(kind: str, name: str) -> str:
    return f"artifact-{kind}-{name}"


class ArtifactRegistered(Payload):
    TYPE = "artifact.registered"

    kind: str
    name: str
    version: str
    digest: str = Field(description="sha256 of the manifest's canonical JSON")
    manifest: Manifest


class ArtifactDeprecated(Payload):
    TYPE = "artifact.deprecated"

    kind: str
    name: str
    version: str
    reason: str = Field(max_length=MAX_DESCRIPTION)


class ResolveArtifact(Payload):
    TYPE = "registry.resolve"

    kind: str = Field(max_length=MAX_NAME, description="model, dataset or framework")
    name: str = Field(min_length=1, max_length=MAX_NAME)
    version: str = Field(default="*", max_length=MAX_NAME)


class ResolvedArtifact(Payload):
    """The reply: the highest version matching the constraint, or the reason there is none."""

    TYPE = "registry.resolved"

    manifest: Manifest | None = None
    error: Reason | None = None
    problem: ResolveProblem | None = Field(
        default=None,
        description="with an error: 'unknown' when no such artifact is registered, 'version' "
        "when none of its versions satisfies the constraint (or it is not one)",
    )


def _from_base64(value: object) -> object:
    if not isinstance(value, str):
        return value
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64: {exc}") from None


# Bytes in Python, base64 text in JSON.
Base64 = Annotated[
    bytes,
    BeforeValidator(_from_base64),
    PlainSerializer(lambda data: base64.b64encode(data).decode("ascii"), when_used="json"),
]


class UploadedFile(BaseModel):
    """A file sent with a registration: a source of its manifest that names it by a relative
    path is this file, matched by sha256."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=MAX_NAME, description="its file name")
    content: Base64 = Field(description="its bytes, base64 on the wire")


class RegisterArtifact(Payload):
    # The manifest as submitted, unvalidated: the registry validates it and answers with
    # what is wrong, instead of the message being refused before anyone can answer.
    TYPE = "registry.register"

    manifest: dict[str, Any]
    files: list[UploadedFile] = Field(
        default_factory=list,
        max_length=MAX_ITEMS,
        description="the files its relative sources name (DLSCOPE_MAX_UPLOAD_BYTES in all)",
    )
    local: bool = Field(
        default=False,
        description="sent by a local user of an embedded registry (dlscope models register "
        "without --gateway), whose manifest may name any path they can read; ignored by a "
        "registry on a shared broker",
    )


class RegistrationResult(Payload):
    TYPE = "registry.registration"

    manifest: Manifest | None = None
    created: bool = False
    error: Reason | None = None
    # True when the version exists with other content (versions are immutable).
    conflict: bool = False


class DeprecateArtifact(Payload):
    TYPE = "registry.deprecate"

    kind: str = Field(default="model", max_length=MAX_NAME)
    name: str = Field(max_length=MAX_NAME)
    version: str = Field(max_length=MAX_NAME)
    reason: str = Field(min_length=1, max_length=MAX_DESCRIPTION)


class DeprecationResult(Payload):
    TYPE = "registry.deprecation"

    error: Reason | None = None
