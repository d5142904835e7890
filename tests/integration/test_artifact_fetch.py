"""Artifacts downloaded over HTTP: verified before they are cached, cached so they are
downloaded once, refused with a reason a user can act on, never left half-written."""

from __future__ import annotations

import contextlib
import hashlib
import io
import socket
import tarfile
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from shared.artifacts import Archive, ArtifactCache, ArtifactLimits
from shared.errors import ArtifactError
from shared.manifests import ModelSource


@dataclass
class Site:
    """What the test server serves, and what it was asked for."""

    url: str
    files: dict[str, bytes] = field(default_factory=dict)
    requests: Counter[str] = field(default_factory=Counter)
    # Paths answered without a Content-Length, the body ending when the connection closes.
    unsized: set[str] = field(default_factory=set)
    # Paths never answered until the test is over.
    stalled: set[str] = field(default_factory=set)
    release: threading.Event = field(default_factory=threading.Event)

    def serve(self, path: str, body: bytes) -> ModelSource:
        self.files[path] = body
        return ModelSource(uri=self.url + path, sha256=hashlib.sha256(body).hexdigest())


class _Server(ThreadingHTTPServer):
    # Join request threads on close, so no handler outlives its test.
    daemon_threads = False


def handler_for(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            site.requests[self.path] += 1
            if self.path in site.stalled:
                site.release.wait(timeout=30)
                return
            body = site.files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            if self.path not in site.unsized:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            # The client may give up on purpose: that is what some tests check.
            with contextlib.suppress(ConnectionError):
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def site() -> Iterator[Site]:
    server = _Server(("127.0.0.1", 0), BaseHTTPRequestHandler)
    host, port = server.server_address[:2]
    served = Site(url=f"http://{host!s}:{port}")
    server.RequestHandlerClass = handler_for(served)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="artifact server"
    )
    thread.start()
    try:
        yield served
    finally:
        served.release.set()
        server.shutdown()
        server.server_close()
        thread.join()


def files_under(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if not p.is_dir())


def test_a_download_is_verified_cached_and_not_downloaded_again(site: Site, tmp_path: Path) -> None:
    source = site.serve("/models/resnet.onnx", b"graph and weights")
    cache = ArtifactCache(tmp_path / "cache")
    first = cache.fetch(source)
    assert first == tmp_path / "cache" / "sha256" / source.sha256 / "resnet.onnx"
    assert first.read_bytes() == b"graph and weights"
    assert cache.fetch(source) == first
    assert site.requests["/models/resnet.onnx"] == 1


def test_a_missing_file_names_the_http_status(site: Site, tmp_path: Path) -> None:
    source = ModelSource(uri=f"{site.url}/models/absent.onnx", sha256="0" * 64)
    with pytest.raises(ArtifactError, match=r"/models/absent.onnx: download failed with HTTP 404"):
        ArtifactCache(tmp_path / "cache").fetch(source)


def test_a_download_with_the_wrong_sha256_is_not_cached(site: Site, tmp_path: Path) -> None:
    pinned = site.serve("/models/resnet.onnx", b"the weights the manifest pins")
    site.files["/models/resnet.onnx"] = b"weights swapped on the server"
    with pytest.raises(ArtifactError, match="sha256 mismatch"):
        ArtifactCache(tmp_path / "cache").fetch(pinned)
    assert files_under(tmp_path / "cache") == []


@pytest.mark.parametrize(
    ("sized", "message"),
    [
        pytest.param(True, "Content-Length is 5000 bytes, over the limit of 1024", id="declared"),
        pytest.param(False, "more than 1024 bytes received", id="undeclared"),
    ],
)
def test_an_oversized_download_is_refused(
    site: Site, tmp_path: Path, sized: bool, message: str
) -> None:
    source = site.serve("/models/huge.onnx", bytes(5000))
    if not sized:
        site.unsized.add("/models/huge.onnx")
    cache = ArtifactCache(tmp_path / "cache", ArtifactLimits(max_download_bytes=1024))
    with pytest.raises(ArtifactError, match=f"huge.onnx: too large to download: {message}"):
        cache.fetch(source)
    assert files_under(tmp_path / "cache") == []


def test_a_server_that_stops_answering_times_out(site: Site, tmp_path: Path) -> None:
    source = site.serve("/models/slow.onnx", b"never sent")
    site.stalled.add("/models/slow.onnx")
    cache = ArtifactCache(tmp_path / "cache", ArtifactLimits(download_timeout_s=0.2))
    with pytest.raises(ArtifactError, match=r"slow.onnx: download timed out \(ReadTimeout"):
        cache.fetch(source)
    assert files_under(tmp_path / "cache") == []


def test_a_server_that_is_not_there_is_named(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    source = ModelSource(uri=f"http://127.0.0.1:{port}/m.onnx", sha256="0" * 64)
    with pytest.raises(ArtifactError, match=r"m.onnx: cannot connect to the server: .*refused"):
        ArtifactCache(tmp_path / "cache").fetch(source)


def test_an_archive_is_downloaded_once_and_its_member_served(site: Site, tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("resnet/model.onnx")
        info.size = len(b"graph")
        tar.addfile(info, io.BytesIO(b"graph"))
    source = site.serve("/archives/resnet.tgz", buffer.getvalue())
    cache = ArtifactCache(tmp_path / "cache")
    model = cache.fetch(source, Archive(member="resnet/model.onnx"))
    assert model.read_bytes() == b"graph"
    assert cache.fetch(source, Archive(member="resnet/model.onnx")) == model
    assert site.requests["/archives/resnet.tgz"] == 1
