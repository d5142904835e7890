"""The registry's artifact server, fetched from as a worker on another host does: the bytes a
registered manifest pins arrive verified; anything else is refused with a reason that names
the URL and the cause. It serves only what the registry's source policy allows, to those
who have the token when one is set, and listens beyond loopback only with one (or the
operator's explicit opt-in)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from services.registry.artifacts import ArtifactServer, listen_address
from services.registry.catalog import Catalog
from shared.artifacts import ArtifactCache, SourcePolicy, served_manifest
from shared.config import Settings
from shared.errors import ArtifactError, ConfigurationError
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


def artifact_server(
    catalog: Catalog, root: Path, settings: Settings, host: str = "127.0.0.1"
) -> ArtifactServer:
    # The registry's own policy: its files are those under the roots it serves from.
    policy = SourcePolicy(roots=(root,))
    return ArtifactServer(
        catalog.file, servable=policy.servable, settings=settings, host=host, port=0
    )


@pytest.fixture
async def server(model_file: Path) -> AsyncIterator[tuple[ArtifactServer, Catalog]]:
    catalog = Catalog()
    catalog.learn(manifest(model_file.as_uri(), hashlib.sha256(CONTENT).hexdigest()))
    served = artifact_server(catalog, model_file.parent, Settings(home=model_file.parent))
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


async def fetch(tmp_path: Path, source: ModelSource, tokens: dict[str, str] | None = None) -> Path:
    cache = ArtifactCache(tmp_path / "worker-home" / "artifacts", tokens=tokens)
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


async def test_a_registered_file_outside_the_policy_is_never_served(
    tmp_path: Path, model_file: Path
) -> None:
    """A manifest naming a file of the host (as one registered before the policy, or by a
    local user, may still be in the log) does not make the server read it."""
    secret = tmp_path / "private" / "key.txt"
    secret.parent.mkdir()
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    digest = hashlib.sha256(secret.read_bytes()).hexdigest()
    catalog = Catalog()
    catalog.learn(manifest(secret.as_uri(), digest))
    served = artifact_server(catalog, model_file.parent, Settings(home=tmp_path))
    await served.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{served.port}") as http:
            for name in ("key.txt", "x"):
                response = await http.get(f"/sha256/{digest}/{name}")
                assert response.status_code == 404
                assert "root:" not in response.text
                assert response.text == f"no registered manifest pins a file with sha256 {digest}"
    finally:
        await served.stop()


async def test_with_a_token_only_those_who_have_it_fetch(tmp_path: Path, model_file: Path) -> None:
    catalog = Catalog()
    catalog.learn(manifest(model_file.as_uri(), hashlib.sha256(CONTENT).hexdigest()))
    settings = Settings(home=tmp_path, api_token="s3cret")
    served = artifact_server(catalog, model_file.parent, settings)
    await served.start()
    try:
        source = served_source(served, pinned(catalog))
        with pytest.raises(ArtifactError, match=r"HTTP 401.*needs 'Authorization: Bearer"):
            await fetch(tmp_path / "anonymous", source)
        with pytest.raises(ArtifactError, match="HTTP 401"):
            await fetch(tmp_path / "wrong", source, {f"http://127.0.0.1:{served.port}": "guess"})
        base = f"http://127.0.0.1:{served.port}"
        cached = await fetch(tmp_path / "worker", source, {base: "s3cret"})
        assert cached.read_bytes() == CONTENT
    finally:
        await served.stop()


def test_the_server_listens_where_told_or_at_the_urls_port_on_loopback_without_a_token() -> None:
    assert listen_address(Settings(artifact_url="http://10.0.0.5:8081")) == ("127.0.0.1", 8081)
    assert listen_address(Settings(artifact_url="https://artifacts.example", api_token="t")) == (
        "0.0.0.0",
        443,
    )
    told = Settings(artifact_url="http://10.0.0.5:8081", artifact_listen="10.0.0.5:9000")
    assert listen_address(told) == ("10.0.0.5", 9000)


async def test_beyond_loopback_without_a_token_it_needs_the_operators_opt_in(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ConfigurationError, match="DLSCOPE_ALLOW_UNAUTHENTICATED"):
        await artifact_server(Catalog(), tmp_path, Settings(home=tmp_path), "0.0.0.0").start()
    opened = Settings(home=tmp_path, allow_unauthenticated=True)
    served = artifact_server(Catalog(), tmp_path, opened, "0.0.0.0")
    with caplog.at_level(logging.WARNING):
        await served.start()
    try:
        assert "listens on 0.0.0.0 with no token" in caplog.text
    finally:
        await served.stop()
