"""Model files are used only once their sha256 matches the manifest, from a verified cache;
archives are extracted once, safely, or not at all."""

from __future__ import annotations

import hashlib
import io
import stat
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from shared.artifacts import Archive, ArtifactCache, ArtifactLimits, locate, verify
from shared.errors import ArtifactError
from shared.manifests import ModelSource

# An archive member, as a test describes it: (kind, name, payload).
# kinds: "file" (payload: bytes), "dir", "symlink"/"hardlink" (payload: target), "device".
Member = tuple[str, str, bytes | str]


def sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def source_for(path: Path, content: bytes) -> ModelSource:
    path.write_bytes(content)
    return ModelSource(uri=str(path), sha256=sha256(content))


def build_tar(path: Path, members: list[Member]) -> ModelSource:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for kind, name, payload in members:
            info = tarfile.TarInfo(name)
            data = b""
            if kind == "file":
                assert isinstance(payload, bytes)
                data = payload
                info.size = len(data)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind in ("symlink", "hardlink"):
                info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
                info.linkname = str(payload)
            elif kind == "device":
                info.type = tarfile.CHRTYPE
                info.devmajor, info.devminor = 1, 3  # /dev/null
            tar.addfile(info, io.BytesIO(data) if kind == "file" else None)
    return source_for(path.with_suffix(".tar.gz"), buffer.getvalue())


def build_zip(path: Path, members: list[Member]) -> ModelSource:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as packed:
        for kind, name, payload in members:
            if kind == "dir":
                packed.mkdir(name)
                continue
            info = zipfile.ZipInfo(name)
            info.create_system = 3  # Unix: the mode bits below are what unzip honours
            mode = {"file": stat.S_IFREG, "symlink": stat.S_IFLNK, "device": stat.S_IFCHR}[kind]
            info.external_attr = (mode | 0o644) << 16
            packed.writestr(info, payload)
    return source_for(path.with_suffix(".zip"), buffer.getvalue())


Builder = Callable[[Path, list[Member]], ModelSource]
BUILDERS = [pytest.param(build_tar, id="tar.gz"), pytest.param(build_zip, id="zip")]


def files_under(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if not p.is_dir())


# Plain files


def test_a_matching_file_is_cached_under_its_digest(tmp_path: Path) -> None:
    source = source_for(tmp_path / "model.onnx", b"weights")
    cached = ArtifactCache(tmp_path / "cache").fetch(source)
    assert cached == tmp_path / "cache" / "sha256" / source.sha256 / "model.onnx"
    assert cached.read_bytes() == b"weights"


def test_a_cached_file_is_served_without_its_source(tmp_path: Path) -> None:
    source = source_for(tmp_path / "model.onnx", b"weights")
    cache = ArtifactCache(tmp_path / "cache")
    first = cache.fetch(source)
    (tmp_path / "model.onnx").unlink()
    assert cache.fetch(source) == first
    assert first.read_bytes() == b"weights"


def test_a_file_that_does_not_match_its_checksum_is_refused_and_not_cached(
    tmp_path: Path,
) -> None:
    source = source_for(tmp_path / "model.onnx", b"weights")
    (tmp_path / "model.onnx").write_bytes(b"tampered")
    with pytest.raises(
        ArtifactError, match=r"sha256 mismatch: .* pins \(sha256 [0-9a-f]{64}\)"
    ) as e:
        ArtifactCache(tmp_path / "cache").fetch(source)
    assert files_under(tmp_path / "cache") == []
    # What the bytes do hash to is not said: a digest is enough to ask a server for a file.
    assert hashlib.sha256(b"tampered").hexdigest() not in str(e.value)


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
        ("https://example.org/m.onnx", "https source is not a local file"),
    ],
)
def test_unusable_sources_say_why(uri: str, message: str) -> None:
    with pytest.raises(ArtifactError, match=message):
        locate(uri)


# Archives


MODEL = [
    ("dir", "resnet", b""),
    ("file", "resnet/model.onnx", b"graph"),
    ("file", "resnet/weights/layer1.bin", b"layer one"),
]


@pytest.mark.parametrize("build", BUILDERS)
def test_an_archive_is_verified_extracted_once_and_its_member_returned(
    tmp_path: Path, build: Builder
) -> None:
    source = build(tmp_path / "resnet", MODEL)
    cache = ArtifactCache(tmp_path / "cache")
    model = cache.fetch(source, Archive(member="resnet/model.onnx"))
    assert model.read_bytes() == b"graph"
    assert model.is_relative_to(tmp_path / "cache" / "sha256" / source.sha256)
    # Once extracted, the archive is not read again: the same file is handed out.
    Path(source.uri).unlink()
    again = cache.fetch(source, Archive(member="resnet/model.onnx"))
    assert again == model
    assert again.stat().st_ino == model.stat().st_ino


