"""Pre-processing: raw samples to the tensor a model takes, by a manifest's input steps.

Steps run in the order written. Image steps (decode, resize, crop) run per sample, since
samples may differ in size until they are resized and cropped; the steps after the last of
them that work on whole arrays (normalize, layout, color, cast) run once on the stacked batch.
Both paths give the same values, bit for bit. A text model's steps start with ``tokenize``,
which turns the whole batch of texts into one [batch, sequence] tensor (``text``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from shared.manifests import (
    CastStep,
    ColorStep,
    CropStep,
    DecodeStep,
    InputStep,
    LayoutStep,
    NormalizeStep,
    PluginStep,
    ResizeStep,
    text_steps,
)
from shared.processing.errors import ProcessingError
from shared.processing.images import Array, Pixels, convert_color, crop, decode, resize
from shared.processing.plugins import load_step
from shared.processing.tensors import cast, normalize, to_layout
from shared.processing.text import render_chat, tokenize

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["batch", "preprocess", "preprocess_batch"]

_BATCHWISE = (NormalizeStep, LayoutStep, ColorStep, CastStep)


def preprocess(steps: Sequence[InputStep], raw: object) -> Array:
    """One sample through ``steps``, without a batch axis (``layout: NCHW`` gives CHW).

    ``raw`` is encoded image bytes, a Pillow image, or an HWC (or HW) array.
    """
    return _finish(_run(steps, raw))


def preprocess_batch(
    steps: Sequence[InputStep],
    raws: Iterable[object],
    *,
    tokenizer: Tokenizer | None = None,
    chat_template: str | None = None,
) -> Array:
    """Several samples through ``steps``, stacked on a new first (batch) axis; ``tokenizer``
    is the model's, for steps that start with ``tokenize``, and ``chat_template`` its chat
    template, for a ``chat_template`` step."""
    if text_steps(steps) is not None:
        return _text_batch(steps, list(raws), tokenizer, chat_template)
    first_batchwise = len(steps)
    while first_batchwise > 0 and isinstance(steps[first_batchwise - 1], _BATCHWISE):
        first_batchwise -= 1
    samples = [_pixels(_run(steps[:first_batchwise], raw)) for raw in raws]
    if not samples:
        raise ProcessingError("a batch needs at least one sample")
    layouts = {(s.channels_last, s.color) for s in samples}
    if len(layouts) > 1:
        raise ProcessingError("the samples of a batch differ in channel order or colour mode")
    stacked = Pixels(batch([s.array for s in samples]), samples[0].channels_last, samples[0].color)
    return _finish(_run(steps[first_batchwise:], stacked))


def _text_batch(
    steps: Sequence[InputStep],
    texts: Sequence[object],
    tokenizer: Tokenizer | None,
    chat_template: str | None,
) -> Array:
    opening = text_steps(steps)
    assert opening is not None
    chat, first = opening
    if tokenizer is None:
        raise ProcessingError("tokenize needs the model's tokenizer, and none was given")
    if chat is not None:
        if chat_template is None:
            raise ProcessingError("chat_template needs the model's chat template, and it has none")
        texts = [render_chat(chat_template, text, chat) for text in texts]
    tensor = tokenize(first, texts, tokenizer)
    for step in steps[2 if chat is not None else 1 :]:  # only these may follow tokenize
        match step:
            case CastStep():
                tensor = cast(tensor, step)
            case PluginStep(name=name, params=params):
                tensor = np.asarray(load_step(name)(tensor, params))
            case _:
                raise ProcessingError(f"{step.op} cannot follow tokenize")
    return np.ascontiguousarray(tensor)


def batch(samples: Sequence[Array]) -> Array:
    """Same-shaped, same-typed samples stacked on a new first axis."""
    if not samples:
        raise ProcessingError("a batch needs at least one sample")
    kinds = {(tuple(s.shape), s.dtype) for s in samples}
    if len(kinds) > 1:
        found = ", ".join(sorted(f"{list(shape)} {dtype}" for shape, dtype in kinds))
        raise ProcessingError(
            f"the samples of a batch must have one shape and type; found {found}: resize and "
            "crop them to one size"
        )
    return np.stack(samples)


def _run(steps: Sequence[InputStep], value: object) -> object:
    for step in steps:
        value = _apply(step, value)
    return value


def _apply(step: InputStep, value: object) -> object:
    match step:
        case DecodeStep(color_mode=mode):
            return decode(value.array if isinstance(value, Pixels) else value, mode)
        case PluginStep(name=name, params=params):
            return _plugged(value, load_step(name)(_unwrapped(value), params))
        case ResizeStep():
            return resize(_pixels(value), step)
        case CropStep():
            return crop(_pixels(value), step)
        case NormalizeStep():
            return normalize(_pixels(value), step)
        case LayoutStep():
            return to_layout(_pixels(value), step)
        case ColorStep(to=to):
            return convert_color(_pixels(value), to)
        case CastStep():
            pixels = _pixels(value)
            return Pixels(cast(pixels.array, step), pixels.channels_last, pixels.color)
    raise ProcessingError(f"unknown input step {step!r}")  # the union is closed


def _pixels(value: object) -> Pixels:
    if isinstance(value, Pixels):
        return value
    if isinstance(value, Image.Image):
        color = {"RGB": "RGB", "L": "GRAY"}.get(value.mode)
        return Pixels(_hwc(np.asarray(value)), True, color)  # type: ignore[arg-type]
    if isinstance(value, np.ndarray) and value.ndim in (2, 3):
        return Pixels(_hwc(value))
    if isinstance(value, bytes | bytearray | memoryview):
        raise ProcessingError("the sample is encoded bytes: start the steps with {op: decode}")
    shape = f" of shape {list(value.shape)}" if isinstance(value, np.ndarray) else ""
    raise ProcessingError(f"image steps take an HWC image, not a {type(value).__name__}{shape}")


def _hwc(array: Array) -> Array:
    # A grey image read as HW gets its channel axis, so every step sees three axes.
    return array[..., np.newaxis] if array.ndim == 2 else array


def _unwrapped(value: object) -> object:
    return value.array if isinstance(value, Pixels) else value


def _plugged(before: object, after: object) -> object:
    # A plugin returns a plain array: keep what is known about it when its channels stay.
    if isinstance(before, Pixels) and isinstance(after, np.ndarray) and after.ndim >= 3:
        same = after.shape[before.channel_axis] == before.channels
        return Pixels(after, before.channels_last, before.color if same else None)
    return after


def _finish(value: object) -> Array:
    if isinstance(value, Pixels):
        return np.ascontiguousarray(value.array)
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value)
    raise ProcessingError(f"the steps end with a {type(value).__name__}, not an array")
