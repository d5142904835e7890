"""Which files a registration from outside may name (``shared.artifacts.policy``), decided
before any is read, and ``pkg://`` sources kept inside their package wherever they are read."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.artifacts import SourcePolicy, is_upload, locate
from shared.errors import ArtifactError

SQUEEZENET = "pkg://onnx/backend/test/data/light/light_squeezenet.onnx"


@pytest.mark.parametrize(
    "uri",
    [
        "pkg://onnx/../../../../../../../../etc/passwd",
        "pkg://onnx/backend/../../../../../../../../../etc/passwd",
        "pkg://onnx/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    ],
)
def test_a_pkg_source_never_leaves_its_package(uri: str) -> None:
    with pytest.raises(ArtifactError, match="leaves package 'onnx'"):
        locate(uri)


def test_a_pkg_source_inside_its_package_is_where_it_says() -> None:
    assert locate(SQUEEZENET).is_file()
    SourcePolicy().check(SQUEEZENET)


def test_a_link_inside_a_package_that_points_out_of_it_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "sitepkg" / "linkypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.onnx").symlink_to("/etc/passwd")
    monkeypatch.syspath_prepend(str(tmp_path / "sitepkg"))
    with pytest.raises(ArtifactError, match="leaves package"):
        locate("pkg://linkypkg/model.onnx")


@pytest.mark.parametrize(
    ("uri", "rule"),
    [
        ("/etc/passwd", "does not read files named by path"),
        ("file:///etc/passwd", "does not read files named by path"),
        ("ftp://example.org/model.onnx", "not ftp://"),
        ("model.onnx", "names a file uploaded with the registration"),
        ("pkg://no_such_package_here/x.onnx", "is not installed"),
        ("pkg://a b/x", "is not the name of a Python package"),
    ],
)
def test_anything_but_uploads_pkg_urls_and_roots_is_refused(uri: str, rule: str) -> None:
    with pytest.raises(ArtifactError, match=rule):
        SourcePolicy().check(uri)


def test_urls_are_for_workers_to_download_and_verify() -> None:
    SourcePolicy().check("https://example.org/models/net.onnx")
    SourcePolicy().check("http://93.184.216.34/net.onnx")


@pytest.mark.parametrize(
    "uri",
    [
        "http://127.0.0.1:5432/",
        "http://localhost:15672/api/users",
        "http://10.0.0.5:8081/net.onnx",
        "http://192.168.1.1/admin",
        "http://169.254.169.254/latest/meta-data/",  # a cloud's metadata service
        "http://[::1]:8000/",
        "http://0.0.0.0/",
    ],
)
def test_a_url_into_the_registrys_own_network_is_refused_by_default(uri: str) -> None:
    with pytest.raises(ArtifactError, match="an address of the registry's own network"):
        SourcePolicy().check(uri)
    SourcePolicy(local_paths=True).check(uri)  # a local user's own registration may


def test_with_hosts_listed_only_those_may_be_named() -> None:
    policy = SourcePolicy(hosts=("models.internal", "10.0.0.5:8081"))
    policy.check("http://models.internal/net.onnx")
    policy.check("http://10.0.0.5:8081/sha256/" + "0" * 64 + "/net.onnx")
    with pytest.raises(ArtifactError, match="not among the hosts a registration may name"):
        policy.check("https://example.org/net.onnx")
    with pytest.raises(ArtifactError, match="not among the hosts"):
        policy.check("http://10.0.0.5:9090/")


def test_paths_under_a_root_may_be_named_and_links_out_of_it_may_not(tmp_path: Path) -> None:
    root = tmp_path / "models"
    (root / "team").mkdir(parents=True)
    (root / "team" / "net.onnx").write_bytes(b"x")
    (root / "out").symlink_to("/etc")
    policy = SourcePolicy(roots=(root,))
    policy.check(str(root / "team" / "net.onnx"))
    policy.check((root / "team" / "net.onnx").as_uri())
    for outside in (root / "out" / "passwd", root / ".." / "elsewhere", tmp_path / "models2"):
        with pytest.raises(ArtifactError, match="does not read files named by path"):
            policy.check(str(outside))


def test_a_local_user_may_name_any_path_and_it_is_still_not_served() -> None:
    local = SourcePolicy(local_paths=True)
    local.check("/home/me/model.onnx")
    assert not local.servable("/home/me/model.onnx")
    assert local.servable(SQUEEZENET)
    assert not local.servable("https://example.org/x.onnx")  # served from where it lives


def test_an_upload_is_named_by_a_relative_path() -> None:
    assert is_upload("model.onnx")
    assert is_upload("weights/part-1.bin")
    assert not is_upload("/abs/model.onnx")
    assert not is_upload("file:///abs/model.onnx")
    assert not is_upload(SQUEEZENET)
