"""The model manifest schema: a complete, code-free description of one model version."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.manifests.versions import parse_constraint, parse_version

__all__ = ["ElementType", "FrameworkRequirement", "ModelManifest", "ModelSource", "TensorSpec"]

ElementType = Literal["float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool"]
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FrameworkRequirement(_Strict):
    name: str = Field(min_length=1)
    version: str = Field(default="*", description="version constraint, PEP 440 syntax")

    @field_validator("version")
    @classmethod
    def _constraint(cls, value: str) -> str:
        parse_constraint(value)
        return value


class TensorSpec(_Strict):
    name: str = Field(min_length=1)
    element_type: ElementType = "float32"
    # -1 marks a dimension chosen at run time (the batch dimension, usually the first).
    shape: list[int] = Field(min_length=1)
    layout: str | None = None

    @field_validator("shape")
    @classmethod
    def _dims(cls, value: list[int]) -> list[int]:
        if any(d == 0 or d < -1 for d in value):
            raise ValueError("dimensions must be positive, or -1 for a dimension set at run time")
        return value


class ModelSource(_Strict):
    # file paths (relative to the manifest), file:// URLs, or pkg://<package>/<path> for a
    # file shipped inside an installed Python package.
    uri: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class ModelManifest(_Strict):
    kind: Literal["model"] = "model"
    name: str = Field(pattern=NAME_PATTERN)
    version: str
    description: str = ""
    license: str | None = None
    references: list[str] = Field(default_factory=list)
    task: str | None = None
    framework: FrameworkRequirement
    inputs: list[TensorSpec] = Field(min_length=1)
    outputs: list[TensorSpec] = Field(min_length=1)
    source: ModelSource
    attributes: dict[str, Any] = Field(default_factory=dict)

    @field_validator("version", mode="before")
    @classmethod
    def _semver(cls, value: object) -> object:
        # YAML reads `version: 1.2` as a number; say what is wrong with it as a version.
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str):
            parse_version(value)
        return value

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"
