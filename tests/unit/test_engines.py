"""Compiled engines (TensorRT) are cached by everything that decides their bytes, and the
GPU options a manifest may give (precision, ONNX Runtime's execution provider) are checked
before any framework is asked to load anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.workers.framework.predictors.engines import (
    EngineCache,
    engine_dir,
    engine_key,
    precision_of,
)
from services.workers.framework.predictors.onnxrt import OnnxRuntimePredictor
from services.workers.handover import FrameworkOptions
from shared.config import Settings
from shared.errors import PredictorError
from shared.manifests import ModelManifest

GRAPH = b"\x08\x07onnx graph bytes"
PARTS = {"precision": "fp32", "tensorrt": "10.3.0", "gpu": "NVIDIA H100 sm_9.0"}


def manifest(**attributes: Any) -> ModelManifest:
    return ModelManifest.model_validate(
        {
            "name": "tiny",
            "version": "1.0.0",
            "framework": {"name": "onnxruntime"},
            "inputs": [{"name": "x", "shape": [-1, 4]}],
            "outputs": [{"name": "y", "shape": [-1, 2]}],
            "source": {"uri": "/nowhere/tiny.onnx", "sha256": "0" * 64},
            "attributes": attributes,
        }
    )


def test_the_key_changes_with_the_graph_and_with_every_part() -> None:
    key = engine_key(GRAPH, **PARTS)
    assert key == engine_key(GRAPH, **dict(reversed(PARTS.items())))  # order does not matter
    assert engine_key(GRAPH + b"\x00", **PARTS) != key
    for name in PARTS:
        assert engine_key(GRAPH, **{**PARTS, name: PARTS[name] + "x"}) != key
    # Parts are separated and named: moving text from one part to another changes the key.
    assert engine_key(GRAPH, a="bc", d="") != engine_key(GRAPH, a="b", d="c")


def test_an_engine_is_built_once_then_read_from_disk(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path / "engines")
    builds: list[int] = []

    def build() -> bytes:
        builds.append(1)
        return b"serialized engine"

    key = engine_key(GRAPH, **PARTS)
    assert cache.get_or_build(key, build) == (b"serialized engine", True)
    # Another worker on the host (a fresh cache over the same folder) reads it back.
    assert EngineCache(tmp_path / "engines").get_or_build(key, build) == (
        b"serialized engine",
        False,
    )
    assert len(builds) == 1
    assert [p.name for p in (tmp_path / "engines").iterdir()] == [f"{key}.engine"]

    cache.discard(key)  # one that no longer deserializes
    assert cache.get_or_build(key, build) == (b"serialized engine", True)
    assert len(builds) == 2


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)

    def build() -> bytes:
        raise PredictorError("TensorRT could not build a fp16 engine for tiny@1.0.0")

    with pytest.raises(PredictorError, match="could not build"):
        cache.get_or_build("k", build)
    assert list(tmp_path.iterdir()) == []


def test_engines_live_under_dlscope_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert engine_dir(tmp_path) == tmp_path / "engines"
    # A worker reads its home once and tells its framework process (FrameworkOptions).
    monkeypatch.setenv("DLSCOPE_HOME", str(tmp_path / "home"))
    options = FrameworkOptions.from_settings(Settings())
    assert engine_dir(options.home) == tmp_path / "home" / "engines"


def test_precision_is_fp32_unless_the_manifest_asks_for_fp16() -> None:
    assert precision_of(manifest()) == "fp32"
    assert precision_of(manifest(precision="fp16")) == "fp16"
    with pytest.raises(PredictorError, match=r"tiny@1\.0\.0: attributes\.precision is 'int8'"):
        precision_of(manifest(precision="int8"))


def test_onnxruntime_names_the_providers_it_has_when_a_gpu_one_is_missing(
    tmp_path: Path,
) -> None:
    # This onnxruntime is the CPU build: neither CUDA nor TensorRT is there to pick.
    for provider, missing in (
        ("cuda", "CUDAExecutionProvider"),
        ("tensorrt", "TensorrtExecutionProvider, CUDAExecutionProvider"),
    ):
        with pytest.raises(PredictorError) as raised:
            OnnxRuntimePredictor().open(
                manifest(execution_provider=provider), tmp_path / "tiny.onnx", hardware="gpu"
            )
        message = str(raised.value)
        assert f"has no {missing} to run tiny@1.0.0 on 'gpu'" in message
        assert "available execution providers: " in message
        assert "CPUExecutionProvider" in message.split("available execution providers: ")[1]


def test_onnxruntime_refuses_an_unknown_execution_provider(tmp_path: Path) -> None:
    with pytest.raises(PredictorError, match="on a GPU onnxruntime runs cuda or tensorrt"):
        OnnxRuntimePredictor().open(
            manifest(execution_provider="rocm"), tmp_path / "tiny.onnx", hardware="gpu"
        )
