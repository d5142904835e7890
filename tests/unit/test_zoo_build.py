"""The zoo's trained model, built here: accurate, identical in every framework, reproducible."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch

from dlscope.zoo import BuiltModel, build_digits
from dlscope.zoo.digits import DIGITS_DATASET
from dlscope.zoo.export import _torchscript_allowed
from dlscope.zoo.savedmodel import run_savedmodel
from dlscope.zoo.training import accuracy
from shared.artifacts import sha256_of
from shared.datasets import load_dataset
from shared.manifests import DatasetManifest, ModelManifest, load_manifest
from shared.processing import preprocess_batch


@pytest.fixture(scope="module")
def built(digits_zoo: list[BuiltModel]) -> dict[str, BuiltModel]:
    # Trained once for the session (tests/conftest.py); rebuilt below where that is the test.
    return {model.manifest.framework.name: model for model in digits_zoo}


@pytest.fixture(scope="module")
def test_split() -> tuple[list[object], np.ndarray]:
    manifest = load_manifest(DIGITS_DATASET)
    assert isinstance(manifest, DatasetManifest)
    dataset = load_dataset(manifest, "test")
    assert dataset.labels is not None
    return list(dataset.samples), dataset.labels


def _inputs(model: BuiltModel, samples: list[object]) -> np.ndarray:
    # Through the manifest's own steps, as a worker feeds the model.
    return np.asarray(preprocess_batch(model.manifest.inputs[0].steps, samples))


def _onnx_logits(model: BuiltModel, samples: list[object]) -> np.ndarray:
    session = onnxruntime.InferenceSession(
        str(model.manifest.source.uri), providers=["CPUExecutionProvider"]
    )
    return np.asarray(session.run(["logits"], {"input": _inputs(model, samples)})[0])


def _torch_logits(model: BuiltModel, samples: list[object]) -> np.ndarray:
    with _torchscript_allowed():
        module = torch.jit.load(str(model.manifest.source.uri))
    with torch.inference_mode():
        return np.asarray(module(torch.tensor(_inputs(model, samples))).numpy())


def _tf_logits(model: BuiltModel, samples: list[object], scratch: Path) -> np.ndarray:
    source = model.manifest.source
    assert source.archive == "tar"
    assert source.member is not None
    with tarfile.open(source.uri) as tar:
        tar.extractall(scratch, filter="data")
    return run_savedmodel(scratch / source.member, "input", "logits", _inputs(model, samples))


def test_one_model_per_framework_under_its_own_name(built: dict[str, BuiltModel]) -> None:
    # The registry keys models by (name, version): three frameworks need three names.
    assert {f: m.manifest.ref for f, m in built.items()} == {
        "onnxruntime": "digits-cnn@1.0.0",
        "pytorch": "digits-cnn-torch@1.0.0",
        "tensorflow": "digits-cnn-tf@1.0.0",
    }


def test_manifests_validate_and_pin_their_files(built: dict[str, BuiltModel]) -> None:
    for model in built.values():
        manifest = load_manifest(model.path)
        assert isinstance(manifest, ModelManifest)
        assert manifest == model.manifest
        source = Path(manifest.source.uri)
        assert source.parent == model.path.parent
        assert sha256_of(source) == manifest.source.sha256
        assert manifest.inputs[0].shape == [-1, 1, 8, 8]
        assert manifest.outputs[0].shape == [-1, 10]
        assert manifest.task == "image-classification"
        assert manifest.attributes["training_dataset"] == "digits@1.0.0 train split"
        assert manifest.attributes["seed"] == 0


def test_the_recorded_accuracy_is_what_onnxruntime_measures(
    built: dict[str, BuiltModel], test_split: tuple[list[object], np.ndarray]
) -> None:
    samples, labels = test_split
    model = built["onnxruntime"]
    recorded = model.manifest.accuracy
    assert recorded is not None
    assert recorded.dataset == "digits@1.0.0 test split"
    assert recorded.top1 is not None
    assert recorded.top1 >= 0.95
    logits = _onnx_logits(model, samples)
    assert logits.shape == (len(samples), 10)  # the whole split in one batch: dynamic batch
    assert accuracy(logits, labels, 1) == recorded.top1
    assert accuracy(logits, labels, 5) == recorded.top5
    assert built["pytorch"].manifest.accuracy == recorded
    assert built["tensorflow"].manifest.accuracy == recorded


def test_torchscript_and_onnx_compute_the_same_logits(
    built: dict[str, BuiltModel], test_split: tuple[list[object], np.ndarray]
) -> None:
    samples, labels = test_split
    from_torch = _torch_logits(built["pytorch"], samples)
    from_onnx = _onnx_logits(built["onnxruntime"], samples)
    assert np.max(np.abs(from_torch - from_onnx)) < 1e-4
    assert accuracy(from_torch, labels, 1) == accuracy(from_onnx, labels, 1)


def test_the_savedmodel_computes_the_same_logits_through_nchw_inputs(
    built: dict[str, BuiltModel], test_split: tuple[list[object], np.ndarray], tmp_path: Path
) -> None:
    # One manifest's steps feed every framework: the SavedModel takes NCHW like the others.
    samples, labels = test_split
    model = built["tensorflow"]
    assert model.manifest.inputs[0].layout == "NCHW"
    from_tf = _tf_logits(model, samples, tmp_path)
    from_onnx = _onnx_logits(built["onnxruntime"], samples)
    assert from_tf.shape == (len(samples), 10)
    assert np.max(np.abs(from_tf - from_onnx)) < 1e-4
    assert accuracy(from_tf, labels, 1) == accuracy(from_onnx, labels, 1)


def test_building_again_gives_the_same_models(built: dict[str, BuiltModel], tmp_path: Path) -> None:
    # ONNX is byte-for-byte deterministic, anywhere: a fresh folder gets the same bytes.
    again = {m.manifest.framework.name: m for m in build_digits(tmp_path)}
    assert (
        again["onnxruntime"].manifest.source.sha256 == built["onnxruntime"].manifest.source.sha256
    )
    assert again["onnxruntime"].path.read_bytes() == built["onnxruntime"].path.read_bytes()
    # torch.jit.save is not (a random serialization id), so a rebuild keeps the TorchScript
    # file already there when it holds the same weights: same manifests, same bytes.
    first = {f: m.path.read_bytes() for f, m in again.items()}
    pinned = sha256_of(Path(again["pytorch"].manifest.source.uri))
    rebuilt = {m.manifest.framework.name: m for m in build_digits(tmp_path)}
    assert {f: m.path.read_bytes() for f, m in rebuilt.items()} == first
    assert sha256_of(Path(rebuilt["pytorch"].manifest.source.uri)) == pinned

    # tf.saved_model.save is not deterministic either: the archive already there is kept.
    assert sha256_of(Path(rebuilt["tensorflow"].manifest.source.uri)) == sha256_of(
        Path(again["tensorflow"].manifest.source.uri)
    )

    # A TorchScript file that is not this model is replaced, and the manifest follows it.
    torch_file = Path(rebuilt["pytorch"].manifest.source.uri)
    shutil.copyfile(rebuilt["onnxruntime"].manifest.source.uri, torch_file)
    replaced = {m.manifest.framework.name: m for m in build_digits(tmp_path)}
    assert sha256_of(torch_file) == replaced["pytorch"].manifest.source.sha256
    assert torch_file.read_bytes() != Path(rebuilt["onnxruntime"].manifest.source.uri).read_bytes()

    # So is a SavedModel archive that is not this model (or no archive at all).
    tf_file = Path(rebuilt["tensorflow"].manifest.source.uri)
    tf_file.write_bytes(b"not a tar file")
    replaced = {m.manifest.framework.name: m for m in build_digits(tmp_path)}
    assert sha256_of(tf_file) == replaced["tensorflow"].manifest.source.sha256
    assert tarfile.is_tarfile(tf_file)
