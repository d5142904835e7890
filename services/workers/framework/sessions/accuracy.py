"""Accuracy of a model on a labelled dataset: the samples go through the model's declared
pre-processing (the same code for every framework), the scores are ranked, the labels judge."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from services.workers.framework.sessions.inputs import sample_inputs
from shared.datasets import Dataset
from shared.errors import PredictorError
from shared.manifests import ModelManifest
from shared.messages import AccuracyMeasurement

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["batches", "measure_accuracy"]

Predict = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


def batches(
    manifest: ModelManifest,
    dataset: Dataset,
    batch_size: int,
    tokenizer: Tokenizer | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """The dataset, pre-processed and cut into batches the model's inputs take, one batch at
    a time (a large dataset is never held pre-processed in memory). A model with a fixed
    batch dimension gets exactly that many samples (the last batch padded)."""
    first = manifest.inputs[0].shape[0]
    size = first if first != -1 else batch_size
    for start in range(0, len(dataset), size):
        chunk = list(dataset.samples[start : start + size])
        chunk += [chunk[-1]] * (size - len(chunk))  # padding, ignored when scoring
        yield sample_inputs(manifest, chunk, tokenizer)


def measure_accuracy(
    predict: Predict,
    manifest: ModelManifest,
    dataset: Dataset,
    inputs: Iterable[dict[str, np.ndarray]],
) -> AccuracyMeasurement:
    """Top-1 and top-5 of ``manifest``'s first output over ``inputs`` (from ``batches``)."""
    if dataset.labels is None:
        raise PredictorError(f"dataset {dataset.ref} has no labels: accuracy needs them")
    top1 = top5 = 0
    seen = 0
    for batch in inputs:
        scores = np.asarray(predict(batch)[0])
        scores = scores.reshape(scores.shape[0], -1)[: len(dataset) - seen]
        labels = dataset.labels[seen : seen + len(scores)]
        # A stable sort: ties keep the lower class first, the same on every framework.
        ranked = np.argsort(-scores.astype(np.float64), axis=1, kind="stable")[:, :5]
        top1 += int((ranked[:, 0] == labels).sum())
        top5 += int((ranked == labels[:, None]).any(axis=1).sum())
        seen += len(scores)
    return AccuracyMeasurement(
        top1=top1 / seen, top5=top5 / seen, samples=seen, dataset=dataset.ref, split=dataset.split
    )
