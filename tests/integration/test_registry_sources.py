"""What a registration from outside may name, tried as an attacker and as a user would, on
the embedded stack and on RabbitMQ + PostgreSQL.

An attacker who reaches the gateway names a file of the registry's host (``/etc/passwd``, a
``file://`` URL, a ``pkg://`` path that climbs out of its package, a private file): refused
before the file is read, with no digest, size or content of it in the answer, and nothing
registered. A user uploads their model with its manifest (as ``dlscope models register
--gateway`` does): it is kept by sha256 and evaluated. An operator lists folders the registry
may read from: files there may be named by path, and a link out of them may not.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from dlscope.served import served_manifest
from harness.squeezenet import SQUEEZENET_PKG as SQUEEZENET
from harness.squeezenet import SQUEEZENET_SHA
from harness.stub_tokenizer import write_stub_tokenizer
from harness.waiting import eventually
from shared.artifacts import locate
from shared.messages import Envelope, RegisterArtifact, RegistrationResult
from tests.conftest import register_model
from tests.integration.conftest import STACKS, Stack, stack_settings, started_stack

DIGEST = re.compile(r"[0-9a-f]{64}")


def manifest(uri: str, sha256: str, name: str = "private-net", **changes: Any) -> dict[str, Any]:
    return {
        "name": name,
        "version": "1.0.0",
        "framework": {"name": "onnxruntime"},
        "inputs": [{"name": "data_0", "shape": [1, 3, 224, 224]}],
        "outputs": [{"name": "softmaxout_1", "shape": [1, 1000, 1, 1]}],
        "source": {"uri": uri, "sha256": sha256},
        **changes,
    }


@dataclass(frozen=True)
class File:
    path: Path
    content: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


@pytest.fixture
def private_model(tmp_path: Path) -> File:
    """A user's own model file, somewhere on the machine the gateway runs on."""
    path = tmp_path / "user" / "net.onnx"
    path.parent.mkdir()
    shutil.copyfile(locate(SQUEEZENET), path)
    return File(path, path.read_bytes())


@pytest.fixture
def host_files(tmp_path: Path) -> list[tuple[str, str]]:
    """Files of the registry's host an attacker would name: (URI, the file's own sha256)."""
    secret = tmp_path / "private" / "credentials"
    secret.parent.mkdir()
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    passwd = hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest()
    mine = hashlib.sha256(secret.read_bytes()).hexdigest()
    return [
        ("/etc/passwd", passwd),
        ("file:///etc/passwd", passwd),
        ("pkg://onnx/../../../../../../../../etc/passwd", passwd),
        ("pkg://onnx/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd", passwd),
        (str(secret), mine),
        (secret.as_uri(), mine),
    ]


async def test_a_manifest_naming_a_file_of_the_registrys_host_is_refused_unread(
    any_stack: Stack, host_files: list[tuple[str, str]]
) -> None:
    for uri, digest in host_files:
        # With a wrong digest (to learn the file's), and with the right one (as if learnt).
        for pinned in ("0" * 64, digest):
            response = await any_stack.http.post("/v1/models", json=manifest(uri, pinned))
            assert response.status_code == 422, (uri, response.text)
            detail = response.json()["detail"]
            assert set(DIGEST.findall(detail)) <= {pinned}, detail  # no digest of the file
            assert "root:" not in detail
            assert "does not read files named by path" in detail or "leaves package" in detail
    assert (await any_stack.http.get("/v1/models/private-net")).status_code == 404


async def test_a_manifest_pointing_workers_into_the_registrys_network_is_refused(
    any_stack: Stack,
) -> None:
    # The broker's management API, the database, a cloud's metadata service: a worker
    # downloading from them would report back what answers there.
    for uri in (
        "http://127.0.0.1:15672/api/users",
        "http://localhost:5432/",
        "http://169.254.169.254/latest/meta-data/",
    ):
        response = await any_stack.http.post("/v1/models", json=manifest(uri, "0" * 64))
        assert response.status_code == 422, (uri, response.text)
        assert "an address of the registry's own network" in response.json()["detail"]
    assert (await any_stack.http.get("/v1/models/private-net")).status_code == 404


