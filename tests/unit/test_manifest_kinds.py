"""Framework and dataset manifests: exact framework versions, data sets that describe samples."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from services.workers.framework.frameworks import framework_for
from shared.config import REPOSITORY_ROOT
from shared.errors import ManifestError
from shared.manifests import (
    DatasetManifest,
    FrameworkManifest,
    Manifest,
    ModelManifest,
    SplitRange,
    load_manifest,
)

SHA = "b" * 64
FRAMEWORK = """
kind: framework
name: onnxruntime
version: "1.31.1"
hardware: [cpu, gpu]
package: onnxruntime-gpu
description: ONNX Runtime with the CUDA execution provider
"""

DATASET = """
kind: dataset
name: digits
version: 1.0.0
description: 8x8 handwritten digits
license: CC-BY-4.0
task: image-classification
source: {builtin: "sklearn:digits"}
samples: 1797
splits:
  train: {start: 0, stop: 1500}
  test: {start: 1500, stop: 1797}
  smoke: [0, 7, 42]
labels: [zero, one, two, three, four, five, six, seven, eight, nine]
element: {shape: [8, 8], element_type: float64}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "manifest.yaml"
    path.write_text(text)
    return path


def refusal(path: Path) -> str:
    with pytest.raises(ManifestError) as raised:
        load_manifest(path)
    assert str(raised.value).startswith(f"{path}: ")
    return str(raised.value)


def test_a_framework_manifest_pins_the_version_the_framework_reports(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path, FRAMEWORK))
    assert isinstance(manifest, FrameworkManifest)
    assert (manifest.ref, manifest.hardware, manifest.package) == (
        "onnxruntime@1.31.1",
        ["cpu", "gpu"],
        "onnxruntime-gpu",
    )


@pytest.mark.parametrize(
    "path", sorted((REPOSITORY_ROOT / "manifests" / "frameworks").glob("*.yaml")), ids=str
)
def test_the_shipped_framework_manifests_match_what_is_installed(path: Path) -> None:
    # A framework manifest describes the build dlscope installs: its version must be the one
    # its worker reports (the pin in pyproject), or results would name a framework version
    # that never ran them.
    manifest = load_manifest(path)
    assert isinstance(manifest, FrameworkManifest)
    reported = framework_for(manifest.name).version().split("+")[0]
    assert manifest.version == reported, f"{path.name}: {manifest.version} != {reported}"
    if manifest.package is not None:
        assert version(manifest.package).split("+")[0] == reported


@pytest.mark.parametrize("version", ["2.13.0", "10.0.1.6", "2.5.1+cu121", "3.0", "1.0.0rc1"])
def test_framework_versions_are_taken_as_reported(tmp_path: Path, version: str) -> None:
    manifest = load_manifest(write(tmp_path, FRAMEWORK.replace("1.31.1", version)))
    assert manifest.version == version


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('"1.31.1"', '">=1.31"'), "version: Value error, '>=1.31' is not an exact version"),
        (('"1.31.1"', '"latest"'), "version: Value error, 'latest' is not an exact version"),
        (
            ('"1.31.1"', "2.10"),
            "version: Value error, write the version as a quoted string, e.g. '2.1.0'",
        ),
        (("[cpu, gpu]", "[tpu]"), "hardware.0: Input should be 'cpu', 'gpu' or 'fpga'"),
        (("[cpu, gpu]", "[cpu, cpu]"), "hardware: Value error, list each kind of hardware once"),
        (("[cpu, gpu]", "[]"), "hardware: List should have at least 1 item"),
        (("name: onnxruntime", "name: mxnet"), "name: Input should be 'onnxruntime', 'pytorch'"),
        (("package: onnxruntime-gpu", "package: 'pip install x'"), "package: String should"),
    ],
)
def test_a_framework_manifest_is_refused_with_the_reason(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    assert message in refusal(write(tmp_path, FRAMEWORK.replace(*change)))


def test_a_dataset_manifest_describes_samples_splits_and_labels(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path, DATASET))
    assert isinstance(manifest, DatasetManifest)
    assert manifest.ref == "digits@1.0.0"
    assert manifest.source.builtin == "sklearn:digits"
    assert manifest.source.file is None
    assert manifest.splits["train"] == SplitRange(start=0, stop=1500)
    assert manifest.splits["smoke"] == [0, 7, 42]
    assert manifest.element.shape == [8, 8]