@pytest.mark.parametrize("build", BUILDERS)
def test_without_a_member_the_extraction_directory_is_returned(
    tmp_path: Path, build: Builder
) -> None:
    source = build(tmp_path / "resnet", MODEL)
    root = ArtifactCache(tmp_path / "cache").fetch(source, Archive())
    assert files_under(root) == [Path("resnet/model.onnx"), Path("resnet/weights/layer1.bin")]
    weights = ArtifactCache(tmp_path / "cache").fetch(source, Archive(member="resnet/weights"))
    assert (weights / "layer1.bin").read_bytes() == b"layer one"


def test_the_format_is_declared_when_the_name_does_not_say(tmp_path: Path) -> None:
    packed = build_tar(tmp_path / "resnet", MODEL)
    blob = tmp_path / "resnet-v1.blob"
    source = source_for(blob, Path(packed.uri).read_bytes())
    cache = ArtifactCache(tmp_path / "cache")
    with pytest.raises(ArtifactError, match=r"cannot tell the archive format.*'resnet-v1.blob'"):
        cache.fetch(source, Archive(member="resnet/model.onnx"))
    model = cache.fetch(source, Archive(format="tar.gz", member="resnet/model.onnx"))
    assert model.read_bytes() == b"graph"


def test_an_extracted_file_changed_in_the_cache_is_extracted_again(tmp_path: Path) -> None:
    source = build_zip(tmp_path / "resnet", MODEL)
    cache = ArtifactCache(tmp_path / "cache")
    cache.fetch(source, Archive(member="resnet/model.onnx")).write_bytes(b"bit rot")
    (cache.fetch(source, Archive()) / "resnet" / "stray.txt").write_bytes(b"not from it")
    root = cache.fetch(source, Archive())
    assert (root / "resnet" / "model.onnx").read_bytes() == b"graph"
    assert not (root / "resnet" / "stray.txt").exists()


def test_a_member_the_archive_lacks_is_named(tmp_path: Path) -> None:
    source = build_tar(tmp_path / "resnet", MODEL)
    with pytest.raises(ArtifactError, match=r"the archive has no member 'resnet/model\.pb'"):
        ArtifactCache(tmp_path / "cache").fetch(source, Archive(member="resnet/model.pb"))


def test_an_archive_that_is_not_one_is_refused(tmp_path: Path) -> None:
    source = source_for(tmp_path / "model.zip", b"not a zip at all")
    with pytest.raises(ArtifactError, match=r"model.zip: not a readable zip archive"):
        ArtifactCache(tmp_path / "cache").fetch(source, Archive())
    assert files_under(tmp_path / "cache") == []


HOSTILE = [
    pytest.param([("file", "../escape", b"x")], "'../escape' climbs out", id="dot-dot"),
    pytest.param(
        [("file", "ok/../../escape", b"x")], "'ok/../../escape' climbs out", id="dot-dot-inside"
    ),
    pytest.param(
        [("file", "/tmp/escape", b"x")], "'/tmp/escape' is an absolute path", id="absolute"
    ),
    pytest.param(
        [("symlink", "passwd", "/etc/passwd")],
        "'passwd' is a link to '/etc/passwd'",
        id="symlink-out",
    ),
    pytest.param(
        [("file", "ok.txt", b"x"), ("device", "null", b"")],
        "'null' is a device",
        id="device",
    ),
]


@pytest.mark.parametrize("build", BUILDERS)
@pytest.mark.parametrize(("members", "message"), HOSTILE)
def test_an_archive_that_would_write_outside_its_directory_is_refused_whole(
    tmp_path: Path, build: Builder, members: list[Member], message: str
) -> None:
    source = build(tmp_path / "evil", [("file", "model.onnx", b"graph"), *members])
    cache = ArtifactCache(tmp_path / "cache")
    with pytest.raises(ArtifactError, match=message) as refused:
        cache.fetch(source, Archive(member="model.onnx"))
    assert str(refused.value).startswith(f"{source.uri}: archive member")
    assert files_under(tmp_path / "cache") == []
    assert [p.name for p in tmp_path.rglob("escape")] == []