async def test_a_model_uploaded_with_its_manifest_is_kept_by_digest_and_evaluated(
    any_stack: Stack, private_model: File
) -> None:
    digest = private_model.sha256
    response = await register_model(
        any_stack.http, manifest(str(private_model.path), digest, name="uploaded-net")
    )
    assert response.status_code == 201, response.text
    source = response.json()["manifest"]["source"]
    store = any_stack.runtime.settings.resolved_artifact_store
    assert source["uri"] == (store / "sha256" / digest / "net.onnx").as_uri()
    await eventually(lambda: any_stack.listed("uploaded-net", "1.0.0"))
    evaluation = await any_stack.evaluate("uploaded-net")
    assert evaluation["status"] == "completed", evaluation["error"]


async def test_a_served_models_manifest_is_uploaded_with_its_tokenizer_and_no_file_else(
    any_stack: Stack, tmp_path: Path
) -> None:
    # What `dlscope submit --served-model stub --tokenizer FILE` registers through a gateway.
    tokenizer = write_stub_tokenizer(tmp_path / "tokenizer.json")
    served = served_manifest("org/Stub-1B", tokenizer)
    response = await register_model(any_stack.http, served)
    assert response.status_code == 201, response.text
    kept = response.json()["manifest"]
    assert kept["source"] is None  # the server holds the weights
    assert kept["served_as"] == "org/Stub-1B"
    store = any_stack.runtime.settings.resolved_artifact_store
    digest = served.sources["tokenizer"].sha256
    assert kept["tokenizer"]["uri"] == (store / "sha256" / digest / "tokenizer.json").as_uri()
    await eventually(lambda: any_stack.listed("served-org-stub-1b", "1.0.0"))
    listed = await any_stack.http.get("/v1/models", params={"framework": "endpoint"})
    assert [m["name"] for m in listed.json()] == ["served-org-stub-1b"]


async def test_an_upload_that_is_not_the_file_the_manifest_pins_is_refused_and_not_kept(
    any_stack: Stack, private_model: File
) -> None:
    uploaded = private_model.content + b"changed"
    response = await any_stack.http.post(
        "/v1/models",
        files=[
            ("manifest", ("m.json", orjson.dumps(manifest("net.onnx", SQUEEZENET_SHA)), "")),
            ("file", ("net.onnx", uploaded, "application/octet-stream")),
        ],
    )
    assert response.status_code == 422
    detail = response.json()["detail"]
    # The caller's own file: its digest may be said, and helps.
    assert f"net.onnx (sha256 {hashlib.sha256(uploaded).hexdigest()})" in detail
    assert "no uploaded file has its sha256 " + SQUEEZENET_SHA in detail
    assert not any(any_stack.runtime.settings.resolved_artifact_store.rglob("net.onnx"))


async def test_an_upload_that_no_source_names_is_refused(any_stack: Stack) -> None:
    response = await any_stack.http.post(
        "/v1/models",
        files=[
            ("manifest", ("m.json", orjson.dumps(manifest(SQUEEZENET, SQUEEZENET_SHA)), "")),
            ("file", ("stray.bin", b"something else", "application/octet-stream")),
        ],
    )
    assert response.status_code == 422
    assert "uploaded but named by no source of the manifest: stray.bin" in response.text


async def test_a_labels_file_of_the_host_is_refused_and_inline_labels_are_kept(
    any_stack: Stack,
) -> None:
    def with_labels(labels: object) -> dict[str, Any]:
        return manifest(
            SQUEEZENET,
            SQUEEZENET_SHA,
            name="labelled-net",
            outputs=[
                {
                    "name": "softmaxout_1",
                    "shape": [1, 1000, 1, 1],
                    "steps": [{"op": "flatten"}, {"op": "topk", "k": 5, "labels": labels}],
                }
            ],
        )

    refused = await any_stack.http.post("/v1/models", json=with_labels("/etc/passwd"))
    assert refused.status_code == 422
    assert "outputs.0.steps.1.labels: /etc/passwd" in refused.json()["detail"]
    assert "list the labels in the manifest" in refused.json()["detail"]
    kept = await any_stack.http.post("/v1/models", json=with_labels([f"c{i}" for i in range(1000)]))
    assert kept.status_code == 201, kept.text


@pytest.fixture(params=STACKS)
async def rooted(
    request: pytest.FixtureRequest, tmp_path: Path, namespace: str
) -> AsyncIterator[tuple[Stack, Path]]:
    """A stack whose operator lets registrations name files under one folder."""
    root = tmp_path / "models"
    root.mkdir()
    settings = stack_settings(request, tmp_path, namespace, registry_source_roots=(root,))
    async with started_stack(settings, embedded=request.param == "embedded") as stack:
        yield stack, root


