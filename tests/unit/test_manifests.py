"""Manifests are validated when read, with errors naming the file and the field."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from shared.config import REPOSITORY_ROOT
from shared.errors import ManifestError
from shared.manifests import (
    DecodeStep,
    ModelManifest,
    NormalizeStep,
    ResizeStep,
    TopKStep,
    load_manifest,
    load_manifests,
    parse_manifest,
    plugins,
    read_yaml,
)

SHA = "a" * 64
VALID = """
name: tiny
version: 1.2.3
framework: {name: onnxruntime, version: ">=1.17"}
inputs: [{name: x, shape: [-1, 3]}]
outputs: [{name: y, shape: [-1, 2]}]
source: {uri: tiny.onnx, sha256: "<sha>"}
""".replace("<sha>", SHA)

CLASSIFIER = """
kind: model
name: classifier
version: 2.0.0
framework: {name: onnxruntime}
inputs:
  - name: data
    element_type: float32
    shape: [-1, 3, 224, 224]
    layout: NCHW
    steps:
      - {op: decode, color_mode: RGB}
      - {op: resize, size: 256, method: bilinear, keep_aspect: true}
      - {op: crop, size: [224, 224], position: center}
      - {op: normalize, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225], scale: 255.0}
      - {op: layout, to: NCHW}
outputs:
  - name: prob
    shape: [-1, 3]
    steps: [{op: softmax, axis: -1}, {op: topk, k: 2, labels: labels.txt}]
source: {uri: archive.tar.gz, sha256: "<sha>", archive: tar.gz, member: net/graph.onnx}
weights: {uri: archive.tar.gz, sha256: "<sha>", archive: tar.gz, member: net/weights.bin}
hardware: {min_memory_bytes: 1000000, accelerators: [gpu], notes: fits a 1 GB card}
attributes:
  training_dataset: imagenet-1k
  accuracy: {top1: 0.71, top5: 0.9, dataset: imagenet-1k-val}
