"""A loaded data set, or one split of it: samples, their labels and the class names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["Dataset", "Sample"]

# An array (element: {shape, element_type}), the bytes of an encoded image file
# (element: {encoding: png | jpeg}) or a text (element: {encoding: text}), as the
# pre-processing steps take them.
Sample = NDArray[Any] | bytes | str


# eq=False: numpy arrays do not compare to one bool; a data set is compared by its ref.
@dataclass(frozen=True, eq=False)
class Dataset:
    """The samples of one data set version, all of them or one named split.

    - ``indices``: the sample numbers (0 to manifest.samples - 1) of these samples, in order.
    - ``labels``: the class index (int64) of each sample, or None for unlabelled data.
    - ``class_names``: index i is class i; empty when the manifest names no classes.
    """

    ref: str
    split: str | None
    samples: Sequence[Sample]
    indices: tuple[int, ...]
    labels: NDArray[np.int64] | None
    class_names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.samples)
