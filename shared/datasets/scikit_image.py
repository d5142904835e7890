"""scikit-image's sample images that ship inside its wheel: ``skimage:<image>``."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from shared.datasets.provider import BuiltinData
from shared.errors import ArtifactError

__all__ = ["COLLECTIONS", "IMAGES", "ScikitImage"]

# Only the images inside scikit-image's wheel. skimage.data offers others (eagle, brain,
# lily, ...) that it downloads with pooch: a benchmark must not depend on a network, so they
# are left out rather than fetched. skimage checks each file's sha256 before reading it.
IMAGES = (
    "astronaut",
    "brick",
    "camera",
    "cat",
    "cell",
    "chelsea",
    "clock",
    "coffee",
    "coins",
    "grass",
    "gravel",
    "hubble_deep_field",
    "immunohistochemistry",
    "microaneurysms",
    "moon",
    "page",
    "retina",
    "rocket",
    "text",
)

# Several images as one data set, in this order. `photos`: the colour photographs of
# everyday subjects, for ImageNet-style classifiers (`cat` is `chelsea` again, left out).
COLLECTIONS = MappingProxyType({"photos": ("astronaut", "chelsea", "coffee", "rocket")})


class ScikitImage:
    """One of ``IMAGES`` (a data set of one uint8 image, HxW grey or HxWx3 RGB), or a
    collection of them (``photos``). Unlabelled."""

    names: tuple[str, ...] = (*IMAGES, *COLLECTIONS)

    def load(self, name: str) -> BuiltinData:
        # Imported on use, as every provider's package: only the processes that load its
        # data should pay for importing it.
        import skimage.data

        images = []
        for image in COLLECTIONS.get(name, (name,)):
            try:
                array = np.asarray(getattr(skimage.data, image)())
            except (OSError, ModuleNotFoundError, ValueError) as exc:
                # ModuleNotFoundError: skimage would download the file with pooch, so the
                # image is not in this installation's wheel.
                raise ArtifactError(
                    f"skimage:{image}: cannot read scikit-image's sample image: {exc}"
                ) from exc
            array.setflags(write=False)
            images.append(array)
        return BuiltinData(samples=images)
