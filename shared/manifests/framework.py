"""The framework manifest: one exact framework version dlscope can measure with."""

from __future__ import annotations

import re
from typing import Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import Field, field_validator

from shared.inputs import MAX_DESCRIPTION, MAX_ITEMS
from shared.manifests.fields import FrameworkName, Hardware, Strict

__all__ = ["FrameworkManifest"]

# A version as frameworks report it: 1.31.1, 2.13.0, 10.0.1.6, 2.5.1+cu121, 3.0.
_EXACT = re.compile(r"^\d+(\.\d+){1,3}([-.+_]?[0-9A-Za-z][0-9A-Za-z.+_-]*)?$")


class FrameworkManifest(Strict):
    """A framework pinned exactly: a result measured with it names this version.

    - ``version``: the version string exactly as the framework reports it
      (``onnxruntime.__version__``, ``torch.__version__``, ...), never a constraint.
    - ``hardware``: where this build runs (``cpu``, ``gpu``, ``fpga``).
    - ``package``: the Python distribution that provides it (``onnxruntime-gpu``), if any.
    """

    kind: Literal["framework"] = "framework"
    name: FrameworkName
    version: str
    hardware: list[Hardware] = Field(min_length=1, max_length=MAX_ITEMS)
    description: str = Field(default="", max_length=MAX_DESCRIPTION)
    package: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

    @field_validator("version", mode="before")
    @classmethod
    def _exact(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            # YAML reads 2.10 as the number 2.1: the version would not be the one written.
            raise ValueError(f"write the version as a quoted string, e.g. '{value}.0'")
        if isinstance(value, str):
            try:
                ordered = _EXACT.match(value) and Version(value)
            except InvalidVersion:
                ordered = None
            if not ordered:
                raise ValueError(
                    f"{value!r} is not an exact version: a framework manifest pins the version "
                    "the framework reports, e.g. '1.31.1'"
                )
        return value

    @field_validator("hardware")
    @classmethod
    def _once_each(cls, value: list[Hardware]) -> list[Hardware]:
        if len(set(value)) != len(value):
            raise ValueError("list each kind of hardware once")
        return value

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"
