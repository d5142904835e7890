"""Model files are used only once their sha256 matches the manifest, from a verified cache."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from services.workers.artifacts import ArtifactCache, locate
from shared.errors import ArtifactError
from shared.manifests import ModelSource


def source_for(path: Path, content: bytes) -> ModelSource:
    path.write_bytes(content)
    return ModelSource(uri=str(path), sha256=hashlib.sha256(content).hexdigest())


def test_a_matching_file_is_cached_under_its_digest(tmp_path: Path) -> None:
    source = source_for(tmp_path / "model.onnx", b"weights")
    cached = ArtifactCache(tmp_path / "cache").fetch(source)
    assert cached == tmp_path / "cache" / "sha256" / source.sha256 / "model.onnx"
    assert cached.read_bytes() == b"weights"


def test_a_file_that_does_not_match_its_checksum_is_refused(tmp_path: Path) -> None:
    source = source_for(tmp_path / "model.onnx", b"weights")
    (tmp_path / "model.onnx").write_bytes(b"tampered")
    with pytest.raises(ArtifactError, match=r"sha256 mismatch, expected [0-9a-f]{64} but the file"):
        ArtifactCache(tmp_path / "cache").fetch(source)
    assert not (tmp_path / "cache" / "sha256" / source.sha256 / "model.onnx").exists()


def test_a_corrupted_cache_entry_is_replaced_from_the_source(tmp_path: Path) -> None:
    source = source_for(tmp_path / "model.onnx", b"weights")
    cache = ArtifactCache(tmp_path / "cache")
    cache.fetch(source).write_bytes(b"bit rot")
    assert cache.fetch(source).read_bytes() == b"weights"


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    source = ModelSource(uri=str(tmp_path / "absent.onnx"), sha256="0" * 64)
    with pytest.raises(ArtifactError, match=r"model file not found at .*absent.onnx"):
        ArtifactCache(tmp_path / "cache").fetch(source)


def test_sources_name_paths_file_urls_and_files_inside_installed_packages(tmp_path: Path) -> None:
    assert locate(str(tmp_path / "m.onnx")) == tmp_path / "m.onnx"
    assert locate(f"file://{tmp_path}/m%20x.onnx") == tmp_path / "m x.onnx"
    shipped = locate("pkg://onnx/backend/test/data/light/light_squeezenet.onnx")
    assert shipped.is_file()


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("ftp://host/m.onnx", "unsupported source scheme 'ftp'"),
        ("pkg://no_such_package_here/m.onnx", "package 'no_such_package_here' is not installed"),
    ],
)
def test_unusable_sources_say_why(uri: str, message: str) -> None:
    with pytest.raises(ArtifactError, match=message):
        locate(uri)
