"""Every predictor adapter keeps one contract, whatever its framework: the worker's timing,
pre/post-processing and accuracy code rely on it. One suite, run against each framework
whose adapter imports here; the others skip, saying what is missing.

The model is the zoo's digits CNN, built once for the session: the same trained weights as
ONNX, TorchScript, a torch.export program and (where the zoo builds one) a SavedModel. The
frameworks that run ONNX graphs themselves (TensorRT, OpenCL) take the ONNX file.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch

from dlscope.zoo import BuiltModel
from dlscope.zoo.digits import DIGITS_DATASET
from dlscope.zoo.export import _torchscript_allowed
from dlscope.zoo.training import digits_cnn
from services.workers.environment import gpus
from services.workers.framework.frameworks import Framework, framework_for
from services.workers.framework.predictors import Predictor
from services.workers.handover import FrameworkOptions
from shared.artifacts import ArtifactCache, sha256_of
from shared.datasets import load_dataset
from shared.errors import ConfigurationError, PredictorError
from shared.manifests import DatasetManifest, ModelManifest, ModelSource, load_manifest
from shared.processing import preprocess_batch
from tests.conftest import opencl_problem

# The adapters under test: framework names, and "pytorch-export" for torch.export programs.
ADAPTERS = ["onnxruntime", "pytorch", "pytorch-export", "tensorflow", "tensorrt", "opencl"]
# The hardware each is tested on; the rest run on the CPU.
GPU_ONLY = {"tensorrt"}
# Frameworks that compile the ONNX graph themselves rather than load a format of their own.
RUN_ONNX = {"tensorrt", "opencl"}
# ONNX Runtime and the others may sum floats in another order: logits agree to about 1e-6.
TOLERANCE = 1e-4


@dataclass(frozen=True)
class Subject:
    """One adapter, and the digits model in the format it loads."""

    name: str
    factory: Framework
    manifest: ModelManifest
    path: Path
    hardware: str

    def opened(self) -> Predictor:
        predictor = self.factory.create()
        predictor.open(self.manifest, self.path, hardware=self.hardware)
        return predictor


@pytest.fixture(scope="session")
def zoo(
    digits_zoo: list[BuiltModel], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, BuiltModel]:
    # The session's zoo (tests/conftest.py), and a torch.export program of the same weights,
    # which the zoo does not build, in a folder of its own.
    built: dict[str, BuiltModel] = {m.manifest.framework.name: m for m in digits_zoo}
    folder = tmp_path_factory.mktemp("torch-export")
    built["pytorch-export"] = _exported_program(built["pytorch"], folder / "digits-cnn.pt2")
    return built


def _exported_program(torchscript: BuiltModel, path: Path) -> BuiltModel:
    model = digits_cnn()
    model.load_state_dict(_torchscript_weights(Path(torchscript.manifest.source.uri)))
    program = torch.export.export(
        model.eval(),
        (torch.zeros(2, 1, 8, 8),),
        dynamic_shapes=({0: torch.export.Dim("batch")},),
    )
    torch.export.save(program, str(path))
    source = ModelSource(uri=str(path), sha256=sha256_of(path))
    manifest = torchscript.manifest.model_copy(
        update={"name": "digits-cnn-torch-export", "source": source}
    )
    return BuiltModel(manifest=manifest, path=torchscript.path)


def _torchscript_weights(path: Path) -> dict[str, torch.Tensor]:
    with _torchscript_allowed():
        module = torch.jit.load(str(path))  # type: ignore[no-untyped-call]
    return dict(module.state_dict())


@pytest.fixture(scope="session")
def samples() -> list[object]:
    manifest = load_manifest(DIGITS_DATASET)
    assert isinstance(manifest, DatasetManifest)
    return list(load_dataset(manifest, "test").samples)


@pytest.fixture(params=ADAPTERS)
def subject(
    request: pytest.FixtureRequest,
    zoo: dict[str, BuiltModel],
    tmp_path: Path,
) -> Subject:
    name: str = request.param
    framework = name.removesuffix("-export")
    try:
        # Where compiled engines (TensorRT) are cached: this test's own folder.
        factory = framework_for(framework, FrameworkOptions(home=tmp_path / "home"))
    except ConfigurationError as exc:
        pytest.skip(str(exc))
    hardware = "gpu" if framework in GPU_ONLY else "cpu"
    if hardware == "gpu" and not gpus():
        pytest.skip(f"{framework} needs a CUDA GPU, and there is none here")
    if framework == "opencl" and (why := opencl_problem(hardware)) is not None:
        pytest.skip(f"OpenCL runs nothing here: {why}")
    model = zoo.get("onnxruntime" if framework in RUN_ONNX else name)
    if model is None:
        pytest.skip(f"the zoo builds no digits model for {framework}")
    # Fetched as a worker fetches it: verified, an archive (a SavedModel) unpacked.
    path = ArtifactCache(tmp_path / "artifacts").fetch(model.manifest.source)
    return Subject(name, factory, model.manifest, path, hardware)


@pytest.fixture
def predictor(subject: Subject) -> Iterator[Predictor]:
    predictor = subject.opened()
    yield predictor
    predictor.close()


def _batch(subject: Subject, samples: list[object]) -> dict[str, np.ndarray]:
    """Samples through the manifest's own steps, as the worker feeds the model."""
    spec = subject.manifest.inputs[0]
    return {spec.name: np.asarray(preprocess_batch(spec.steps, samples), dtype=spec.element_type)}