async def test_files_under_the_operators_roots_may_be_named_and_links_out_may_not(
    rooted: tuple[Stack, Path], private_model: File
) -> None:
    stack, root = rooted
    shared = root / "team" / "net.onnx"
    await asyncio.to_thread(shared.parent.mkdir)
    await asyncio.to_thread(shutil.copyfile, private_model.path, shared)
    digest = private_model.sha256
    named = await stack.http.post("/v1/models", json=manifest(str(shared), digest, name="team"))
    assert named.status_code == 201, named.text
    assert named.json()["manifest"]["source"]["uri"] == str(shared)  # used where it lies

    await asyncio.to_thread((root / "escape").symlink_to, "/etc/passwd")
    linked = await stack.http.post("/v1/models", json=manifest(str(root / "escape"), "0" * 64))
    assert linked.status_code == 422
    assert "does not read files named by path" in linked.json()["detail"]
    climbing = await stack.http.post(
        "/v1/models", json=manifest(f"{root}/../../../etc/passwd", "0" * 64, name="climb")
    )
    assert climbing.status_code == 422


BILLION_LAUGHS = "\n".join(
    [
        "name: lol",
        "version: 1.0.0",
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(
            f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 10)}]"
            for i in range(6)
        ),
        "description: *g",
    ]
)


async def test_a_yaml_bomb_is_refused_at_once(any_stack: Stack) -> None:
    assert len(BILLION_LAUGHS) < 1500  # 10^7 strings, once expanded
    response = await any_stack.http.post(
        "/v1/models", content=BILLION_LAUGHS, headers={"content-type": "application/yaml"}
    )
    assert response.status_code == 422
    assert "aliases (*a) are not accepted in a manifest" in response.json()["detail"]
    # A document of more nodes than the bound, within the body's bound.
    nodes = "description: x\nlabels: [" + ",".join(["0"] * 210_000) + "]\n"
    crowded = await any_stack.http.post(
        "/v1/models", content=nodes, headers={"content-type": "application/yaml"}
    )
    assert crowded.status_code == 422
    assert "more than 200000 nodes (DLSCOPE_MAX_MANIFEST_NODES)" in crowded.json()["detail"]


async def test_a_registration_names_what_is_too_long_and_quotes_little_of_it(
    any_stack: Stack,
) -> None:
    long = manifest(SQUEEZENET, SQUEEZENET_SHA, description="x" * 70_000)
    response = await any_stack.http.post("/v1/models", json=long)
    assert response.status_code == 422
    assert "description: String should have at most 65536 characters" in response.text
    assert len(response.content) < 2048
    huge = await any_stack.http.post(
        "/v1/models",
        content=orjson.dumps(manifest(SQUEEZENET, SQUEEZENET_SHA, description="x" * 10**7)),
        headers={"content-type": "application/json"},
    )
    assert huge.status_code == 413
    assert "over 1048576 bytes (DLSCOPE_MAX_BODY_BYTES)" in huge.json()["detail"]


async def test_only_the_embedded_users_own_registration_may_name_any_of_their_files(
    any_stack: Stack, private_model: File
) -> None:
    """``dlscope models register`` without a gateway asks the user's own registry, in their
    own process, which reads their files where they are. On a shared broker, anyone could say
    "local": there the claim changes nothing."""
    call = RegisterArtifact(
        manifest=manifest(str(private_model.path), private_model.sha256), local=True
    )
    bus = any_stack.runtime.bus("test")
    await bus.start()
    try:
        envelope = Envelope.wrap(call, stream_id="registry", correlation_id=uuid.uuid4())
        reply = await bus.request("rpc.registry.register", envelope, timeout=10)
    finally:
        await bus.stop()
    result = reply.open(RegistrationResult)
    if any_stack.runtime.settings.broker_url.startswith("memory://"):
        assert result.error is None
        assert result.manifest is not None
        assert result.manifest.source.uri == str(private_model.path)
    else:
        assert result.manifest is None
        assert "does not read files named by path" in (result.error or "")


async def test_an_http_client_cannot_claim_to_be_the_local_user(any_stack: Stack) -> None:
    response = await any_stack.http.post(
        "/v1/models", json={**manifest("/etc/passwd", "0" * 64), "local": True}
    )
    assert response.status_code == 422
    assert "local: Extra inputs are not permitted" in response.json()["detail"]
