"""``digits-cnn``: a small CNN trained on scikit-learn's digits, for ONNX Runtime, PyTorch
and TensorFlow.

The zoo's one model whose accuracy is real: trained here, in seconds, on the ``train`` split
of ``digits@1.0.0``, measured on its ``test`` split, and exported three times from the same
weights. The registry keys models by (name, version) alone, so the exports are three models:
``digits-cnn`` (ONNX, for onnxruntime), ``digits-cnn-torch`` (TorchScript, for pytorch) and
``digits-cnn-tf`` (a SavedModel in a tar file, for tensorflow). Each export is checked against
torch before its manifest is written.
"""

from __future__ import annotations

import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import torch
from numpy.typing import NDArray

from dlscope.zoo.export import OPSET, export_onnx, export_torchscript, write_manifest
from dlscope.zoo.savedmodel import export_savedmodel, run_savedmodel, tensorflow_version
from dlscope.zoo.training import TrainingPlan, accuracy, predict, train
from shared.artifacts import sha256_of
from shared.config import REPOSITORY_ROOT
from shared.datasets import Dataset, load_dataset
from shared.errors import ArtifactError
from shared.manifests import (
    DatasetManifest,
    FrameworkName,
    InputStep,
    LayoutStep,
    ModelManifest,
    NormalizeStep,
    load_manifest,
)
from shared.processing import preprocess_batch

__all__ = ["DIGITS_MODELS", "BuiltModel", "build_digits"]

DIGITS_DATASET = REPOSITORY_ROOT / "manifests" / "datasets" / "digits.yaml"
VERSION = "1.0.0"
INPUT, OUTPUT = "input", "logits"
# (model name, framework, file): one registry name per export, as (name, version) is the key.
DIGITS_MODELS: tuple[tuple[str, FrameworkName, str], ...] = (
    ("digits-cnn", "onnxruntime", "digits-cnn.onnx"),
    ("digits-cnn-torch", "pytorch", "digits-cnn.pt"),
    ("digits-cnn-tf", "tensorflow", "digits-cnn.savedmodel.tar"),
)
# The SavedModel's folder inside its tar file.
SAVEDMODEL = "digits-cnn-tf"


def _framework_versions() -> dict[str, str]:
    """Which framework versions can run the files: opset 18 needs onnxruntime 1.14;
    TorchScript and SavedModels load in the version that saved them and newer ones."""
    return {
        "onnxruntime": ">=1.14",
        "pytorch": f">={torch.__version__.split('+')[0]}",
        "tensorflow": f">={tensorflow_version()}",
    }


# Pixel values are counts from 0 to 16: scaled to [0, 1], one channel first (NCHW).
STEPS: list[InputStep] = [NormalizeStep(mean=[0.0], std=[1.0], scale=16.0), LayoutStep(to="NCHW")]
# Frameworks may order their float sums differently: logits agree to about 1e-6.
LOGIT_TOLERANCE = 1e-4


@dataclass(frozen=True)
class BuiltModel:
    """One model of the zoo, built: its manifest (as read back) and where it lies."""

    manifest: ModelManifest
    path: Path

    @property
    def top1(self) -> float:
        return float(self.manifest.attributes["accuracy"]["top1"])

    @property
    def top5(self) -> float:
        return float(self.manifest.attributes["accuracy"]["top5"])


def _tensors(dataset: Dataset) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    # The manifest's own steps, as every framework's worker will run them: the model is
    # trained on exactly the tensors it is later benchmarked with.
    assert dataset.labels is not None, "digits is labelled"
    images = np.asarray(preprocess_batch(STEPS, dataset.samples), dtype=np.float32)
    return images, dataset.labels


def _check(
    path: Path,
    framework: str,
    logits: NDArray[np.float32],
    labels: NDArray[np.int64],
    expected: NDArray[Any],
) -> None:
    """Refuse an export that does not compute what the torch model does."""
    difference = float(np.max(np.abs(logits - expected)))
    if difference >= LOGIT_TOLERANCE:
        raise ArtifactError(
            f"{path}: {framework}'s logits differ from torch's by up to {difference:.2g} "
            f"(tolerance {LOGIT_TOLERANCE:g})"
        )
    if accuracy(logits, labels, 1) != accuracy(expected, labels, 1):
        raise ArtifactError(f"{path}: {framework}'s top-1 accuracy differs from torch's")


def _onnx_logits(path: Path, images: NDArray[np.float32]) -> NDArray[np.float32]:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(session.run([OUTPUT], {INPUT: images})[0], dtype=np.float32)