def _reference(zoo: dict[str, BuiltModel], samples: list[object]) -> np.ndarray:
    """ONNX Runtime's logits for the same samples, computed without any adapter."""
    onnx_model = zoo["onnxruntime"].manifest
    session = onnxruntime.InferenceSession(
        onnx_model.source.uri, providers=["CPUExecutionProvider"]
    )
    spec = onnx_model.inputs[0]
    images = np.asarray(preprocess_batch(spec.steps, samples), dtype=np.float32)
    return np.asarray(session.run(None, {spec.name: images})[0])


def test_a_batch_gives_the_declared_outputs(
    subject: Subject, predictor: Predictor, samples: list[object]
) -> None:
    outputs = predictor.predict(_batch(subject, samples[:7]))
    assert len(outputs) == len(subject.manifest.outputs)
    for output, spec in zip(outputs, subject.manifest.outputs, strict=True):
        assert isinstance(output, np.ndarray)
        assert list(output.shape) == [7 if d == -1 else d for d in spec.shape]
        assert output.dtype == np.dtype(spec.element_type)


def test_the_batch_size_is_chosen_per_query(
    subject: Subject, predictor: Predictor, samples: list[object]
) -> None:
    # Single-stream queries of one, a batch of seven, then one again on the same model.
    for size in (1, 7, 1):
        (logits,) = predictor.predict(_batch(subject, samples[:size]))
        assert logits.shape == (size, 10)


def test_describe_names_the_framework_its_version_and_the_device(
    subject: Subject, predictor: Predictor
) -> None:
    described = predictor.describe()
    assert described["framework"] == predictor.framework == subject.name.removesuffix("-export")
    assert described["framework_version"] == subject.factory.version()
    # In the framework's own words: "cpu", "/CPU:0", "cuda:0", an OpenCL device's details...
    device = "cuda|gpu" if subject.hardware == "gpu" else "cpu"
    assert re.search(device, str(described["device"]), re.IGNORECASE)


def test_a_closed_predictor_opens_again(subject: Subject, samples: list[object]) -> None:
    batch = _batch(subject, samples[:7])
    predictor = subject.opened()
    first = predictor.predict(batch)
    predictor.close()
    predictor.open(subject.manifest, subject.path, hardware=subject.hardware)
    try:
        again = predictor.predict(batch)
    finally:
        predictor.close()
    for before, after in zip(first, again, strict=True):
        np.testing.assert_array_equal(before, after)


def test_a_corrupt_model_file_is_a_predictor_error_naming_the_model(
    subject: Subject, tmp_path: Path
) -> None:
    corrupt = tmp_path / "corrupt" / subject.path.name
    if subject.path.is_dir():  # a SavedModel folder: every file in it garbled
        shutil.copytree(subject.path, corrupt)
        for file in corrupt.rglob("*"):
            if file.is_file():
                file.write_bytes(b"\x00not a model\xff" * 64)
    else:
        corrupt.parent.mkdir()
        corrupt.write_bytes(subject.path.read_bytes()[:100] + b"\x00not a model\xff" * 64)
    predictor = subject.factory.create()
    with pytest.raises(PredictorError, match=re.escape(subject.manifest.ref)):
        predictor.open(subject.manifest, corrupt, hardware=subject.hardware)


def test_asking_for_a_gpu_where_there_is_none_says_what_is_missing(subject: Subject) -> None:
    if gpus():
        pytest.skip("there is a GPU here")
    predictor = subject.factory.create()
    with pytest.raises(PredictorError, match=re.compile("cuda|gpu", re.IGNORECASE)):
        predictor.open(subject.manifest, subject.path, hardware="gpu")


def test_outputs_agree_with_onnxruntime(
    subject: Subject, predictor: Predictor, zoo: dict[str, BuiltModel], samples: list[object]
) -> None:
    expected = _reference(zoo, samples)
    got = np.concatenate(
        [
            predictor.predict(_batch(subject, samples[start : start + 32]))[0]
            for start in range(0, len(samples), 32)
        ]
    )
    assert got.shape == expected.shape
    assert float(np.max(np.abs(got - expected))) < TOLERANCE
