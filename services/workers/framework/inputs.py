"""The inputs queries run on: built from a dataset's samples through the manifest's own
pre-processing, or generated from the manifest's input specification, seeded."""

from __future__ import annotations

import numpy as np

from shared import measurement
from shared.datasets import Dataset
from shared.errors import PredictorError
from shared.manifests import ModelManifest
from shared.processing import preprocess_batch

__all__ = [
    "FINGERPRINT_BATCH",
    "FINGERPRINT_SEED",
    "SYNTHETIC_SAMPLES",
    "fingerprint_inputs",
    "query_inputs",
    "query_sizes",
    "synthetic_inputs",
]

# The sample count a scenario draws from without a dataset (LoadGen's performance sample
# count too): synthetic samples are not scarce, so this only has to exceed the query sizes a
# scenario may ask for, and stay small enough for LoadGen to track each sample.
SYNTHETIC_SAMPLES = 65_536


def query_sizes(scenario: measurement.ScenarioPlan) -> set[int]:
    """Every number of samples one query of ``scenario`` takes."""
    if isinstance(scenario, measurement.BatchSweep):
        return set(scenario.batch_sizes)
    return {scenario.samples_per_query}


def query_inputs(
    manifest: ModelManifest, dataset: Dataset | None, size: int, *, seed: int
) -> dict[str, np.ndarray]:
    """One query's inputs of ``size`` samples: the dataset's first ones (repeated when it
    has fewer), pre-processed as the manifest declares, or seeded synthetic inputs."""
    if dataset is None:
        return synthetic_inputs(manifest, batch_size=size, seed=seed)
    if len(manifest.inputs) != 1:
        raise PredictorError(
            f"{manifest.ref} takes {len(manifest.inputs)} inputs; datasets feed one-input models"
        )
    spec = manifest.inputs[0]
    if spec.shape[0] not in (-1, size):
        raise PredictorError(
            f"{manifest.ref} takes batches of {spec.shape[0]} only (input {spec.name!r} has "
            f"shape {spec.shape}); the scenario asks for {size} samples a query"
        )
    samples = [dataset.samples[i % len(dataset)] for i in range(size)]
    batch = preprocess_batch(spec.steps, samples)
    return {spec.name: np.ascontiguousarray(batch, dtype=np.dtype(spec.element_type))}


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


# The fingerprint's synthetic inputs are the same for every evaluation of a model, whatever
# its scenario's seed and batch size, so that evaluations on other frameworks or hosts see
# exactly the same data and their outputs can be compared.
FINGERPRINT_SEED = 0
FINGERPRINT_BATCH = 4


def fingerprint_inputs(manifest: ModelManifest) -> dict[str, np.ndarray]:
    """Seeded synthetic inputs of a small fixed batch (the model's own, if it fixes one)."""
    first = manifest.inputs[0].shape[0]
    batch_size = first if first != -1 else FINGERPRINT_BATCH
    return synthetic_inputs(manifest, batch_size=batch_size, seed=FINGERPRINT_SEED)
