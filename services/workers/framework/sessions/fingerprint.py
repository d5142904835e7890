"""The output fingerprint: what the model computed on a fixed input set, kept small.

Hashes cover dtype and shape as well as the bytes, so two arrays hash alike only when they
are the same tensor. The sample keeps the first values in C order, which for a batch of
class scores is the first samples' scores, whole.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from shared.manifests import ModelManifest
from shared.messages import FINGERPRINT_VALUES, InputSetIdentity, OutputFingerprint, OutputSample

__all__ = ["NOT_CLASSES", "input_identity", "output_fingerprint"]

# Tasks whose outputs are not class scores.
NOT_CLASSES = frozenset({"text-embedding", "text-generation"})


def input_identity(
    manifest: ModelManifest,
    inputs: Mapping[str, np.ndarray],
    *,
    kind: Literal["dataset", "synthetic"],
    description: str,
) -> InputSetIdentity:
    digest = hashlib.sha256()
    for spec in manifest.inputs:  # the manifest's order, not the dict's
        array = inputs[spec.name]
        digest.update(spec.name.encode())
        for part in _tensor(array):
            digest.update(part)
    first = inputs[manifest.inputs[0].name]
    return InputSetIdentity(
        kind=kind,
        description=description,
        batch_size=int(first.shape[0]) if first.ndim else 1,
        sha256=digest.hexdigest(),
    )


def output_fingerprint(
    manifest: ModelManifest, inputs: InputSetIdentity, outputs: Sequence[np.ndarray]
) -> OutputFingerprint:
    names = [spec.name for spec in manifest.outputs]
    # An embedding's largest value names no class: its top-1 would be noise in a comparison.
    classes = manifest.task not in NOT_CLASSES
    return OutputFingerprint(
        inputs=inputs,
        outputs=[
            _sample(names[i] if i < len(names) else f"output{i}", np.asarray(output), classes)
            for i, output in enumerate(outputs)
        ],
    )


def _sample(name: str, array: np.ndarray, classes: bool) -> OutputSample:
    digest = hashlib.sha256()
    for part in _tensor(array):
        digest.update(part)
    flat = array.reshape(-1)
    if classes and array.ndim >= 2 and array.shape[0] > 0 and array[0].size > 0:
        # argmax takes the first of equal values: the same rule on every framework.
        top1 = np.argmax(array.reshape(array.shape[0], -1), axis=1).tolist()
    else:
        top1 = []
    return OutputSample(
        name=name,
        shape=[int(d) for d in array.shape],
        dtype=str(array.dtype),
        values=flat[:FINGERPRINT_VALUES].astype(np.float64).tolist(),
        sha256=digest.hexdigest(),
        top1=[int(i) for i in top1],
    )


def _tensor(array: np.ndarray) -> tuple[bytes, bytes]:
    """What is hashed of a tensor: its dtype and shape, then its bytes in C order."""
    contiguous = np.ascontiguousarray(array)
    return f"{contiguous.dtype.str}{list(contiguous.shape)}".encode(), contiguous.tobytes()