def test_a_dataset_file_source_and_labels_file_are_relative_to_the_manifest(
    tmp_path: Path,
) -> None:
    (tmp_path / "classes.txt").write_text("cat\ndog\n")
    text = DATASET.replace(
        '{builtin: "sklearn:digits"}',
        f"{{uri: photos.zip, sha256: {SHA}, archive: zip, member: photos}}",
    )
    text = text.replace(
        "labels: [zero, one, two, three, four, five, six, seven, eight, nine]",
        "labels: classes.txt",
    )
    text = text.replace("{shape: [8, 8], element_type: float64}", "{encoding: jpeg}")
    manifest = load_manifest(write(tmp_path, text))
    assert isinstance(manifest, DatasetManifest)
    assert manifest.labels == str((tmp_path / "classes.txt").resolve())
    assert manifest.source.file is not None
    assert manifest.source.file.uri == str((tmp_path / "photos.zip").resolve())
    assert (manifest.source.file.archive, manifest.source.file.member) == ("zip", "photos")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ('{builtin: "sklearn:digits"}', "{uri: digits.npz}"),
            "source: Value error, give either uri and sha256, or builtin: '<provider>:<name>'",
        ),
        (
            ('{builtin: "sklearn:digits"}', f'{{builtin: "sklearn:digits", sha256: {SHA}}}'),
            "source: Value error, a builtin source takes no uri, sha256, archive or member",
        ),
        (('"sklearn:digits"', '"digits"'), "source.builtin: String should match pattern"),
        (
            ("stop: 1797", "stop: 1800"),
            "Value error, split 'test' reaches sample 1799 but there are 1797 samples (0 to 1796)",
        ),
        (("[0, 7, 42]", "[0, 7, 7]"), "Value error, split 'smoke' lists a sample more than once"),
        (
            ("{start: 1500, stop: 1797}", "{start: 1797, stop: 1500}"),
            "splits.test: Value error, start (1797) must be below stop (1500)",
        ),
        (
            ("element_type: float64}", "element_type: float64, encoding: png}"),
            "element: Value error, give element_type (an array) or encoding (an image file)",
        ),
        (("{shape: [8, 8], ", "{"), "element: Value error, an array sample needs its shape"),
        (("samples: 1797", "samples: 0"), "samples: Input should be greater than 0"),
        (("version: 1.0.0", "version: '1.0'"), "version: Value error, '1.0' is not a semantic"),
        (("labels: [zero", "labels: nowhere.txt\nx: [zero"), "labels: Value error, labels file "),
    ],
)
def test_a_dataset_manifest_is_refused_with_the_reason(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    assert change[0] in DATASET
    assert message in refusal(write(tmp_path, DATASET.replace(*change)))


def test_the_manifest_union_tells_kinds_apart_and_defaults_to_a_model() -> None:
    adapter: TypeAdapter[Manifest] = TypeAdapter(Manifest)
    model = {
        "name": "tiny",
        "version": "1.0.0",
        "framework": {"name": "pytorch"},
        "inputs": [{"name": "x", "shape": [1]}],
        "outputs": [{"name": "y", "shape": [1]}],
        "source": {"uri": "/m.pt", "sha256": SHA},
    }
    framework = {"kind": "framework", "name": "pytorch", "version": "2.5.1", "hardware": ["gpu"]}
    assert isinstance(adapter.validate_python(model), ModelManifest)
    assert isinstance(adapter.validate_python(framework), FrameworkManifest)


def test_the_examples_in_the_specification_are_valid_manifests(tmp_path: Path) -> None:
    spec = (REPOSITORY_ROOT / "docs" / "manifests.md").read_text()
    examples = re.findall(r"```yaml\n(.*?)```", spec, flags=re.DOTALL)
    (tmp_path / "imagenet-labels.txt").write_text("".join(f"class {i}\n" for i in range(1000)))
    kinds = []
    for number, example in enumerate(examples):
        path = tmp_path / f"example{number}.yaml"
        path.write_text(example)
        kinds.append(load_manifest(path).kind)
    assert kinds == ["model", "framework", "dataset"]
