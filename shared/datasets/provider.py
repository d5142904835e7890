"""What a built-in data set provider is: a named source of samples inside a Python package."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

__all__ = ["BuiltinData", "Provider"]


@dataclass(frozen=True, eq=False)
class BuiltinData:
    """Every sample of a built-in data set, in its package's order, as arrays (texts, for a
    text data set).

    ``labels`` holds one class index per sample, or is None for unlabelled data.
    """

    samples: Sequence[NDArray[Any]] | Sequence[str]
    labels: NDArray[np.int64] | None = None


class Provider(Protocol):
    """Data sets shipped inside one installed Python package (``sklearn``, ``skimage``).

    A provider must never reach the network: a benchmark that depends on a download is as
    slow and as flaky as the download, and its data is no longer pinned by the package.
    """

    @property
    def names(self) -> tuple[str, ...]:
        """The data sets it offers, for ``builtin: "<provider>:<name>"``."""
        ...

    def load(self, name: str) -> BuiltinData:
        """Every sample of the data set ``name`` (one of ``names``)."""
        ...
