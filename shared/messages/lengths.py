"""How many tokens a generative workload's prompts and outputs have: a distribution each
request row draws its length from, seeded, as the field's load tools define synthetic
workloads (a fixed length, uniform between two, or normal around a mean, clipped).

On the wire, one object with its ``distribution`` named: ``{"distribution": "normal",
"mean": 128, "stddev": 32}``; on the CLI, one word (``parse_lengths``):
``128``, ``uniform:64-192``, ``normal:128,32`` or ``normal:128,32,16-256``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self

from pydantic import BaseModel, Field, model_validator

from shared.inputs import REQUESTED

__all__ = [
    "MAX_LENGTH",
    "FixedLength",
    "NormalLengths",
    "TokenLengths",
    "UniformLengths",
    "parse_lengths",
]

# The longest prompt or output one distribution may name: above any context served today,
# below what a typo makes (a length in characters, say).
MAX_LENGTH = 131_072

_Length = Annotated[int, Field(strict=True, ge=1, le=MAX_LENGTH)]


class FixedLength(BaseModel):
    """Every row the same length."""

    model_config = REQUESTED

    distribution: Literal["fixed"] = "fixed"
    tokens: _Length

    @property
    def longest(self) -> int:
        return self.tokens

    def __str__(self) -> str:
        return f"{self.tokens}"


class UniformLengths(BaseModel):
    """Each row's length uniform over ``min`` to ``max``, both included."""

    model_config = REQUESTED

    distribution: Literal["uniform"]
    min: _Length
    max: _Length

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.min > self.max:
            raise ValueError(f"uniform lengths: min ({self.min}) exceeds max ({self.max})")
        return self

    @property
    def longest(self) -> int:
        return self.max

    def __str__(self) -> str:
        return f"uniform {self.min}-{self.max}"


class NormalLengths(BaseModel):
    """Each row's length normal around ``mean``, rounded, clipped to ``min`` and ``max``
    (default 1 and four deviations above the mean, so a tail draw cannot ask for what no
    one meant)."""

    model_config = REQUESTED

    distribution: Literal["normal"]
    mean: _Length
    stddev: float = Field(strict=True, ge=0, le=MAX_LENGTH)
    min: _Length = 1
    max: _Length | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if not self.min <= self.mean <= self.longest:
            raise ValueError(
                f"normal lengths: the mean ({self.mean}) must lie within min ({self.min}) "
                f"and max ({self.longest})"
            )
        return self

    @property
    def longest(self) -> int:
        if self.max is not None:
            return self.max
        return min(MAX_LENGTH, self.mean + int(4 * self.stddev + 0.5))

    def __str__(self) -> str:
        return f"normal {self.mean}±{self.stddev:g} in {self.min}-{self.longest}"


TokenLengths = Annotated[
    FixedLength | UniformLengths | NormalLengths, Field(discriminator="distribution")
]

_UNIFORM = re.compile(r"uniform:(\d+)-(\d+)")
_NORMAL = re.compile(r"normal:(\d+),(\d+(?:\.\d+)?)(?:,(\d+)-(\d+))?")
_FORMS = "N, uniform:MIN-MAX, normal:MEAN,STDDEV or normal:MEAN,STDDEV,MIN-MAX"


def parse_lengths(text: str) -> FixedLength | UniformLengths | NormalLengths:
    """The distribution a CLI word names; ``ValueError`` naming the forms it takes."""
    word = text.strip()
    try:
        if word.isdigit():
            return FixedLength(tokens=int(word))
        if match := _UNIFORM.fullmatch(word):
            return UniformLengths(distribution="uniform", min=int(match[1]), max=int(match[2]))
        if match := _NORMAL.fullmatch(word):
            clip = {} if match[3] is None else {"min": int(match[3]), "max": int(match[4])}
            return NormalLengths(
                distribution="normal", mean=int(match[1]), stddev=float(match[2]), **clip
            )
    except ValueError as exc:  # pydantic's, on a length out of bounds: said in one line
        problem = exc.errors()[0]["msg"] if hasattr(exc, "errors") else str(exc)
        raise ValueError(f"{text!r}: {problem.removeprefix('Value error, ')}") from None
    raise ValueError(f"{text!r} is not a length distribution: give {_FORMS}")