def test_a_hard_link_is_refused(tmp_path: Path) -> None:
    source = build_tar(tmp_path / "evil", [("hardlink", "passwd", "/etc/passwd")])
    with pytest.raises(ArtifactError, match="'passwd' is a link to '/etc/passwd'"):
        ArtifactCache(tmp_path / "cache").fetch(source, Archive())
    assert files_under(tmp_path / "cache") == []


@pytest.mark.parametrize("build", BUILDERS)
def test_an_archive_with_too_many_members_is_refused(tmp_path: Path, build: Builder) -> None:
    source = build(tmp_path / "many", [("file", f"m{i}", b"x") for i in range(4)])
    cache = ArtifactCache(tmp_path / "cache", ArtifactLimits(max_archive_members=3))
    with pytest.raises(ArtifactError, match=r"archive too large: more than 3 members \(at 'm3'"):
        cache.fetch(source, Archive())
    assert files_under(tmp_path / "cache") == []


@pytest.mark.parametrize("build", BUILDERS)
def test_an_archive_that_expands_too_far_is_refused(tmp_path: Path, build: Builder) -> None:
    # Zeros compress to almost nothing: a small archive, a large extraction.
    source = build(tmp_path / "bomb", [("file", "small", b"x"), ("file", "big", bytes(5000))])
    cache = ArtifactCache(tmp_path / "cache", ArtifactLimits(max_extracted_bytes=4096))
    with pytest.raises(ArtifactError, match=r"archive too large: .* more than 4096 bytes .*'big'"):
        cache.fetch(source, Archive())
    assert files_under(tmp_path / "cache") == []


def test_a_member_asked_for_must_stay_inside_the_archive(tmp_path: Path) -> None:
    source = build_tar(tmp_path / "resnet", MODEL)
    with pytest.raises(ArtifactError, match="path escapes the cache"):
        ArtifactCache(tmp_path / "cache").fetch(source, Archive(member="../../model.onnx"))


# Verification at registration


def test_verify_accepts_the_pinned_file_and_caches_nothing(tmp_path: Path) -> None:
    source = source_for(tmp_path / "model.onnx", b"weights")
    verify(source)
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


def test_verify_refuses_a_missing_or_changed_file(tmp_path: Path) -> None:
    source = source_for(tmp_path / "model.onnx", b"weights")
    (tmp_path / "model.onnx").write_bytes(b"tampered")
    with pytest.raises(ArtifactError, match="sha256 mismatch"):
        verify(source)
    (tmp_path / "model.onnx").unlink()
    with pytest.raises(ArtifactError, match=r"model file not found at .*model.onnx"):
        verify(source)


def test_verify_checks_an_archive_is_safe_and_holds_its_member(tmp_path: Path) -> None:
    source = build_zip(tmp_path / "resnet", MODEL)
    verify(source, Archive(member="resnet/model.onnx"))
    verify(source, Archive(member="resnet/weights"))
    with pytest.raises(ArtifactError, match=r"has no member 'resnet/model\.pb'"):
        verify(source, Archive(member="resnet/model.pb"))
    evil = build_tar(tmp_path / "evil", [("file", "../escape", b"x")])
    with pytest.raises(ArtifactError, match="path escapes the cache"):
        verify(evil, Archive())


def test_verify_leaves_remote_sources_to_the_workers() -> None:
    # Nothing listens on the discard port: verifying must not even try to connect.
    verify(ModelSource(uri="http://127.0.0.1:9/model.onnx", sha256="0" * 64))


def test_a_source_that_describes_an_archive_is_fetched_from_its_member(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"graph")
    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "model.onnx", arcname="model/model.onnx")
    source = ModelSource(
        uri=str(archive),
        sha256=hashlib.sha256(archive.read_bytes()).hexdigest(),
        archive="tar.gz",
        member="model/model.onnx",
    )
    verify(source)
    assert ArtifactCache(tmp_path / "cache").fetch(source).read_bytes() == b"graph"


def test_a_file_missing_from_its_package_is_named_without_the_install_path(
    tmp_path: Path,
) -> None:
    """Where a package lies on the host is not the caller's to learn from an error."""
    source = ModelSource(uri="pkg://onnx/absent/model.onnx", sha256="0" * 64)
    with pytest.raises(ArtifactError) as refused:
        ArtifactCache(tmp_path / "cache").fetch(source)
    assert "not found in package 'onnx'" in str(refused.value)
    assert "site-packages" not in str(refused.value)
