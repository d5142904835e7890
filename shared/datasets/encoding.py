"""Image arrays encoded as the files a dataset manifest declares (``encoding: png|jpeg``)."""

from __future__ import annotations

import io
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from PIL import Image

from shared.errors import ArtifactError

__all__ = ["JPEG_QUALITY", "encode_image"]

# Fixed, so the same array always becomes the same bytes; high, so that the JPEG artefacts
# stay small next to what a resize does to the image.
JPEG_QUALITY = 95


def encode_image(array: NDArray[Any], encoding: Literal["png", "jpeg"]) -> bytes:
    """The bytes of ``array`` (uint8, HxW grey or HxWx3 RGB) as a PNG or JPEG file.

    PNG is lossless: decoding it gives back ``array`` exactly.
    """
    if array.dtype != np.uint8 or not (
        array.ndim == 2 or (array.ndim == 3 and array.shape[2] == 3)
    ):
        raise ArtifactError(
            f"cannot encode a {array.dtype} array of shape {list(array.shape)} as {encoding}: "
            "give a uint8 image, HxW (grey) or HxWx3 (RGB)"
        )
    buffer = io.BytesIO()
    image = Image.fromarray(array)
    if encoding == "png":
        image.save(buffer, format="PNG")
    else:
        image.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()
