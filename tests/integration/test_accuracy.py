"""Accuracy on a labelled dataset: a user registers a trained model and evaluates it on the
digits test split; the worker feeds the samples through the manifest's own pre-processing
and reports top-1/top-5 next to the latencies. Embedded and on RabbitMQ + PostgreSQL."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from shared.config import REPOSITORY_ROOT
from shared.datasets import load_dataset
from shared.manifests import DatasetManifest, load_manifest
from tests.conftest import register_model
from tests.integration.conftest import Stack

DIGITS = load_manifest(REPOSITORY_ROOT / "manifests" / "datasets" / "digits.yaml")
assert isinstance(DIGITS, DatasetManifest)


def centroid_classifier(path: Path) -> float:
    """A nearest-centroid classifier trained on the digits train split, as an ONNX graph
    (flatten, MatMul, Add: argmax of 2x.c - |c|^2 is the nearest centroid). Returns its
    top-1 on the test split, computed independently in float64 numpy."""
    train = load_dataset(DIGITS, "train")
    assert train.labels is not None
    x = np.stack(train.samples).reshape(len(train), 64) / 16.0
    centroids = np.stack([x[train.labels == c].mean(axis=0) for c in range(10)])
    weights = (2 * centroids.T).astype(np.float32)
    bias = -(centroids**2).sum(axis=1).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["image"], ["flat"], axis=1),
            helper.make_node("MatMul", ["flat", "weights"], ["scores"]),
            helper.make_node("Add", ["scores", "bias"], ["logits"]),
        ],
        "digits-centroids",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 10])],
        [numpy_helper.from_array(weights, "weights"), numpy_helper.from_array(bias, "bias")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)

    test = load_dataset(DIGITS, "test")
    assert test.labels is not None
    flat = np.stack(test.samples).reshape(len(test), 64) / 16.0
    predicted = np.argmax(flat @ (2 * centroids.T) - (centroids**2).sum(axis=1), axis=1)
    return float((predicted == test.labels).mean())


def manifest_for(path: Path) -> dict[str, Any]:
    return {
        "name": "digits-centroids",
        "version": "1.0.0",
        "description": "nearest-centroid classifier of the 8x8 digits",
        "framework": {"name": "onnxruntime"},
        "task": "image-classification",
        "inputs": [
            {
                "name": "image",
                "shape": [-1, 1, 8, 8],
                "layout": "NCHW",
                "steps": [
                    {"op": "normalize", "mean": [0.0], "std": [1.0], "scale": 16.0},
                    {"op": "layout", "to": "NCHW"},
                    {"op": "cast", "dtype": "float32"},
                ],
            }
        ],
        "outputs": [{"name": "logits", "shape": [-1, 10]}],
        "source": {"uri": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()},
    }


@pytest.fixture
async def stack(any_stack: Stack, tmp_path: Path) -> Stack:
    return any_stack


async def test_a_trained_model_reports_its_accuracy_on_the_digits_test_split(
    stack: Stack, tmp_path: Path
) -> None:
    expected = centroid_classifier(tmp_path / "centroids.onnx")
    registered = await register_model(stack.http, manifest_for(tmp_path / "centroids.onnx"))
    assert registered.status_code == 201, registered.text

    evaluation = await stack.evaluate(
        "digits-centroids",
        dataset="digits",
        split="test",
        scenario={"iterations": 5, "min_duration_s": 0, "batch_size": 32},
    )
    assert evaluation["status"] == "completed", evaluation["error"]
    accuracy = evaluation["result"]["accuracy"]
    assert (accuracy["dataset"], accuracy["split"], accuracy["samples"]) == (
        "digits@1.0.0",
        "test",
        360,
    )
    # The same function in float32 on onnxruntime: at most one sample may tip the other way.
    assert abs(accuracy["top1"] - expected) <= 1 / 360
    assert expected > 0.8  # a real classifier: chance is 0.1
    assert accuracy["top1"] <= accuracy["top5"] <= 1
    assert evaluation["result"]["batch_size"] == 32


async def test_an_unknown_dataset_is_refused_naming_the_field(stack: Stack) -> None:
    response = await stack.http.post(
        "/v1/evaluations",
        json={"model": "squeezenet", "framework": "onnxruntime", "dataset": "mnist-9000"},
    )
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "dataset"]
    assert (
        "unknown dataset 'mnist-9000'; registered datasets: digits, sample-photos, sentences"
        in detail["msg"]
    )


async def test_an_unknown_split_fails_the_evaluation_with_the_splits_that_exist(
    stack: Stack,
) -> None:
    evaluation = await stack.evaluate("squeezenet", dataset="digits", split="dev")
    assert evaluation["status"] == "failed"
    assert evaluation["error"] == (
        "validation: dataset digits@1.0.0 has no split 'dev'; splits: train, test"
    )


async def test_a_dataset_without_labels_cannot_measure_accuracy(stack: Stack) -> None:
    evaluation = await stack.evaluate("shufflenet", dataset="sample-photos")
    assert evaluation["status"] == "failed"
    assert "has no labels: accuracy needs them" in evaluation["error"]
