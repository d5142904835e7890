"""scikit-learn's bundled image data set: ``sklearn:digits``."""

from __future__ import annotations

import numpy as np

from shared.datasets.provider import BuiltinData

__all__ = ["ScikitLearn"]


class ScikitLearn:
    """``digits``: 1 797 greyscale 8x8 images (float64 counts from 0 to 16), labels 0 to 9.

    The data is a file inside scikit-learn's wheel, read by ``sklearn.datasets.load_digits``;
    scikit-learn's other loaders that download (``fetch_*``) are deliberately not offered.
    """

    names: tuple[str, ...] = ("digits",)

    def load(self, name: str) -> BuiltinData:
        # Imported on use: scikit-learn takes about a second to import, and only the
        # processes that load this data set should pay for it.
        from sklearn.datasets import load_digits  # type: ignore[import-untyped]

        bunch = load_digits()
        images = np.asarray(bunch.images)
        # Read-only, so a consumer that changes a sample in place fails rather than silently
        # altering the data set every later sample shares memory with.
        images.setflags(write=False)
        labels = np.asarray(bunch.target, dtype=np.int64)
        labels.setflags(write=False)
        return BuiltinData(samples=list(images), labels=labels)
