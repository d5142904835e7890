"""Declarative pre- and post-processing steps: data, never code.

Each step is a mapping tagged by ``op``. Input steps turn one raw sample (encoded image bytes,
an image array, or a text) into the tensor a model takes; output steps turn what a model
returns into an answer. ``shared.processing`` implements every op once, so each framework is fed
identically. The semantics (formulas, rounding, order) are specified in docs/manifests.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BeforeValidator,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from shared.inputs import MAX_ITEMS
from shared.manifests.fields import ElementType, Labels, Strict, is_loading, labels_file
from shared.manifests.plugins import STEP_GROUP, installed_steps

__all__ = [
    "INPUT_OPS",
    "OUTPUT_OPS",
    "ArgmaxStep",
    "CastStep",
    "ChatTemplateStep",
    "ColorMode",
    "ColorStep",
    "CropStep",
    "DecodeStep",
    "FlattenStep",
    "InputStep",
    "LayoutStep",
    "NormalizeStep",
    "OutputStep",
    "PluginStep",
    "ResizeMethod",
    "ResizeStep",
    "SoftmaxStep",
    "TokenizeStep",
    "TopKStep",
    "text_steps",
]

ColorMode = Literal["RGB", "BGR", "GRAY"]
# The longest token sequence a tokenize step may ask for: far above any model's context here,
# and low enough that a typo (a length in characters, say) is refused rather than allocated.
MAX_SEQUENCE = 32_768
ResizeMethod = Literal["bilinear", "nearest", "bicubic", "area"]


def _square(value: Any) -> Any:
    # `size: 224` is shorthand for `size: [224, 224]`.
    return (value, value) if isinstance(value, int) and not isinstance(value, bool) else value


# [height, width], in pixels.
Size = Annotated[tuple[PositiveInt, PositiveInt], BeforeValidator(_square)]


class DecodeStep(Strict):
    """Encoded bytes (PNG, JPEG, ... as Pillow reads them) to an HWC uint8 image."""

    op: Literal["decode"] = "decode"
    color_mode: ColorMode = "RGB"


class ResizeStep(Strict):
    """Resample to ``size`` ([height, width]); with ``keep_aspect`` the shorter side becomes
    ``size`` and the longer one keeps the aspect ratio, truncated (as torchvision's Resize)."""

    op: Literal["resize"] = "resize"
    size: Size
    method: ResizeMethod = "bilinear"
    keep_aspect: bool = False

    @model_validator(mode="after")
    def _one_length(self) -> ResizeStep:
        if self.keep_aspect and self.size[0] != self.size[1]:
            raise ValueError(
                "keep_aspect scales the shorter side to one length: give size as one number"
            )
        return self


class CropStep(Strict):
    """Cut a ``size`` ([height, width]) window, centred or from the top-left corner."""

    op: Literal["crop"] = "crop"
    size: Size
    position: Literal["center", "top_left"] = "center"


class NormalizeStep(Strict):
    """float32 ``(x / scale - mean) / std`` per channel (one value applies to every channel)."""

    op: Literal["normalize"] = "normalize"
    mean: list[float] = Field(min_length=1, max_length=MAX_ITEMS)
    std: list[float] = Field(min_length=1, max_length=MAX_ITEMS)
    scale: float = Field(default=1.0, gt=0)

    @model_validator(mode="after")
    def _per_channel(self) -> NormalizeStep:
        if len(self.mean) != len(self.std):
            raise ValueError(
                f"mean has {len(self.mean)} values but std has {len(self.std)}: give one per "
                "channel, or one for every channel"
            )
        if any(s <= 0 for s in self.std):
            raise ValueError("every std must be positive")
        return self


class LayoutStep(Strict):
    """Move the channel axis: NCHW puts it before height and width, NHWC after them."""

    op: Literal["layout"] = "layout"
    to: Literal["NCHW", "NHWC"]


class ColorStep(Strict):
    """Convert between colour modes (GRAY uses ITU-R 601-2 luma, as Pillow)."""

    op: Literal["color"] = "color"
    to: ColorMode


class CastStep(Strict):
    """Change the element type; to integers, values are rounded and clipped to the range."""

    op: Literal["cast"] = "cast"
    dtype: ElementType


class TokenizeStep(Strict):
    """A text to token ids with the model's tokenizer (the manifest's ``tokenizer`` file), as
    int64 [batch, sequence]: the ``ids``, the ``attention_mask`` (1 for a token, 0 for padding)
    or the ``type_ids`` (the segment of each token). A text longer than ``max_length`` tokens
    is truncated the tokenizer's way (its special tokens kept); shorter ones are padded with
    ``pad_id`` (0 in the mask) to the batch's longest, or to ``max_length``."""

    op: Literal["tokenize"] = "tokenize"
    take: Literal["ids", "attention_mask", "type_ids"] = "ids"
    max_length: PositiveInt = Field(le=MAX_SEQUENCE)
    padding: Literal["longest", "max_length"] = "longest"
    pad_id: NonNegativeInt = 0


class ChatTemplateStep(Strict):
    """A text as one user message of a chat, in the model's own chat template
    (``generation.chat_template``), with an optional system message first and the opening of
    the assistant's turn after (``add_generation_prompt``). Comes just before tokenize."""

    op: Literal["chat_template"] = "chat_template"
    system: str | None = None
    add_generation_prompt: bool = True


class PluginStep(Strict):
    """A step installed by the operator under the ``dlscope.steps`` entry-point group."""

    op: Literal["plugin"] = "plugin"
    name: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _installed(cls, value: str, info: ValidationInfo) -> str:
        # Checked when a manifest file is read, so a typo fails at registration rather than in
        # the middle of an evaluation; a received manifest is checked again where it runs.
        if is_loading(info):
            installed = sorted(installed_steps())
            if value not in installed:
                raise ValueError(
                    f"no step plugin {value!r} is installed in entry-point group {STEP_GROUP!r} "
                    f"(installed: {', '.join(installed) or 'none'})"
                )
        return value


class SoftmaxStep(Strict):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``."""

    op: Literal["softmax"] = "softmax"
    axis: int = -1


class ArgmaxStep(Strict):
    """The index of the largest value along ``axis`` (the first one on ties)."""

    op: Literal["argmax"] = "argmax"
    axis: int = -1


class FlattenStep(Strict):
    """Reshape to (batch, everything else), e.g. [N, 1000, 1, 1] to [N, 1000]."""

    op: Literal["flatten"] = "flatten"


class TopKStep(Strict):
    """The ``k`` largest values of the last axis, best first, with their indices and labels.

    ``labels`` is a list of class names (index i is class i) or the path of a UTF-8 text file
    with one name per line, relative to the manifest.
    """

    op: Literal["topk"] = "topk"
    k: PositiveInt = 5
    labels: Labels | None = None

    _labels = field_validator("labels")(labels_file)


_INPUT = (
    DecodeStep
    | ResizeStep
    | CropStep
    | NormalizeStep
    | LayoutStep
    | ColorStep
    | CastStep
    | TokenizeStep
    | ChatTemplateStep
    | PluginStep
)
_OUTPUT = SoftmaxStep | ArgmaxStep | FlattenStep | TopKStep | PluginStep
InputStep = Annotated[_INPUT, Field(discriminator="op")]
OutputStep = Annotated[_OUTPUT, Field(discriminator="op")]

# The ops each list accepts, in the order the error messages and docs list them.
INPUT_OPS: tuple[str, ...] = tuple(c.model_fields["op"].default for c in get_args(_INPUT))
OUTPUT_OPS: tuple[str, ...] = tuple(c.model_fields["op"].default for c in get_args(_OUTPUT))


def text_steps(steps: Sequence[InputStep]) -> tuple[ChatTemplateStep | None, TokenizeStep] | None:
    """A text input's opening steps, ``[chat_template?, tokenize]``; None for an input that
    does not start with them (an image's, a cache's)."""
    chat = steps[0] if steps and isinstance(steps[0], ChatTemplateStep) else None
    rest = steps[1:] if chat is not None else steps
    if rest and isinstance(rest[0], TokenizeStep):
        return chat, rest[0]
    return None
