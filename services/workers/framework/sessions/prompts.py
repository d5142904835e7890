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
from shared.measurement.workload import WORKLOAD_ROWS, draw_lengths
from shared.messages import RunEvaluation
from shared.processing import preprocess_batch
from shared.processing.text import synthetic_texts, synthetic_texts_of

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
    samples than there are, or when one leaves no room for its output in the context."""
    texts = prompt_texts(job, dataset, tokenizer)
    check_sample_count(plan, len(texts))
    ids = prompt_ids(job.manifest, texts, tokenizer)
    scenario = job.scenario
    outputs = (
        list(scenario.replay.output_tokens)
        if scenario.replay is not None
        else None
        if scenario.output_tokens is None
        else draw_lengths(scenario.output_tokens, len(texts), seed=scenario.seed, purpose="output")
    )
    prompts = Prompts(texts, ids, tokenizer, outputs)
    for index, prompt in enumerate(ids):
        check_context(
            job.manifest,
            prompt.shape[1],
            prompts.output_length(index, scenario.max_new_tokens),
            drawn=outputs is not None,
        )
    return prompts


def prompt_texts(job: RunEvaluation, dataset: Dataset | None, tokenizer: Tokenizer) -> list[object]:
    """The texts a generative job's requests take in turn: the data set's, or seeded ones of
    the model's vocabulary: of the lengths a replayed trace gives (one a request, in its
    order) or ``input_tokens`` draws, or of 64 words (512 of them where the output lengths
    are drawn, so the draws follow their distribution)."""
    scenario = job.scenario
    if dataset is not None:
        # A job sent straight to a worker skipped the request's check.
        for field in ("input_tokens", "replay"):
            if getattr(scenario, field) is not None:
                raise PredictorError(
                    f"scenario.{field} makes synthetic prompts, and the data set gives its "
                    "own: leave one of them out"
                )
        return list(dataset.samples)
    if scenario.replay is not None:
        lengths = list(scenario.replay.input_tokens)
        return list(synthetic_texts_of(tokenizer, lengths, seed=scenario.seed))
    if scenario.input_tokens is not None:
        lengths = draw_lengths(
            scenario.input_tokens, WORKLOAD_ROWS, seed=scenario.seed, purpose="input"
        )
        return list(synthetic_texts_of(tokenizer, lengths, seed=scenario.seed))
    rows = SYNTHETIC_PROMPTS if scenario.output_tokens is None else WORKLOAD_ROWS
    return list(synthetic_texts(tokenizer, rows, SYNTHETIC_PROMPT_WORDS, seed=scenario.seed))


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


def check_context(
    manifest: ModelManifest, prompt_tokens: int, max_new_tokens: int, *, drawn: bool = False
) -> None:
    """Refuse a prompt of ``prompt_tokens`` that leaves no room for ``max_new_tokens`` in the
    model's context, wherever the model runs; ``drawn``: that length is the prompt's own,
    drawn from the scenario's ``output_tokens``."""
    assert manifest.generation is not None
    context = manifest.generation.context_length
    if prompt_tokens + max_new_tokens > context:
        asked = (
            f"an output of {max_new_tokens} tokens drawn from output_tokens"
            if drawn
            else f"max_new_tokens {max_new_tokens}"
        )
        raise PredictorError(
            f"prompt of {prompt_tokens} tokens + {asked} exceeds {manifest.ref}'s context of "
            f"{context} tokens"
        )
