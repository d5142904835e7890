"""A small CNN for 8x8 digits, trained deterministically on CPU.

Determinism is what makes the zoo reproducible: the same code, data and torch build give the
same weights, so the exported files hash the same and registering them again is a no-op.
Everything that could vary is pinned for the duration of the training and restored after,
since these are process-wide torch settings that the caller may rely on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

__all__ = ["TrainingPlan", "accuracy", "digits_cnn", "predict", "train"]


@dataclass(frozen=True)
class TrainingPlan:
    """Everything that decides the weights, besides the data and the torch build."""

    seed: int = 0
    epochs: int = 30
    batch_size: int = 64
    learning_rate: float = 0.01


def digits_cnn() -> nn.Sequential:
    """[N, 1, 8, 8] float32 in, [N, 10] logits out."""
    return nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 8x8 -> 4x4
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 10),
    )


@contextlib.contextmanager
def _deterministic(seed: int) -> Iterator[None]:
    # One thread: a parallel reduction may sum in another order from one run to the next, and
    # floating-point addition is not associative. fork_rng leaves the caller's RNG untouched.
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)


def train(images: NDArray[np.float32], labels: NDArray[np.int64], plan: TrainingPlan) -> nn.Module:
    """A trained ``digits_cnn`` in eval mode; the same inputs always give the same weights."""
    with _deterministic(plan.seed):
        model = digits_cnn()
        x = torch.tensor(images)
        y = torch.tensor(labels)
        optimizer = torch.optim.Adam(model.parameters(), lr=plan.learning_rate)
        loss_of = nn.CrossEntropyLoss()
        # The shuffling has its own generator, so its order depends on the seed alone.
        order = torch.Generator().manual_seed(plan.seed)
        model.train()
        for _ in range(plan.epochs):
            shuffled = torch.randperm(len(x), generator=order)
            for start in range(0, len(x), plan.batch_size):
                batch = shuffled[start : start + plan.batch_size]
                optimizer.zero_grad()
                loss = loss_of(model(x[batch]), y[batch])
                loss.backward()
                optimizer.step()
    return model.eval()


def predict(model: nn.Module, images: NDArray[np.float32]) -> NDArray[np.float32]:
    """The model's logits for a batch, as numpy."""
    with torch.inference_mode():
        logits = model(torch.tensor(images))
    return np.asarray(logits.numpy(), dtype=np.float32)


def accuracy(logits: NDArray[np.float32], labels: NDArray[np.int64], k: int) -> float:
    """Top-``k`` accuracy: the fraction of samples whose label is among the k best scores."""
    # Stable sort on the negated scores: ties go to the lower index, as the topk step does.
    best = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    return float(np.mean(np.any(best == labels[:, np.newaxis], axis=1)))
