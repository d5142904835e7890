"""Building blocks every manifest kind shares: strict models, names, versions, local paths.

Paths written in a manifest are relative to the manifest's own file. They are made absolute
while the file is read (``load_manifest`` passes the manifest's folder in the pydantic
validation context), so a manifest means the same thing wherever dlscope runs from. A
manifest validated without that context (one received in a message, already absolute) is
left as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
)

from shared.inputs import BOUNDED, MAX_DESCRIPTION, MAX_ITEMS, MAX_LABELS, MAX_NAME
from shared.manifests.versions import parse_version

__all__ = [
    "MANIFEST_DIR",
    "NAME_PATTERN",
    "SHA256_PATTERN",
    "UNION_TAGS",
    "ElementType",
    "FrameworkName",
    "Hardware",
    "Labels",
    "ModelFrameworkName",
    "Strict",
    "Versioned",
    "check_dims",
    "digest_text",
    "is_loading",
    "labels_file",
    "resolve_local",
    "semver",
]

ElementType = Literal["float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool"]
# The same names as shared.messages.evaluation.Framework/Hardware (which imports this package,
# so it cannot be imported from here).
# ``FrameworkName``: what a worker runs, each framework and ``endpoint`` (a model served
# elsewhere, measured over HTTP). A model's manifest names one of them: what its files are
# made for, or ``endpoint`` for a model known only as a server serves it (no file of its own).
FrameworkName = Literal["onnxruntime", "pytorch", "tensorflow", "tensorrt", "opencl", "endpoint"]
ModelFrameworkName = FrameworkName
Hardware = Literal["cpu", "gpu", "fpga"]
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"
# Tags of the unions of this schema. pydantic puts them in error paths (labels.names.3), but
# a manifest file has no such level, so error messages leave them out (labels.3).
UNION_TAGS = frozenset({"file", "names", "range", "indices"})
# Key of the validation context that holds the folder of the manifest file being read.
MANIFEST_DIR = "manifest_dir"


def digest_text(value: object) -> object:
    """A ``mode="before"`` validator for a sha256: refuse a number, saying to quote it.

    YAML reads a digest written with digits only as an integer, losing its leading zeros, so
    the text cannot be recovered from the number. ``load_manifest`` keeps such a digest as
    written; a manifest parsed elsewhere (JSON with a number in it) is refused here.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(
            "sha256 must be quoted: written with digits only, YAML reads it as a number "
            "(write sha256: '<64 hex digits>')"
        )
    return value


class Strict(BaseModel):
    """Immutable, and a misspelt field is an error rather than silently ignored; every string
    bounded (``shared.inputs``)."""

    model_config = BOUNDED


def _labels_kind(value: Any) -> str | None:
    return "file" if isinstance(value, str) else "names" if isinstance(value, list) else None


# Class names (index i is class i), or the path of a UTF-8 text file with one name per line.
Labels = Annotated[
    Annotated[str, Tag("file")] | Annotated[list[str], Tag("names"), Field(max_length=MAX_LABELS)],
    Discriminator(
        _labels_kind,
        custom_error_type="labels",
        custom_error_message="Input should be the path of a labels file or a list of class names",
    ),
]


def is_loading(info: ValidationInfo) -> bool:
    """Whether this validation reads a manifest file (rather than re-checks a received one)."""
    return isinstance(info.context, dict) and MANIFEST_DIR in info.context


def resolve_local(value: str, info: ValidationInfo) -> str:
    """``value`` made absolute against the manifest's folder, if it is a relative path."""
    if not is_loading(info) or "://" in value or Path(value).is_absolute():
        return value
    base = Path(info.context[MANIFEST_DIR])  # type: ignore[index]
    return str((base / value).resolve())


def labels_file(value: str | list[str] | None, info: ValidationInfo) -> str | list[str] | None:
    """Validator body for ``labels``: a list stays; a file path is resolved and must exist."""
    if not isinstance(value, str):
        return value
    resolved = resolve_local(value, info)
    if is_loading(info) and not Path(resolved).is_file():
        raise ValueError(f"labels file {resolved} does not exist")
    return resolved


def semver(value: Any) -> Any:
    """Validator body for a semantic version; YAML reads ``version: 1.2`` as a number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str):
        parse_version(value)
    return value


def check_dims(value: list[int] | None) -> list[int] | None:
    if value is not None and any(d == 0 or d < -1 for d in value):
        raise ValueError("dimensions must be positive, or -1 for a dimension set at run time")
    return value


class Versioned(Strict):
    """What every registered artifact with a semantic version says about itself."""

    name: str = Field(pattern=NAME_PATTERN, max_length=MAX_NAME)
    version: str = Field(max_length=MAX_NAME)
    description: str = Field(default="", max_length=MAX_DESCRIPTION)
    license: str | None = None
    references: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)
    task: str | None = Field(default=None, max_length=MAX_NAME)

    _semver = field_validator("version", mode="before")(semver)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"
