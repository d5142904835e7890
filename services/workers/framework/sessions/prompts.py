"""A generative job's prompts: the texts its requests take in turn, and their token ids as
the model's own steps make them, wherever the model runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from services.workers.framework.ports import Prompts
from shared.datasets import Dataset
from shared.errors import PredictorError
from shared.manifests import ModelManifest
from shared.measurement import ScenarioPlan, check_sample_count
from shared.messages import RunEvaluation
from shared.processing import preprocess_batch
from shared.processing.text import synthetic_texts

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "SYNTHETIC_PROMPTS",
    "SYNTHETIC_PROMPT_WORDS",
    "check_context",
    "load_prompts",
    "prompt_ids",
    "prompt_origin",
    "prompt_texts",
]

# Synthetic prompts, without a data set: this many, of this many words from the model's
# vocabulary (about as many tokens), seeded; requests take them in turn.
SYNTHETIC_PROMPTS = 32
SYNTHETIC_PROMPT_WORDS = 64


def load_prompts(
    job: RunEvaluation, plan: ScenarioPlan, dataset: Dataset | None, tokenizer: Tokenizer
) -> Prompts:
    """The job's prompts, refused before anything is loaded when the scenario needs more
    samples than there are, or when one leaves no room for the output in the context."""
    texts = prompt_texts(job, dataset, tokenizer)
    check_sample_count(plan, len(texts))
    ids = prompt_ids(job.manifest, texts, tokenizer)
    for prompt in ids:
        check_context(job.manifest, prompt.shape[1], job.scenario.max_new_tokens)
    return Prompts(texts, ids, tokenizer)


def prompt_texts(job: RunEvaluation, dataset: Dataset | None, tokenizer: Tokenizer) -> list[object]:
    """The texts a generative job's requests take in turn: the data set's, or seeded ones of
    the model's vocabulary."""
    if dataset is not None:
        return list(dataset.samples)
    return list(
        synthetic_texts(
            tokenizer, SYNTHETIC_PROMPTS, SYNTHETIC_PROMPT_WORDS, seed=job.scenario.seed
        )
    )


def prompt_origin(job: RunEvaluation, dataset: Dataset | None) -> tuple[str, str]:
    """Where the parity fingerprint's first prompt came from: a description and its kind."""
    if dataset is not None:
        return f"{dataset.ref} sample {dataset.indices[0]}", "dataset"
    return f"synthetic prompt, seed {job.scenario.seed}", "synthetic"


def prompt_ids(
    manifest: ModelManifest, texts: Sequence[object], tokenizer: Tokenizer
) -> list[np.ndarray]:
    """Each text as the token ids the model's ``input_ids`` steps make of it ([1, n])."""
    spec = manifest.generation
    assert spec is not None
    ids = next(s for s in manifest.inputs if s.name == spec.input_ids)
    return [
        np.ascontiguousarray(
            preprocess_batch(
                ids.steps, [text], tokenizer=tokenizer, chat_template=spec.chat_template
            ),
            dtype=np.int64,
        )
        for text in texts
    ]


def check_context(manifest: ModelManifest, prompt_tokens: int, max_new_tokens: int) -> None:
    """Refuse a prompt of ``prompt_tokens`` that leaves no room for ``max_new_tokens`` in the
    model's context, wherever the model runs."""
    assert manifest.generation is not None
    context = manifest.generation.context_length
    if prompt_tokens + max_new_tokens > context:
        raise PredictorError(
            f"prompt of {prompt_tokens} tokens + max_new_tokens {max_new_tokens} "
            f"exceeds {manifest.ref}'s context of {context} tokens"
        )