def _savedmodel_logits(archive: Path, images: NDArray[np.float32]) -> NDArray[np.float32]:
    with tempfile.TemporaryDirectory(prefix="dlscope-check-") as scratch:
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        logits = run_savedmodel(Path(scratch) / SAVEDMODEL, INPUT, OUTPUT, images)
    return np.asarray(logits, dtype=np.float32)


def _source(file: Path) -> dict[str, Any]:
    # Relative to the manifest, so the folder can move.
    source = {"uri": file.name, "sha256": sha256_of(file)}
    if file.name.endswith(".tar"):
        return {**source, "archive": "tar", "member": SAVEDMODEL}
    return source


def _manifest(
    name: str, framework: str, version: str, file: Path, attributes: dict[str, Any]
) -> dict[str, Any]:
    return {
        "kind": "model",
        "name": name,
        "version": VERSION,
        "description": (
            "A small CNN (two 3x3 convolutions, 8 and 16 channels, max pooling, a linear "
            "layer) that classifies 8x8 greyscale handwritten digits. Built by "
            "`dlscope zoo build`: trained deterministically on the digits@1.0.0 train split."
        ),
        "license": "CC-BY-4.0",  # the weights derive from the data set, under CC-BY-4.0
        "task": "image-classification",
        "framework": {"name": framework, "version": version},
        "inputs": [
            {
                "name": INPUT,
                "element_type": "float32",
                "shape": [-1, 1, 8, 8],
                "layout": "NCHW",
                "steps": [step.model_dump(mode="json") for step in STEPS],
            }
        ],
        "outputs": [{"name": OUTPUT, "element_type": "float32", "shape": [-1, 10]}],
        "source": _source(file),
        "attributes": attributes,
    }


def build_digits(
    out_dir: Path, *, dataset_manifest: Path = DIGITS_DATASET, plan: TrainingPlan | None = None
) -> list[BuiltModel]:
    """Train, check and export ``digits-cnn`` into ``out_dir``; write and read back its manifests.

    Building again with the same torch gives the same weights: the ONNX file is byte for byte
    the same, and the TorchScript file already there is kept (see ``dlscope.zoo.export``), so
    the manifests pin the same sha256 and registering them again changes nothing.
    """
    plan = plan or TrainingPlan()
    dataset = load_manifest(dataset_manifest)
    if not isinstance(dataset, DatasetManifest):
        raise ArtifactError(f"{dataset_manifest}: a {dataset.kind} manifest, not a dataset")
    train_x, train_y = _tensors(load_dataset(dataset, "train"))
    test_x, test_y = _tensors(load_dataset(dataset, "test"))

    model = train(train_x, train_y, plan)
    logits = predict(model, test_x)
    out_dir.mkdir(parents=True, exist_ok=True)
    example = torch.tensor(test_x[:2])  # two samples: a batch of one would be specialised
    export_onnx(model, example, out_dir / "digits-cnn.onnx", input_name=INPUT, output_name=OUTPUT)
    export_torchscript(model, example, out_dir / "digits-cnn.pt")
    export_savedmodel(
        model,
        example,
        out_dir / "digits-cnn.savedmodel.tar",
        member=SAVEDMODEL,
        input_name=INPUT,
        output_name=OUTPUT,
        tolerance=LOGIT_TOLERANCE,
    )
    onnx_logits = _onnx_logits(out_dir / "digits-cnn.onnx", test_x)
    _check(out_dir / "digits-cnn.onnx", "ONNX Runtime", onnx_logits, test_y, logits)
    tf_logits = _savedmodel_logits(out_dir / "digits-cnn.savedmodel.tar", test_x)
    _check(out_dir / "digits-cnn.savedmodel.tar", "TensorFlow", tf_logits, test_y, logits)

    common = {
        "training_dataset": f"{dataset.ref} train split",
        "accuracy": {
            "top1": accuracy(logits, test_y, 1),
            "top5": accuracy(logits, test_y, 5),
            "dataset": f"{dataset.ref} test split",
        },
        "seed": plan.seed,
        "epochs": plan.epochs,
        "trained_with": f"torch {torch.__version__}",
    }
    versions = _framework_versions()
    built = []
    for name, framework, file in DIGITS_MODELS:
        attributes = {**common, "opset": OPSET} if framework == "onnxruntime" else common
        path = out_dir / f"{name}.yaml"
        document = _manifest(name, framework, versions[framework], out_dir / file, attributes)
        manifest = write_manifest(path, document, "dlscope/zoo/digits.py")
        built.append(BuiltModel(manifest=manifest, path=path))
    return built
