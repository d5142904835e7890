"""The inputs queries run on: built from a dataset's samples through the manifest's own
pre-processing, or generated from the manifest's input specification, seeded.

A text model's inputs all come from one text through its tokenize steps (the ids, the
attention mask, ...); without a data set, its synthetic samples are seeded texts of words from
its own vocabulary, long enough to fill its ``max_length``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from shared import measurement
from shared.datasets import Dataset
from shared.errors import PredictorError
from shared.manifests import ModelManifest, text_steps
from shared.processing import preprocess_batch
from shared.processing.text import synthetic_texts

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "FINGERPRINT_BATCH",
    "FINGERPRINT_SEED",
    "SYNTHETIC_SAMPLES",
    "fingerprint_inputs",
    "query_inputs",
    "query_sizes",
    "sample_inputs",
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


def sample_inputs(
    manifest: ModelManifest, samples: Sequence[object], tokenizer: Tokenizer | None = None
) -> dict[str, np.ndarray]:
    """``samples`` through each input's steps: the one input of an image model, or every
    input of a text model (each made from the same texts)."""
    if len(manifest.inputs) != 1 and not manifest.tokenized:
        raise PredictorError(
            f"{manifest.ref} takes {len(manifest.inputs)} inputs; datasets feed one-input models "
            "and text models (whose inputs all come from tokenize steps)"
        )
    if manifest.tokenized and tokenizer is None:
        raise PredictorError(f"{manifest.ref} takes text and no tokenizer was given")
    template = None if manifest.generation is None else manifest.generation.chat_template
    return {
        spec.name: np.ascontiguousarray(
            preprocess_batch(spec.steps, samples, tokenizer=tokenizer, chat_template=template),
            dtype=np.dtype(spec.element_type),
        )
        for spec in manifest.inputs
    }


def query_inputs(
    manifest: ModelManifest,
    dataset: Dataset | None,
    size: int,
    *,
    seed: int,
    tokenizer: Tokenizer | None = None,
) -> dict[str, np.ndarray]:
    """One query's inputs of ``size`` samples: the dataset's first ones (repeated when it
    has fewer), pre-processed as the manifest declares, or seeded synthetic inputs."""
    if dataset is None:
        return synthetic_inputs(manifest, batch_size=size, seed=seed, tokenizer=tokenizer)
    spec = manifest.inputs[0]
    if spec.shape[0] not in (-1, size):
        raise PredictorError(
            f"{manifest.ref} takes batches of {spec.shape[0]} only (input {spec.name!r} has "
            f"shape {spec.shape}); the scenario asks for {size} samples a query"
        )
    samples = [dataset.samples[i % len(dataset)] for i in range(size)]
    inputs = sample_inputs(manifest, samples, tokenizer)
    _check_fits(manifest, dataset, inputs)
    return inputs


def _check_fits(manifest: ModelManifest, dataset: Dataset, inputs: dict[str, np.ndarray]) -> None:
    """Refused before the model loads: a dataset whose samples, through the model's own
    pre-processing, do not have the shape its input takes (an 8x8 digit fed to a 224x224
    image classifier), rather than the framework's own multi-line error mid-run."""
    for spec in manifest.inputs:
        got = inputs[spec.name].shape[1:]
        wanted = spec.shape[1:]
        if len(got) == len(wanted) and all(w in (-1, g) for w, g in zip(wanted, got, strict=True)):
            continue
        raw = getattr(dataset.samples[0], "shape", None)
        fed = list(got)
        shown = f"{list(raw)} ({fed} as fed to it)" if raw is not None and list(raw) != fed else fed
        steps = " after the model's pre-processing" if spec.steps else ""
        raise PredictorError(
            f"dataset {dataset.ref} does not fit {manifest.ref}: its samples are {shown}"
            f"{steps}, and its input {spec.name!r} takes samples of {list(wanted)} (shape "
            f"{list(spec.shape)} with the batch); pick a dataset of that shape for its task "
            f"({manifest.task}), or leave out --dataset to run on synthetic inputs"
        )


def _synthetic_text(
    manifest: ModelManifest, batch_size: int, seed: int, tokenizer: Tokenizer | None
) -> dict[str, np.ndarray]:
    if tokenizer is None:
        raise PredictorError(f"{manifest.ref} takes text and no tokenizer was given")
    longest = max(
        opening[1].max_length
        for spec in manifest.inputs
        if (opening := text_steps(spec.steps)) is not None
    )
    return sample_inputs(
        manifest, synthetic_texts(tokenizer, batch_size, longest, seed=seed), tokenizer
    )


def synthetic_inputs(
    manifest: ModelManifest, *, batch_size: int, seed: int, tokenizer: Tokenizer | None = None
) -> dict[str, np.ndarray]:
    first = manifest.inputs[0].shape[0]
    if manifest.tokenized and first in (-1, batch_size):
        return _synthetic_text(manifest, batch_size, seed, tokenizer)
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


def fingerprint_inputs(
    manifest: ModelManifest, tokenizer: Tokenizer | None = None
) -> dict[str, np.ndarray]:
    """Seeded synthetic inputs of a small fixed batch (the model's own, if it fixes one)."""
    first = manifest.inputs[0].shape[0]
    batch_size = first if first != -1 else FINGERPRINT_BATCH
    return synthetic_inputs(
        manifest, batch_size=batch_size, seed=FINGERPRINT_SEED, tokenizer=tokenizer
    )
