"""Loading the samples a dataset manifest describes, checked against what it declares."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shared.datasets.builtin import load_builtin
from shared.datasets.dataset import Dataset, Sample
from shared.datasets.encoding import encode_image
from shared.errors import ArtifactError
from shared.manifests import DatasetManifest, SplitRange
from shared.processing import read_labels

__all__ = ["load_dataset", "split_indices"]


def load_dataset(manifest: DatasetManifest, split: str | None = None) -> Dataset:
    """The samples of ``manifest``: every one, or those of the split named ``split``.

    Samples come in the order of their numbers (a split given as a list: in the list's
    order), as arrays or, when ``element.encoding`` is set, as the bytes of image files.
    ``ArtifactError`` when the data cannot be loaded or differs from what the manifest
    declares (count, shape, element type): a manifest that describes other data than it
    gets would make every result computed on it wrong.
    """
    builtin = manifest.source.builtin
    if builtin is None:
        # A file source says where the bytes are, but not how samples are laid out in them:
        # that needs a format the schema does not describe yet.
        raise ArtifactError(
            f"{manifest.ref}: only built-in data sets (source: {{builtin: '<provider>:<name>'}}) "
            f"can be loaded so far, not {manifest.source.uri}"
        )
    indices = split_indices(manifest, split)
    data = load_builtin(builtin)
    if len(data.samples) != manifest.samples:
        raise ArtifactError(
            f"{manifest.ref}: the manifest declares {manifest.samples} samples but {builtin} "
            f"has {len(data.samples)}"
        )
    samples = tuple(_as_declared(manifest, i, data.samples[i]) for i in indices)
    labels = None
    if data.labels is not None:
        labels = data.labels[list(indices)].astype(np.int64)
        labels.setflags(write=False)
    class_names = _class_names(manifest)
    if labels is not None and class_names and labels.size:
        bad = labels[(labels < 0) | (labels >= len(class_names))]
        if bad.size:
            raise ArtifactError(
                f"{manifest.ref}: label {int(bad[0])} has no class name "
                f"(the manifest names {len(class_names)} classes, 0 to {len(class_names) - 1})"
            )
    return Dataset(
        ref=manifest.ref,
        split=split,
        samples=samples,
        indices=indices,
        labels=labels,
        class_names=class_names,
    )


def split_indices(manifest: DatasetManifest, split: str | None) -> tuple[int, ...]:
    """The sample numbers of ``split`` (every sample for None), in order."""
    if split is None:
        return tuple(range(manifest.samples))
    chosen = manifest.splits.get(split)
    if chosen is None:
        splits = ", ".join(manifest.splits) or "none"
        raise ArtifactError(f"{manifest.ref} has no split {split!r} (splits: {splits})")
    if isinstance(chosen, SplitRange):
        return tuple(range(chosen.start, chosen.stop))
    return tuple(chosen)


def _as_declared(manifest: DatasetManifest, number: int, array: NDArray[Any] | str) -> Sample:
    element = manifest.element
    if isinstance(array, str) or element.encoding == "text":
        if not isinstance(array, str) or element.encoding != "text":
            kind = "a text" if isinstance(array, str) else "an array"
            raise ArtifactError(
                f"{manifest.ref}: sample {number} is {kind} but the manifest declares "
                f"{'a text' if element.encoding == 'text' else 'arrays or images'}"
            )
        return array
    if element.shape is not None and not _fits(array.shape, element.shape):
        raise ArtifactError(
            f"{manifest.ref}: sample {number} has shape {list(array.shape)} but the manifest "
            f"declares {element.shape}"
        )
    if element.encoding is not None:
        return encode_image(array, element.encoding)
    if array.dtype != np.dtype(element.element_type):
        # Refused rather than converted: a conversion would change the data (float64 to
        # float32 rounds) while the manifest claims to describe it as it is.
        raise ArtifactError(
            f"{manifest.ref}: sample {number} is {array.dtype} but the manifest declares "
            f"{element.element_type}"
        )
    return array


def _fits(shape: Sequence[int], declared: Sequence[int]) -> bool:
    # -1 is a dimension that varies from sample to sample (the size of a photograph).
    return len(shape) == len(declared) and all(
        want in (-1, got) for got, want in zip(shape, declared, strict=True)
    )


def _class_names(manifest: DatasetManifest) -> tuple[str, ...]:
    if manifest.labels is None:
        return ()
    if isinstance(manifest.labels, str):
        return read_labels(Path(manifest.labels))
    return tuple(manifest.labels)
