"""The dataset manifest: which samples, how many, how they are split and labelled."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Field,
    NonNegativeInt,
    PositiveInt,
    Tag,
    field_validator,
    model_validator,
)

from shared.inputs import MAX_ITEMS
from shared.manifests.fields import (
    ElementType,
    Labels,
    Strict,
    Versioned,
    check_dims,
    labels_file,
)
from shared.manifests.sources import DatasetSource

__all__ = ["DatasetManifest", "SampleSpec", "Split", "SplitRange"]


class SplitRange(Strict):
    """Samples ``start`` (included) to ``stop`` (excluded), as a Python slice."""

    start: NonNegativeInt = 0
    stop: PositiveInt

    @model_validator(mode="after")
    def _not_empty(self) -> SplitRange:
        if self.start >= self.stop:
            raise ValueError(f"start ({self.start}) must be below stop ({self.stop})")
        return self


def _split_kind(value: Any) -> str | None:
    if isinstance(value, dict | SplitRange):
        return "range"
    return "indices" if isinstance(value, list) else None


Split = Annotated[
    Annotated[SplitRange, Tag("range")] | Annotated[list[NonNegativeInt], Tag("indices")],
    Discriminator(
        _split_kind,
        custom_error_type="split",
        custom_error_message="Input should be {start, stop} or a list of sample numbers",
    ),
]


class SampleSpec(Strict):
    """One sample: an array (``shape`` and ``element_type``), an encoded image file, or a
    text (``encoding: text``, UTF-8, what a tokenize step takes)."""

    shape: list[int] | None = Field(default=None, min_length=1, max_length=MAX_ITEMS)
    element_type: ElementType | None = None
    encoding: Literal["png", "jpeg", "text"] | None = None

    _dims = field_validator("shape")(check_dims)

    @model_validator(mode="after")
    def _array_or_file(self) -> SampleSpec:
        if (self.element_type is None) == (self.encoding is None):
            raise ValueError("give element_type (an array) or encoding (an image file)")
        if self.element_type is not None and self.shape is None:
            raise ValueError("an array sample needs its shape")
        if self.encoding == "text" and self.shape is not None:
            raise ValueError("a text sample has no shape")
        return self


class DatasetManifest(Versioned):
    """One immutable data set version.

    - ``samples``: how many there are; samples are numbered 0 to samples - 1.
    - ``splits``: named subsets, each ``{start, stop}`` or a list of sample numbers.
    - ``labels``: class names (index i is class i), or a UTF-8 text file with one per line,
      relative to the manifest.
    - ``element``: what one sample is.
    """

    kind: Literal["dataset"] = "dataset"
    source: DatasetSource
    samples: PositiveInt
    splits: dict[str, Split] = Field(default_factory=dict, max_length=MAX_ITEMS)
    labels: Labels | None = None
    element: SampleSpec

    _labels = field_validator("labels")(labels_file)

    def sample_count(self, split: str | None = None) -> int:
        """How many samples ``split`` holds (the whole data set without one)."""
        if split is None:
            return self.samples
        chosen = self.splits[split]
        return chosen.stop - chosen.start if isinstance(chosen, SplitRange) else len(chosen)

    @model_validator(mode="after")
    def _splits_within_samples(self) -> DatasetManifest:
        for name, split in self.splits.items():
            last = split.stop - 1 if isinstance(split, SplitRange) else max(split, default=0)
            if last >= self.samples:
                raise ValueError(
                    f"split {name!r} reaches sample {last} but there are {self.samples} samples "
                    f"(0 to {self.samples - 1})"
                )
            if isinstance(split, list) and len(set(split)) != len(split):
                raise ValueError(f"split {name!r} lists a sample more than once")
        return self
