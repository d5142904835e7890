"""What a model computed on a fixed input set: the evidence two evaluations are compared by.

After its timed measurement a worker runs the model once more on a fixed input set (the
dataset's first batch, or seeded synthetic inputs) and records, per output, a bounded sample
of the values, a sha256 of the whole output and the top-1 index of each sample. Two
evaluations with the same input set (same ``inputs.sha256``) can then be compared without
either one keeping its full outputs.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

__all__ = ["FINGERPRINT_VALUES", "InputSetIdentity", "OutputFingerprint", "OutputSample"]

# Values kept per output: a whole batch of 1 000-class scores, so messages stay a few tens of
# kilobytes while the comparison still sees every value of small outputs.
FINGERPRINT_VALUES = 1024


class InputSetIdentity(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["dataset", "synthetic"]
    description: str = Field(description="e.g. 'digits@1.0.0 test: first batch of 32 samples'")
    batch_size: int = Field(ge=1)
    sha256: str = Field(description="of every input tensor: name, dtype, shape and bytes")


class OutputSample(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    shape: list[int]
    dtype: str
    # NaN and infinities travel as the strings "nan", "inf" and "-inf" (JSON has no such
    # numbers, and a null would make the message invalid).
    values: list[float] = Field(
        description=f"the first {FINGERPRINT_VALUES} values of the output, flattened in C order"
    )
    sha256: str = Field(description="of the whole output: dtype, shape and bytes")
    top1: list[int] = Field(
        description="per sample (first dimension), the index of the largest value; "
        "empty for outputs without a batch dimension"
    )
    # Optional, so fingerprints recorded before it read (a generation's "tokens" output
    # then, told apart by its name and its input set's description).
    kind: Literal["values", "tokens"] = Field(
        default="values",
        description="tokens: a generation's greedy token ids, compared position by position "
        "(how many agree), never as numbers",
    )

    @field_serializer("values", when_used="json")
    def _finite_or_named(self, values: list[float]) -> list[float | str]:
        return [v if math.isfinite(v) else str(v) for v in values]


class OutputFingerprint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    inputs: InputSetIdentity
    outputs: list[OutputSample] = Field(min_length=1)
