"""Element-wise and channel-wise steps: normalize, layout, cast.

Each works on one sample or on a stacked batch alike, so a batch is processed in one numpy
call per step rather than sample by sample.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from shared.manifests import CastStep, LayoutStep, NormalizeStep
from shared.processing.errors import ProcessingError
from shared.processing.images import Array, Pixels

__all__ = ["cast", "normalize", "to_layout"]


def normalize(pixels: Pixels, step: NormalizeStep) -> Pixels:
    """float32 ``(x / scale - mean) / std``, with mean and std along the channel axis.

    Computed in float32 in exactly this order, so every framework gets the same bits.
    """
    channels = pixels.channels
    if len(step.mean) not in (1, channels):
        raise ProcessingError(
            f"normalize has {len(step.mean)} means for an image with {channels} channels"
        )
    shape = [1] * pixels.array.ndim
    shape[pixels.channel_axis] = len(step.mean)
    mean = np.asarray(step.mean, dtype=np.float32).reshape(shape)
    std = np.asarray(step.std, dtype=np.float32).reshape(shape)
    scaled = pixels.array.astype(np.float32) / np.float32(step.scale)
    return replace(pixels, array=(scaled - mean) / std)


def to_layout(pixels: Pixels, step: LayoutStep) -> Pixels:
    """NCHW moves channels before height and width (CHW for one sample); NHWC after them."""
    channels_last = step.to == "NHWC"
    if channels_last == pixels.channels_last:
        return pixels
    source, target = (-3, -1) if channels_last else (-1, -3)
    moved = np.ascontiguousarray(np.moveaxis(pixels.array, source, target))
    return replace(pixels, array=moved, channels_last=channels_last)


def cast(array: Array, step: CastStep) -> Array:
    """To integers: rounded half to even, then clipped to the type's range (never wrapped).
    To bool: non-zero is true. To floats: numpy's conversion."""
    target = np.dtype(step.dtype)
    if target == np.bool_:
        return np.not_equal(array, 0)
    if not np.issubdtype(array.dtype, np.number) and array.dtype != np.bool_:
        raise ProcessingError(f"cannot cast a {array.dtype} array to {target}")
    if not np.issubdtype(target, np.integer) or np.can_cast(array.dtype, target, "safe"):
        return array.astype(target)
    low, high = int(np.iinfo(target).min), int(np.iinfo(target).max)
    if np.issubdtype(array.dtype, np.integer):
        # Bounds the source type cannot hold would overflow numpy's comparison.
        source = np.iinfo(array.dtype)
        return np.clip(array, max(low, source.min), min(high, source.max)).astype(target)
    return np.clip(np.rint(array), low, high).astype(target)
