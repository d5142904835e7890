"""Checks that a tensor's steps can produce the tensor it declares, before anything runs.

A manifest whose steps end in uint8 while the model takes float32, or crop 224x224 images for
a model that takes 299x299, would fail (or, worse, be silently converted) deep inside a
framework. Walking the steps to what they produce catches that when the manifest is read. A
plugin step can change anything, so what comes before it is forgotten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from shared.manifests.steps import (
    CastStep,
    ChatTemplateStep,
    ColorStep,
    CropStep,
    DecodeStep,
    InputStep,
    LayoutStep,
    NormalizeStep,
    OutputStep,
    PluginStep,
    ResizeStep,
    TokenizeStep,
    TopKStep,
    text_steps,
)

__all__ = ["check_input_steps", "check_output_steps"]


@dataclass(frozen=True)
class _Produced:
    """What the steps so far are known to produce; None where a step made it unknown."""

    dtype: str | None = None
    size: tuple[int, int] | None = None
    channels: int | None = None
    # Raw image arrays are taken to be channels-last (HWC), as Pillow and decode give them.
    layout: str | None = "NHWC"


def _after(produced: _Produced, step: InputStep) -> _Produced:
    match step:
        case DecodeStep(color_mode=mode):
            return replace(produced, dtype="uint8", channels=1 if mode == "GRAY" else 3)
        case ResizeStep(size=size, keep_aspect=keep):
            return replace(produced, size=None if keep else size)
        case CropStep(size=size):
            return replace(produced, size=size)
        case NormalizeStep(mean=mean):
            if produced.channels is not None and len(mean) not in (1, produced.channels):
                raise ValueError(
                    f"normalize gives {len(mean)} means for images with {produced.channels} "
                    "channel(s): give one per channel, or one for all"
                )
            return replace(produced, dtype="float32")
        case LayoutStep(to=to):
            return replace(produced, layout=to)
        case ColorStep(to=to):
            return replace(produced, channels=1 if to == "GRAY" else 3)
        case CastStep(dtype=dtype):
            return replace(produced, dtype=dtype)
        case _:  # a plugin
            return _Produced(layout=None)


def _check_decode_first(steps: Sequence[InputStep]) -> None:
    seen_builtin = False
    for step in steps:
        if isinstance(step, DecodeStep) and seen_builtin:
            raise ValueError("decode must come before every other built-in step, and only once")
        seen_builtin = seen_builtin or not isinstance(step, PluginStep)


def _check_text(steps: Sequence[InputStep], *, element_type: str, shape: Sequence[int]) -> None:
    """Token ids are [batch, sequence] integers; only a cast may follow the tokenizer."""
    opening = text_steps(steps)
    if opening is None:
        raise ValueError("chat_template comes just before tokenize")
    chat, first = opening
    after = steps[2:] if chat is not None else steps[1:]
    for step in after:
        if isinstance(step, ChatTemplateStep):
            raise ValueError("chat_template comes first, just before tokenize, and only once")
        if isinstance(step, TokenizeStep):
            raise ValueError("tokenize comes first, and only once")
        if not isinstance(step, CastStep | PluginStep):
            raise ValueError(
                f"{step.op} is an image step: after tokenize only cast (or a plugin) may follow"
            )
    if len(shape) != 2:
        raise ValueError(
            f"tokenize gives [batch, sequence] but shape is {list(shape)}: write [-1, -1]"
        )
    if first.padding == "max_length" and shape[1] not in (-1, first.max_length):
        raise ValueError(
            f"tokenize pads to max_length {first.max_length} but shape is {list(shape)}"
        )
    produced = "int64"
    for step in after:
        produced = step.dtype if isinstance(step, CastStep) else element_type
    if produced != element_type:
        raise ValueError(
            f"tokenize gives int64 but element_type is {element_type}: end the steps with "
            f"{{op: cast, dtype: {element_type}}}"
        )


def check_input_steps(
    steps: Sequence[InputStep], *, element_type: str, shape: Sequence[int], layout: str | None
) -> None:
    """Raise ``ValueError`` saying what to change when ``steps`` cannot give this tensor."""
    if not steps:
        return
    if any(isinstance(step, TokenizeStep | ChatTemplateStep) for step in steps):
        if not isinstance(steps[0], TokenizeStep | ChatTemplateStep):
            raise ValueError("tokenize takes the raw text: it must be the first step")
        _check_text(steps, element_type=element_type, shape=shape)
        return
    _check_decode_first(steps)
    produced = _Produced()
    for step in steps:
        produced = _after(produced, step)
    if produced.dtype is not None and produced.dtype != element_type:
        raise ValueError(
            f"the steps produce {produced.dtype} but element_type is {element_type}: end them "
            f"with {{op: cast, dtype: {element_type}}}"
        )
    if produced.layout is None:
        return
    if layout is not None and layout != produced.layout:
        raise ValueError(
            f"the steps produce {produced.layout} but layout is {layout}: end them with "
            f"{{op: layout, to: {layout}}}"
        )
    if len(shape) != 4:
        return
    dims = dict(zip(produced.layout, shape, strict=True))
    height, width = produced.size or (None, None)
    for axis, value in (("H", height), ("W", width), ("C", produced.channels)):
        if value is not None and dims[axis] not in (-1, value):
            raise ValueError(
                f"the steps produce {_describe(produced)} but shape is {list(shape)} "
                f"({produced.layout})"
            )


def _describe(produced: _Produced) -> str:
    parts = []
    if produced.size is not None:
        parts.append(f"{produced.size[0]}x{produced.size[1]} images")
    if produced.channels is not None:
        parts.append(f"{produced.channels} channel{'s' if produced.channels > 1 else ''}")
    return " with ".join(parts)


def check_output_steps(steps: Sequence[OutputStep]) -> None:
    # top-k turns a tensor into indices, scores and labels: nothing after it has a tensor.
    for position, step in enumerate(steps):
        if isinstance(step, TopKStep) and position != len(steps) - 1:
            raise ValueError("topk must be the last step")