""".replace("<sha>", SHA)


def write(tmp_path: Path, text: str, name: str = "tiny.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def refusal(path: Path) -> str:
    with pytest.raises(ManifestError) as raised:
        load_manifest(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ")
    return message


def test_a_relative_source_is_resolved_next_to_the_manifest(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path, VALID))
    assert isinstance(manifest, ModelManifest)
    assert manifest.ref == "tiny@1.2.3"
    assert Path(manifest.source.uri) == (tmp_path / "tiny.onnx").resolve()


@pytest.mark.parametrize("digits", ["0" * 63 + "7", "1234567890" * 6 + "1234"])
def test_a_sha256_of_digits_only_is_read_as_the_text_written(tmp_path: Path, digits: str) -> None:
    # Unquoted, YAML would read it as a number, and the leading zeros would be lost.
    manifest = load_manifest(write(tmp_path, VALID.replace(f'"{SHA}"', digits)))

    assert isinstance(manifest, ModelManifest)
    assert manifest.source.sha256 == digits


def test_a_sha256_sent_as_a_number_is_refused_saying_to_quote_it() -> None:
    data = read_yaml(VALID)
    data["source"]["sha256"] = int("1234567890" * 6 + "1234")

    with pytest.raises(ManifestError) as raised:
        parse_manifest(data, origin="submitted manifest")

    assert "source.sha256: Value error, sha256 must be quoted" in str(raised.value)


def test_a_classifier_declares_its_steps_files_and_hints(tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_text("cat\ndog\nfox\n")
    manifest = load_manifest(write(tmp_path, CLASSIFIER))
    assert isinstance(manifest, ModelManifest)
    steps = manifest.inputs[0].steps
    assert steps[0] == DecodeStep(color_mode="RGB")
    assert steps[1] == ResizeStep(size=(256, 256), keep_aspect=True)
    assert isinstance(steps[3], NormalizeStep)
    assert steps[3].scale == 255.0
    topk = manifest.outputs[0].steps[1]
    assert isinstance(topk, TopKStep)
    assert topk.labels == str((tmp_path / "labels.txt").resolve())
    archive = str((tmp_path / "archive.tar.gz").resolve())
    assert {role: (s.uri, s.member) for role, s in manifest.sources.items()} == {
        "graph": (archive, "net/graph.onnx"),
        "weights": (archive, "net/weights.bin"),
    }
    assert manifest.hardware is not None
    assert manifest.hardware.accelerators == ["gpu"]
    assert manifest.accuracy is not None
    assert manifest.accuracy.top5 == 0.9


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("1.2.3", "1.2"), "version: Value error, '1.2' is not a semantic version"),
        (("name: tiny", "name: tiny\ncolour: red"), "colour: Extra inputs are not permitted"),
        (('sha256: "' + "a" * 64, 'sha256: "abc'), "source.sha256: String should match pattern"),
        (
            (">=1.17", ">=one"),
            "framework.version: Value error, '>=one' is not a version constraint",
        ),
        (("[-1, 3]", "[0, 3]"), "inputs.0.shape: Value error, dimensions must be positive"),
        (
            ("name: onnxruntime", "name: caffe"),
            "framework.name: Input should be 'onnxruntime', 'pytorch', 'tensorflow', 'tensorrt', "
            "'opencl' or 'endpoint'",
        ),
        (
            ("name: y,", "name: x,"),
            "",  # inputs and outputs are separate name spaces: no refusal
        ),
    ],
)
def test_a_bad_manifest_names_the_file_and_the_field(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    path = write(tmp_path, VALID.replace(*change))
    if not message:
        load_manifest(path)
        return
    assert message in refusal(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("method: bilinear", "method: linear"),
            "inputs.0.steps.1.method: Input should be 'bilinear', 'nearest', 'bicubic' or 'area'",
        ),
        (
            ("{op: softmax, axis: -1}", "{op: sort}"),
            "outputs.0.steps.0.op: unknown op 'sort' (the ops: softmax, argmax, flatten, topk, "
            "plugin)",
        ),
        (
            ("{op: layout, to: NCHW}", "{op: rotate, degrees: 90}"),
            "inputs.0.steps.4.op: unknown op 'rotate' (the ops: decode, resize, crop, "
            "normalize, layout, color, cast, tokenize, chat_template, plugin)",
        ),
        (("{op: crop, ", "{"), "inputs.0.steps.2.op: missing (the ops: decode, resize"),
        (
            ("size: 256,", "size: [256, 300],"),
            "inputs.0.steps.1: Value error, keep_aspect scales the shorter side to one length",
        ),
        (
            ("std: [0.229, 0.224, 0.225]", "std: [0.229]"),
            "inputs.0.steps.3: Value error, mean has 3 values but std has 1",
        ),
        (
            ("color_mode: RGB", "color_mode: GRAY"),
            "inputs.0: Value error, normalize gives 3 means for images with 1 channel(s)",
        ),
        (
            ("scale: 255.0", "scale: 0"),
            "inputs.0.steps.3.scale: Input should be greater than 0",
        ),
        (
            ("      - {op: layout, to: NCHW}\n", ""),
            "inputs.0: Value error, the steps produce NHWC but layout is NCHW: end them with "
            "{op: layout, to: NCHW}",
        ),
        (
            ("size: [224, 224], position", "size: 200, position"),
            "inputs.0: Value error, the steps produce 200x200 images with 3 channels but shape "
            "is [-1, 3, 224, 224] (NCHW)",
        ),
        (
            ("element_type: float32", "element_type: uint8"),
            "inputs.0: Value error, the steps produce float32 but element_type is uint8: end "
            "them with {op: cast, dtype: uint8}",
        ),
        (
            ("- {op: decode, color_mode: RGB}\n      - {op: resize", "- {op: resize"),
            "",  # no decode: raw samples are arrays already; still consistent
        ),
        (
            ("{op: softmax, axis: -1}, {op: topk", "{op: topk"),
            "",
        ),
        (
            (
                "[{op: softmax, axis: -1}, {op: topk, k: 2, labels: labels.txt}]",
                "[{op: topk}, {op: softmax}]",
            ),
            "outputs.0: Value error, topk must be the last step",
        ),
        (
            ("labels: labels.txt", "labels: missing.txt"),
            "outputs.0.steps.1.labels: Value error, labels file ",
        ),
        (
            ("member: net/graph.onnx", "member: ../graph.onnx"),
            "source.member: Value error, '../graph.onnx' is not a path inside an archive",
        ),
        (
            ("archive: tar.gz, member: net/graph.onnx", "archive: rar, member: net/graph.onnx"),
            "source.archive: Input should be 'tar', 'tar.gz' or 'zip'",
        ),
        (
            ("top1: 0.71", "top1: 71"),
            "attributes: Value error, accuracy.top1: Input should be less than or equal to 1",
        ),
        (
            ("accelerators: [gpu]", "accelerators: [cpu]"),
            "hardware.accelerators.0: Input should be 'gpu' or 'fpga'",
        ),
    ],
)
def test_steps_sources_and_attributes_are_checked(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    (tmp_path / "labels.txt").write_text("cat\ndog\nfox\n")
    assert change[0] in CLASSIFIER
    path = write(tmp_path, CLASSIFIER.replace(*change))
    if not message:
        load_manifest(path)
        return
    assert message in refusal(path)


def test_a_plugin_step_must_be_installed_when_the_manifest_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = VALID.replace(
        "[{name: x, shape: [-1, 3]}]",
        "[{name: x, shape: [-1, 3], steps: [{op: plugin, name: letterbox, params: {size: 3}}]}]",
    )
    installed = [EntryPoint("invert", "tests.unit.test_processing:invert", plugins.STEP_GROUP)]
    monkeypatch.setattr(plugins, "entry_points", lambda group: installed)
    message = refusal(write(tmp_path, text))
    assert (
        "inputs.0.steps.0.name: Value error, no step plugin 'letterbox' is installed in "
        "entry-point group 'dlscope.steps' (installed: invert)"
    ) in message

    installed.append(EntryPoint("letterbox", "tests.unit.test_processing:invert", "dlscope.steps"))
    manifest = load_manifest(write(tmp_path, text))
    assert isinstance(manifest, ModelManifest)
    assert manifest.inputs[0].steps[0].model_dump() == {
        "op": "plugin",
        "name": "letterbox",
        "params": {"size": 3},
    }


def test_a_manifest_received_in_a_message_is_not_rechecked_against_this_host() -> None:
    # Plugins and labels files are checked where the file is read, not where it is re-validated
    # from JSON (the registry's host may lack a worker's plugins).
    data = {
        "name": "tiny",
        "version": "1.0.0",
        "framework": {"name": "onnxruntime"},
        "inputs": [{"name": "x", "shape": [-1, 3], "steps": [{"op": "plugin", "name": "zz"}]}],
        "outputs": [{"name": "y", "shape": [-1, 3], "steps": [{"op": "topk", "labels": "l.txt"}]}],
        "source": {"uri": "relative.onnx", "sha256": SHA},
    }
    manifest = ModelManifest.model_validate(data)
    assert manifest.source.uri == "relative.onnx"


def test_a_submitted_manifest_is_parsed_with_the_same_messages() -> None:
    data = {"kind": "framework", "name": "onnxruntime", "version": ">=1", "hardware": ["cpu"]}
    with pytest.raises(ManifestError) as raised:
        parse_manifest(data, origin="submitted manifest")
    assert str(raised.value).startswith(
        "submitted manifest: version: Value error, '>=1' is not an exact version"
    )
    framework = parse_manifest({**data, "version": "1.31.1"}, origin="submitted manifest")
    assert framework.ref == "onnxruntime@1.31.1"


def test_a_manifest_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="must be a YAML mapping"):
        load_manifest(write(tmp_path, "- just\n- a list\n"))


def test_an_unknown_kind_says_which_kinds_exist(tmp_path: Path) -> None:
    message = refusal(write(tmp_path, "kind: recipe\n" + VALID))
    assert message.endswith(
        "kind: 'recipe' is not a kind of manifest (use 'model', 'framework', 'dataset')"
    )


def test_the_same_version_defined_twice_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(VALID)
    (tmp_path / "b.yaml").write_text(VALID)
    with pytest.raises(
        ManifestError, match=r"b.yaml: model tiny@1.2.3 is also defined in .*a.yaml"
    ):
        load_manifests(tmp_path)


def test_a_directory_lists_every_kind_sorted_by_kind_name_and_version(tmp_path: Path) -> None:
    write(tmp_path, VALID.replace("1.2.3", "1.10.0"), "new.yaml")
    write(tmp_path, VALID, "old.yaml")
    write(tmp_path, VALID.replace("name: tiny", "name: alpha"), "alpha.yaml")
    # A framework may share a model's name and version: the kinds are separate name spaces.
    write(
        tmp_path,
        "kind: framework\nname: onnxruntime\nversion: '1.2.3'\nhardware: [cpu]\n",
        "ort.yml",
    )
    everything = load_manifests(tmp_path)
    assert [(m.kind, m.ref) for m in everything] == [
        ("framework", "onnxruntime@1.2.3"),
        ("model", "alpha@1.2.3"),
        ("model", "tiny@1.2.3"),
        ("model", "tiny@1.10.0"),
    ]
    models = load_manifests(tmp_path, ModelManifest)
    assert [m.ref for m in models] == ["alpha@1.2.3", "tiny@1.2.3", "tiny@1.10.0"]


def test_the_built_in_manifests_are_valid() -> None:
    names = [m.ref for m in load_manifests(REPOSITORY_ROOT / "manifests" / "models")]
    assert "squeezenet@1.0.1" in names
    squeezenet = load_manifest(REPOSITORY_ROOT / "manifests" / "models" / "squeezenet.yaml")
    assert isinstance(squeezenet, ModelManifest)
    assert squeezenet.source.uri.startswith("pkg://onnx/")
    assert squeezenet.attributes["weights"] == "untrained-placeholder"
