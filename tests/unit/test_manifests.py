"""Manifests are validated when read, with errors naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.config import REPOSITORY_ROOT
from shared.errors import ManifestError
from shared.manifests import load_manifest, load_manifests

VALID = """
name: tiny
version: 1.2.3
framework: {name: onnxruntime, version: ">=1.17"}
inputs: [{name: x, shape: [-1, 3]}]
outputs: [{name: y, shape: [-1, 2]}]
source: {uri: tiny.onnx, sha256: "%s"}
""" % ("a" * 64)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(text)
    return path


def test_a_relative_source_is_resolved_next_to_the_manifest(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path, VALID))
    assert manifest.ref == "tiny@1.2.3"
    assert Path(manifest.source.uri) == (tmp_path / "tiny.onnx").resolve()


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
    ],
)
def test_a_bad_manifest_names_the_file_and_the_field(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    path = write(tmp_path, VALID.replace(*change))
    with pytest.raises(ManifestError) as raised:
        load_manifest(path)
    assert str(raised.value).startswith(f"{path}: ")
    assert message in str(raised.value)


def test_a_manifest_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="must be a YAML mapping"):
        load_manifest(write(tmp_path, "- just\n- a list\n"))


def test_the_same_version_defined_twice_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(VALID)
    (tmp_path / "b.yaml").write_text(VALID)
    with pytest.raises(ManifestError, match=r"tiny@1.2.3 is also defined in"):
        load_manifests(tmp_path)


def test_the_built_in_manifests_are_valid() -> None:
    names = [m.ref for m in load_manifests(REPOSITORY_ROOT / "manifests" / "models")]
    assert "squeezenet@1.0.0" in names
