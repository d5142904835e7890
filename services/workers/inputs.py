"""Input batches generated from a manifest's input specification, seeded for repeatability."""

from __future__ import annotations

import numpy as np

from shared.errors import PredictorError
from shared.manifests import ModelManifest

__all__ = ["synthetic_inputs"]


def synthetic_inputs(
    manifest: ModelManifest, *, batch_size: int, seed: int
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    batch: dict[str, np.ndarray] = {}
    for spec in manifest.inputs:
        shape = list(spec.shape)
        if shape[0] == -1:
            shape[0] = batch_size
        elif shape[0] != batch_size:
            raise PredictorError(
                f"{manifest.ref} takes batches of {shape[0]} only (input {spec.name!r} has shape "
                f"{spec.shape}); asked for batch size {batch_size}"
            )
        if any(d == -1 for d in shape):
            raise PredictorError(
                f"{manifest.ref}: input {spec.name!r} has an unknown dimension {spec.shape}"
            )
        dtype = np.dtype(spec.element_type)
        if dtype.kind == "f":
            batch[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            batch[spec.name] = rng.integers(0, 2, shape).astype(dtype)
        else:
            batch[spec.name] = rng.integers(0, 100, shape).astype(dtype)
    return batch
