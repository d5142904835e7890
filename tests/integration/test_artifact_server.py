"""The registry's artifact server, fetched from as a worker on another host does: the bytes a
registered manifest pins arrive verified; anything else is refused with a reason that names
the URL and the cause."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.registry.artifacts import ArtifactServer, listen_address
from services.registry.catalog import Catalog
from shared.artifacts import ArtifactCache, served_manifest
from shared.errors import ArtifactError
from shared.manifests import ModelManifest, ModelSource

CONTENT = b"an onnx graph, as far as this test is concerned\n" * 1000


def manifest(uri: str, sha256: str) -> ModelManifest:
    return ModelManifest.model_validate(
        {
            "name": "net",
            "version": "1.0.0",
            "framework": {"name": "onnxruntime", "version": "*"},
            "inputs": [{"name": "x", "element_type": "float32", "shape": [1, 4]}],
            "outputs": [{"name": "y", "element_type": "float32", "shape": [1, 4]}],
            "source": {"uri": uri, "sha256": sha256},
        }
    )


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "control-plane" / "net.onnx"
    path.parent.mkdir()
    path.write_bytes(CONTENT)
    return path


@pytest.fixture
async def server(model_file: Path) -> AsyncIterator[tuple[ArtifactServer, Catalog]]:
    catalog = Catalog()
    catalog.learn(manifest(model_file.as_uri(), hashlib.sha256(CONTENT).hexdigest()))
    served = ArtifactServer(catalog.file, host="127.0.0.1", port=0)
    await served.start()
    try:
        yield served, catalog
    finally:
        await served.stop()


def pinned(catalog: Catalog) -> ModelSource:
    registered = catalog.resolve("model", "net")
    assert isinstance(registered, ModelManifest)
    return registered.source


def served_source(server: ArtifactServer, source: ModelSource) -> ModelSource:
    base = f"http://127.0.0.1:{server.port}"
    return served_manifest(manifest(source.uri, source.sha256), base).source


async def fetch(tmp_path: Path, source: ModelSource) -> Path:
    cache = ArtifactCache(tmp_path / "worker-home" / "artifacts")
    return await asyncio.to_thread(cache.fetch, source)


async def test_a_worker_fetches_a_registered_file_by_url_verified(
    server: tuple[ArtifactServer, Catalog], model_file: Path, tmp_path: Path
) -> None:
    served, catalog = server
    source = served_source(served, pinned(catalog))
    assert source.uri.startswith(f"http://127.0.0.1:{served.port}/sha256/")
    cached = await fetch(tmp_path, source)
    assert cached.read_bytes() == CONTENT
    assert model_file not in (cached, *cached.parents)


async def test_a_digest_no_manifest_pins_is_refused_naming_the_url(
    server: tuple[ArtifactServer, Catalog], tmp_path: Path
) -> None:
    served, _ = server
    unknown = ModelSource(uri="/elsewhere/x.onnx", sha256="0" * 64)
    source = served_source(served, unknown)
    with pytest.raises(ArtifactError) as refused:
        await fetch(tmp_path, source)
    message = str(refused.value)
    assert source.uri in message
    assert "HTTP 404" in message
    assert f"no registered manifest pins a file with sha256 {'0' * 64}" in message


async def test_a_file_gone_from_the_registry_host_is_refused_saying_so(
    server: tuple[ArtifactServer, Catalog], model_file: Path, tmp_path: Path
) -> None:
    served, catalog = server
    await asyncio.to_thread(model_file.unlink)
    source = served_source(served, pinned(catalog))
    with pytest.raises(ArtifactError, match=r"registry's copy of file://.* is missing"):
        await fetch(tmp_path, source)


async def test_a_file_changed_on_the_registry_host_fails_verification_on_the_worker(
    server: tuple[ArtifactServer, Catalog], model_file: Path, tmp_path: Path
) -> None:
    served, catalog = server
    await asyncio.to_thread(model_file.write_bytes, CONTENT + b"tampered")
    source = served_source(served, pinned(catalog))
    with pytest.raises(ArtifactError, match="sha256 mismatch"):
        await fetch(tmp_path, source)
    assert not list((tmp_path / "worker-home").rglob("net.onnx"))


async def test_an_unreachable_server_fails_the_fetch_naming_url_and_cause(
    server: tuple[ArtifactServer, Catalog], tmp_path: Path
) -> None:
    served, catalog = server
    source = served_source(served, pinned(catalog))
    await served.stop()
    with pytest.raises(ArtifactError) as refused:
        await fetch(tmp_path, source)
    assert str(refused.value).startswith(f"{source.uri}: cannot connect to the server")


def test_the_server_listens_where_told_or_at_the_urls_port_everywhere() -> None:
    assert listen_address("http://10.0.0.5:8081", None) == ("0.0.0.0", 8081)
    assert listen_address("https://artifacts.example", None) == ("0.0.0.0", 443)
    assert listen_address("http://10.0.0.5:8081", "10.0.0.5:9000") == ("10.0.0.5", 9000)
