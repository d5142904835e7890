"""Post-processing: what a model returns to an answer, by a manifest's output steps.

Every step works on a whole batch at once (numpy along an axis), so a batch costs one call.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shared.manifests import (
    ArgmaxStep,
    FlattenStep,
    OutputStep,
    PluginStep,
    SoftmaxStep,
    TopKStep,
)
from shared.processing.errors import ProcessingError
from shared.processing.images import Array
from shared.processing.plugins import load_step

__all__ = ["TopK", "argmax", "postprocess", "read_labels", "softmax", "top_k"]


@dataclass(frozen=True)
class TopK:
    """The k best classes of each row, best first (ties: the lower index first)."""

    indices: Array  # int64, shape (..., k)
    scores: Array  # the values at those indices, same shape
    labels: Array | None = None  # the class names at those indices (str), same shape


def postprocess(steps: Sequence[OutputStep], output: Array) -> Array | TopK:
    """``output`` through ``steps``: an array, or ``TopK`` when the last step is topk."""
    value: Array | TopK = np.asarray(output)
    for step in steps:
        if isinstance(value, TopK):  # the schema refuses steps after topk; a hand-built list
            raise ProcessingError("topk must be the last step")
        value = _apply(step, value)
    return value


def _apply(step: OutputStep, value: Array) -> Array | TopK:
    match step:
        case SoftmaxStep(axis=axis):
            return softmax(value, axis)
        case ArgmaxStep(axis=axis):
            return argmax(value, axis)
        case FlattenStep():
            return value.reshape(value.shape[0], -1) if value.ndim > 1 else value
        case TopKStep(k=k, labels=labels):
            names = read_labels(Path(labels)) if isinstance(labels, str) else labels
            return top_k(value, k, names)
        case PluginStep(name=name, params=params):
            result = load_step(name)(value, params)
            return result if isinstance(result, TopK) else np.asarray(result)
    raise ProcessingError(f"unknown output step {step!r}")  # the union is closed


def softmax(values: Array, axis: int = -1) -> Array:
    """``exp(x - max) / sum(exp(x - max))``: subtracting the max keeps exp from overflowing."""
    x = values if np.issubdtype(values.dtype, np.floating) else values.astype(np.float64)
    exponentials = np.exp(x - x.max(axis=axis, keepdims=True))
    return np.asarray(exponentials / exponentials.sum(axis=axis, keepdims=True))


def argmax(values: Array, axis: int = -1) -> Array:
    return np.asarray(np.argmax(values, axis=axis), dtype=np.int64)


def top_k(values: Array, k: int, labels: Sequence[str] | None = None) -> TopK:
    """The ``k`` largest values of the last axis of ``values``, with their indices and labels."""
    classes = values.shape[-1] if values.ndim else 0
    if k > classes:
        raise ProcessingError(f"top-{k} asked of an output with {classes} classes")
    # A stable sort of the negated scores keeps the lower index first on ties; negating in
    # float64 also keeps unsigned integers from wrapping.
    order = np.argsort(-values.astype(np.float64), axis=-1, kind="stable")[..., :k]
    scores = np.take_along_axis(values, order, axis=-1)
    if labels is None:
        return TopK(order.astype(np.int64), scores)
    if len(labels) != classes:
        # Usually a labels file made for another model (1001 names with a background class).
        raise ProcessingError(
            f"the output has {classes} classes but there are {len(labels)} labels"
        )
    return TopK(order.astype(np.int64), scores, np.asarray(labels)[order])


@functools.lru_cache(maxsize=32)
def read_labels(path: Path) -> tuple[str, ...]:
    """Class names, one per line of a UTF-8 text file: line i (from 0) names class i.

    Surrounding spaces and trailing blank lines are ignored.
    """
    try:
        names = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise ProcessingError(f"cannot read labels file {path}: {exc}") from exc
    while names and not names[-1]:
        names.pop()
    return tuple(names)
