"""The built-in zoo: every manifest under manifests/ is valid, its files are the ones it pins,
and every model runs in the framework it names with the tensors it declares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest

from shared.artifacts import locate, verify
from shared.config import REPOSITORY_ROOT
from shared.datasets import load_dataset
from shared.manifests import (
    DatasetManifest,
    FrameworkManifest,
    ModelManifest,
    load_manifest,
    load_manifests,
    matches,
)
from shared.processing import TopK, postprocess, preprocess_batch

MANIFESTS = REPOSITORY_ROOT / "manifests"
MODEL_FILES = sorted((MANIFESTS / "models").glob("*.yaml"))
# The graphs the onnx wheel ships for its own tests: ImageNet architectures whose weights
# are constants made inside the graph.
ONNX_LIGHT = "pkg://onnx/backend/test/data/light/"
ONNX_ARCHITECTURES = {
    "bvlc-alexnet",
    "densenet121",
    "inception-v1",
    "inception-v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
}
# ONNX Runtime's names for the manifest element types the zoo uses.
ORT_TYPES = {"float32": "tensor(float)", "float16": "tensor(float16)", "int64": "tensor(int64)"}


def model(path: Path) -> ModelManifest:
    manifest = load_manifest(path)
    assert isinstance(manifest, ModelManifest)
    return manifest


def framework() -> FrameworkManifest:
    manifest = load_manifest(MANIFESTS / "frameworks" / "onnxruntime.yaml")
    assert isinstance(manifest, FrameworkManifest)
    return manifest


def session(manifest: ModelManifest) -> Any:
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # the light graphs keep unused initializers: noise here
    return onnxruntime.InferenceSession(
        str(locate(manifest.source.uri)), options, providers=["CPUExecutionProvider"]
    )


def test_every_manifest_of_the_zoo_validates_and_is_defined_once() -> None:
    refs = {(m.kind, m.ref) for m in load_manifests(MANIFESTS)}
    # squeezenet is at 1.0.1: its licence was corrected, and versions are immutable.
    versions = {name: "1.0.1" if name == "squeezenet" else "1.0.0" for name in ONNX_ARCHITECTURES}
    assert {("model", f"{name}@{v}") for name, v in versions.items()} <= refs
    assert {
        ("framework", ref)
        for ref in ("onnxruntime@1.31.1", "pytorch@2.13.0", "tensorflow@2.21.0", "opencl@1.1.0")
    } <= refs
    assert {("dataset", "digits@1.0.0"), ("dataset", "sample-photos@1.0.0")} <= refs


def test_each_kind_lives_in_its_own_folder() -> None:
    # The registry reads models from manifests/models only: a data set there would be lost.
    for folder, kind in (
        ("models", ModelManifest),
        ("frameworks", FrameworkManifest),
        ("datasets", DatasetManifest),
    ):
        assert all(isinstance(m, kind) for m in load_manifests(MANIFESTS / folder)), folder


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_every_model_file_is_there_and_is_the_one_its_manifest_pins(path: Path) -> None:
    for source in model(path).sources.values():
        verify(source)  # raises ArtifactError when missing or when its sha256 differs


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_every_onnxruntime_model_runs_once_with_the_tensors_it_declares(path: Path) -> None:
    manifest = model(path)
    assert manifest.framework.name == "onnxruntime"
    graph = session(manifest)
    declared = {spec.name: spec for spec in manifest.inputs}
    assert {i.name: (i.shape, i.type) for i in graph.get_inputs()} == {
        name: (spec.shape, ORT_TYPES[spec.element_type]) for name, spec in declared.items()
    }
    rng = np.random.default_rng(0)
    feed = {
        name: rng.standard_normal(spec.shape).astype(spec.element_type)
        for name, spec in declared.items()
    }
    outputs = graph.run([spec.name for spec in manifest.outputs], feed)
    for spec, output in zip(manifest.outputs, outputs, strict=True):
        assert output.shape == tuple(spec.shape), spec.name
        assert output.dtype == np.dtype(spec.element_type), spec.name
        assert np.isfinite(output).all(), spec.name


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_a_model_with_placeholder_weights_says_so(path: Path) -> None:
    manifest = model(path)
    if not manifest.source.uri.startswith(ONNX_LIGHT):
        pytest.skip("not one of the onnx wheel's placeholder graphs")
    assert manifest.name in ONNX_ARCHITECTURES
    assert manifest.attributes["weights"] == "untrained-placeholder"
    assert manifest.attributes["training_dataset"] == "none"
    assert "accuracy" not in manifest.attributes
    assert "untrained placeholder weights" in manifest.description


def test_the_framework_manifest_is_the_installed_onnxruntime() -> None:
    manifest = framework()
    assert (manifest.name, manifest.version) == ("onnxruntime", onnxruntime.__version__)
    providers = onnxruntime.get_available_providers()
    expected = ["cpu", *(["gpu"] if "CUDAExecutionProvider" in providers else [])]
    assert manifest.hardware == expected


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_every_model_accepts_the_framework_version_of_the_zoo(path: Path) -> None:
    manifest = model(path)
    assert matches(framework().version, manifest.framework.version)


def test_a_zoo_model_takes_the_sample_photos_through_its_own_steps() -> None:
    photos = load_manifest(MANIFESTS / "datasets" / "sample-photos.yaml")
    assert isinstance(photos, DatasetManifest)
    manifest = model(MANIFESTS / "models" / "shufflenet.yaml")  # the quickest of the zoo
    (spec,) = manifest.inputs
    graph = session(manifest)
    for photo in load_dataset(photos).samples:
        tensor = preprocess_batch(spec.steps, [photo])
        assert tensor.shape == tuple(spec.shape)
        (output,) = graph.run(None, {spec.name: tensor})
        answer = postprocess(manifest.outputs[0].steps, output)
        assert isinstance(answer, TopK)
        assert answer.indices.shape == (1, 5)
