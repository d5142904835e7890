"""A model known only as a server serves it: the manifest dlscope writes for a served model
no manifest names (``--served-model NAME --tokenizer FILE``).

A server benchmarked by name needs what a manifest gives every other evaluation: the
tokenizer that makes the prompts and counts the tokens (pinned by its sha256), the context
the prompts must leave room in, and a name and version the evaluation records, so the run can
be repeated and compared like any other. So dlscope writes that manifest (framework
``endpoint``, no file of its own: the server holds the weights; ``served_as`` the name the
server knows it by) and registers it before it asks for the evaluation: the same served name,
tokenizer and context register the same manifest again, and ``dlscope run served-NAME
--framework endpoint`` repeats the run from the registry.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from shared.artifacts.digests import sha256_of
from shared.errors import ManifestError
from shared.manifests import ModelManifest, parse_manifest
from shared.manifests.model import SERVED_BY
from shared.manifests.steps import MAX_SEQUENCE
from shared.processing.text import load_tokenizer

__all__ = ["DEFAULT_CONTEXT", "PREFIX", "VERSION", "served_manifest", "served_manifest_name"]

# What the manifest's name starts with: a served model's manifest never takes the name of a
# zoo model or a registered one (``smollm2`` served stays apart from the zoo's ``smollm2``).
PREFIX = "served-"
VERSION = "1.0.0"
# The context a served model is taken to have unless told: a prompt and its answer must fit.
DEFAULT_CONTEXT = 4096
_MAX_NAME = 128


def served_manifest_name(served: str) -> str:
    """The manifest name for the model a server serves as ``served``: lower case, each run of
    other characters than letters, digits, ``.``, ``_`` and ``-`` one ``-``
    (``meta-llama/Llama-3.1-8B`` is ``served-meta-llama-llama-3.1-8b``)."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", served.lower()).strip("-._")
    if not slug:
        raise ManifestError(
            f"--served-model {served!r}: a served model's name needs a letter or a digit"
        )
    return (PREFIX + slug)[:_MAX_NAME]


def served_manifest(
    served: str, tokenizer: Path, *, context_length: int = DEFAULT_CONTEXT
) -> ModelManifest:
    """The manifest of the model a server serves as ``served``, its tokens counted by the
    Hugging Face ``tokenizer.json`` at ``tokenizer``."""
    if not tokenizer.is_file():
        raise ManifestError(f"--tokenizer {tokenizer}: no such file")
    vocabulary = load_tokenizer(str(tokenizer)).get_vocab_size()  # ProcessingError: not one
    document: dict[str, Any] = {
        "kind": "model",
        "name": served_manifest_name(served),
        "version": VERSION,
        "description": (
            f"{served}, as an OpenAI-compatible server serves it: no manifest of its own, so "
            "dlscope wrote this one (--served-model) with the tokenizer it was given"
        ),
        "task": "text-generation",
        "framework": {"name": SERVED_BY},
        "served_as": served,
        "tokenizer": {"uri": str(tokenizer.resolve()), "sha256": sha256_of(tokenizer)},
        "inputs": [
            {
                "name": "input_ids",
                "element_type": "int64",
                "shape": [1, -1],
                "steps": [{"op": "tokenize", "max_length": min(context_length, MAX_SEQUENCE)}],
            }
        ],
        "outputs": [{"name": "logits", "element_type": "float32", "shape": [-1, vocabulary]}],
        "generation": {
            "input_ids": "input_ids",
            "logits": "logits",
            "context_length": context_length,
        },
        "attributes": {"weights": "its server's (served as " + served + ")"},
    }
    manifest = parse_manifest(document, origin=f"--served-model {served}")
    assert isinstance(manifest, ModelManifest)
    return manifest
