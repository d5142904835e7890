"""Image steps on one sample: decode, resize, crop, colour conversion (numpy and Pillow).

Between steps an image is a ``Pixels``: a numpy array, channels-last (HWC) unless a layout
step moved the channels first (CHW), with a leading batch axis once samples are stacked.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image, UnidentifiedImageError

from shared.manifests import ColorMode, CropStep, ResizeMethod, ResizeStep
from shared.processing.errors import ProcessingError

__all__ = ["Pixels", "convert_color", "crop", "crop_origin", "decode", "resize", "resized_size"]

Array = npt.NDArray[Any]

_FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "area": Image.Resampling.BOX,
}


@dataclass(frozen=True)
class Pixels:
    """Image data between steps, and what is known about it."""

    array: Array
    channels_last: bool = True
    # None until a decode or color step says; three channels are then taken to be RGB.
    color: ColorMode | None = None

    @property
    def channel_axis(self) -> int:
        return -1 if self.channels_last else -3

    @property
    def height_width(self) -> tuple[int, int]:
        shape = self.array.shape
        return (shape[-3], shape[-2]) if self.channels_last else (shape[-2], shape[-1])

    @property
    def channels(self) -> int:
        return int(self.array.shape[self.channel_axis])


def decode(raw: object, color_mode: ColorMode) -> Pixels:
    """Encoded bytes, a Pillow image or a uint8 array to an HWC uint8 image in ``color_mode``.

    Pillow converts every other mode (palette, RGBA, CMYK, 16-bit) to RGB or L; alpha is
    dropped, not composited. EXIF orientation is not applied, as torchvision does not.
    """
    image: Image.Image
    if isinstance(raw, bytes | bytearray | memoryview):
        try:
            image = Image.open(io.BytesIO(raw))
            image.load()
        except (UnidentifiedImageError, OSError) as exc:
            raise ProcessingError(f"cannot decode the sample as an image: {exc}") from exc
    elif isinstance(raw, Image.Image):
        image = raw
    elif isinstance(raw, np.ndarray) and raw.dtype == np.uint8 and raw.ndim in (2, 3):
        image = Image.fromarray(raw[..., 0] if raw.ndim == 3 and raw.shape[-1] == 1 else raw)
    else:
        raise ProcessingError(
            f"decode takes encoded image bytes, a Pillow image or a uint8 HWC array, not "
            f"{_describe(raw)}"
        )
    array = np.asarray(image.convert("L" if color_mode == "GRAY" else "RGB"))
    if color_mode == "GRAY":
        array = array[..., np.newaxis]
    elif color_mode == "BGR":
        array = array[..., ::-1]
    return Pixels(np.ascontiguousarray(array), channels_last=True, color=color_mode)


def resized_size(height: int, width: int, step: ResizeStep) -> tuple[int, int]:
    """The (height, width) ``step`` resizes a ``height`` x ``width`` image to.

    With ``keep_aspect`` the shorter side becomes the size and the longer one is scaled by the
    same factor, truncated: torchvision's ``Resize(int)`` arithmetic, so sizes agree with it.
    """
    if not step.keep_aspect:
        return step.size
    target = step.size[0]
    if width <= height:
        return int(target * height / width), target
    return target, int(target * width / height)


def resize(pixels: Pixels, step: ResizeStep) -> Pixels:
    if pixels.array.ndim != 3:
        raise ProcessingError(f"resize works on one image, not an array of shape {_shape(pixels)}")
    size = resized_size(*pixels.height_width, step)
    hwc = pixels.array if pixels.channels_last else np.moveaxis(pixels.array, 0, -1)
    out = _resize_hwc(hwc, size, step.method)
    return replace(pixels, array=out if pixels.channels_last else np.moveaxis(out, -1, 0))


def _resize_hwc(hwc: Array, size: tuple[int, int], method: ResizeMethod) -> Array:
    height, width = size
    resample = _FILTERS[method]
    channels = hwc.shape[-1]
    if hwc.dtype == np.uint8 and channels in (1, 3):
        # Pillow's own 8-bit path (modes L and RGB): what torchvision does on Pillow images.
        image = Image.fromarray(hwc[..., 0] if channels == 1 else hwc)
        out = np.asarray(image.resize((width, height), resample))
        return out.reshape(height, width, channels)
    # Other types and channel counts: each channel as a 32-bit float image (Pillow mode F),
    # so no alpha premultiplication and no 8-bit rounding between channels.
    planes = [
        np.asarray(
            Image.fromarray(np.ascontiguousarray(hwc[..., c], dtype=np.float32)).resize(
                (width, height), resample
            )
        )
        for c in range(channels)
    ]
    stacked = np.stack(planes, axis=-1)
    if np.issubdtype(hwc.dtype, np.integer):
        info = np.iinfo(hwc.dtype)
        stacked = np.clip(np.rint(stacked), info.min, info.max)
    return stacked.astype(hwc.dtype)


def crop_origin(height: int, width: int, step: CropStep) -> tuple[int, int]:
    """The (top, left) corner of the window ``step`` cuts from a ``height`` x ``width`` image.

    Centred windows round half offsets to even (Python's ``round``), as torchvision does.
    """
    crop_height, crop_width = step.size
    if crop_height > height or crop_width > width:
        raise ProcessingError(
            f"cannot crop {crop_height}x{crop_width} from a {height}x{width} image: resize it first"
        )
    if step.position == "top_left":
        return 0, 0
    return round((height - crop_height) / 2.0), round((width - crop_width) / 2.0)


def crop(pixels: Pixels, step: CropStep) -> Pixels:
    """Works on one image or a batch of same-sized images, channels first or last."""
    top, left = crop_origin(*pixels.height_width, step)
    rows = slice(top, top + step.size[0])
    columns = slice(left, left + step.size[1])
    if pixels.channels_last:
        return replace(pixels, array=pixels.array[..., rows, columns, :])
    return replace(pixels, array=pixels.array[..., rows, columns])


def convert_color(pixels: Pixels, to: ColorMode) -> Pixels:
    """RGB and BGR swap channel order; GRAY is ITU-R 601-2 luma; GRAY to colour repeats it."""
    source = pixels.color or ("GRAY" if pixels.channels == 1 else "RGB")
    expected = 1 if source == "GRAY" else 3
    if pixels.channels != expected:
        raise ProcessingError(
            f"a {source} image has {expected} channel(s), this one has {pixels.channels}"
        )
    if source == to:
        return replace(pixels, color=to)
    last = pixels.array if pixels.channels_last else np.moveaxis(pixels.array, -3, -1)
    if to == "GRAY":
        out = _luma(last if source == "RGB" else last[..., ::-1])[..., np.newaxis]
    elif source == "GRAY":
        out = np.repeat(last, 3, axis=-1)
    else:
        out = last[..., ::-1]
    array = out if pixels.channels_last else np.moveaxis(out, -1, -3)
    return Pixels(np.ascontiguousarray(array), pixels.channels_last, to)


def _luma(rgb: Array) -> Array:
    if rgb.dtype == np.uint8:
        # Pillow's fixed-point L = R*299/1000 + G*587/1000 + B*114/1000, bit for bit.
        wide = rgb.astype(np.uint32)
        luma = wide[..., 0] * 19595 + wide[..., 1] * 38470 + wide[..., 2] * 7471 + 0x8000
        return (luma >> 16).astype(np.uint8)
    if np.issubdtype(rgb.dtype, np.floating):
        return np.asarray(rgb @ np.asarray([0.299, 0.587, 0.114], dtype=rgb.dtype))
    info = np.iinfo(rgb.dtype)
    luma = np.rint(rgb.astype(np.float64) @ np.asarray([0.299, 0.587, 0.114]))
    return np.asarray(np.clip(luma, info.min, info.max), dtype=rgb.dtype)


def _shape(pixels: Pixels) -> list[int]:
    return list(pixels.array.shape)


def _describe(raw: object) -> str:
    if isinstance(raw, np.ndarray):
        return f"a {raw.dtype} array of shape {list(raw.shape)}"
    return f"a {type(raw).__name__}"
