"""The registry's contract, as a user meets it through the gateway: the same story on the
embedded stack (memory broker, SQLite) and on RabbitMQ + PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.deployment import purge_namespace
from harness.squeezenet import SQUEEZENET_PKG as SQUEEZENET
from harness.squeezenet import SQUEEZENET_SHA
from harness.waiting import eventually
from services.gateway.context import RESOLUTION_KEPT_S
from services.recorder import RecorderService
from services.registry import RegistryService
from shared.eventstore import EventStore
from shared.eventstore.migrate import upgrade
from shared.manifests import load_manifests
from shared.messages import Envelope, RegisterArtifact, RegistrationResult
from shared.messaging import create_broker
from shared.runtime import Runtime
from shared.telemetry import Telemetry
from tests.integration.conftest import STACKS, Stack, stack_settings


def manifest(name: str = "my-net", version: str = "1.0.0", **changes: Any) -> dict[str, Any]:
    return {
        "name": name,
        "version": version,
        "description": "a user's own model",
        "framework": {"name": "onnxruntime"},
        "inputs": [{"name": "data_0", "shape": [1, 3, 224, 224]}],
        "outputs": [{"name": "softmaxout_1", "shape": [1, 1000, 1, 1]}],
        "source": {"uri": SQUEEZENET, "sha256": SQUEEZENET_SHA},
        **changes,
    }


@pytest.fixture
def stack(any_stack: Stack) -> Stack:
    return any_stack


async def test_the_built_in_zoo_is_registered_and_listed(stack: Stack) -> None:
    models = (await stack.http.get("/v1/models", params={"framework": "onnxruntime"})).json()
    assert "squeezenet" in {m["name"] for m in models}
    detail = (await stack.http.get("/v1/models/squeezenet/1.0.1")).json()
    assert detail["manifest"]["source"]["sha256"] == SQUEEZENET_SHA
    assert (await stack.http.get("/v1/models", params={"framework": "pytorch"})).json() == []


async def test_a_user_registers_a_manifest_and_evaluates_it_by_name_and_constraint(
    stack: Stack,
) -> None:
    for version in ("1.0.0", "1.1.0", "2.0.0"):
        response = await stack.http.post("/v1/models", json=manifest(version=version))
        assert response.status_code == 201, response.text
        assert response.json()["created"] is True
    await eventually(lambda: stack.listed("my-net", "2.0.0"))

    evaluation = await stack.evaluate("my-net", ">=1,<2")
    assert evaluation["status"] == "completed", evaluation["error"]
    assert evaluation["model_version"] == "1.1.0"


async def test_a_manifest_can_be_sent_as_yaml(stack: Stack) -> None:
    response = await stack.http.post(
        "/v1/models",
        content=yaml.safe_dump(manifest(name="yaml-net")),
        headers={"content-type": "application/yaml"},
    )
    assert response.status_code == 201, response.text


async def test_versions_are_immutable(stack: Stack) -> None:
    assert (await stack.http.post("/v1/models", json=manifest())).status_code == 201
    again = await stack.http.post("/v1/models", json=manifest())
    assert (again.status_code, again.json()["created"]) == (200, False)

    changed = await stack.http.post("/v1/models", json=manifest(description="other"))
    assert changed.status_code == 409
    assert "my-net@1.0.0 is already registered with different content" in changed.json()["detail"]
    await eventually(lambda: stack.listed("my-net", "1.0.0"))
    stored = (await stack.http.get("/v1/models/my-net/1.0.0")).json()
    assert stored["manifest"]["description"] == "a user's own model"


@pytest.mark.parametrize(
    ("submitted", "message"),
    [
        (manifest(version="1.0"), "version: Value error, '1.0' is not a semantic version"),
        (manifest(colour="red"), "colour: Extra inputs are not permitted"),
        (
            manifest(source={"uri": "model.onnx", "sha256": SQUEEZENET_SHA}),
            "source.uri 'model.onnx' names a file uploaded with the registration, and no "
            "uploaded file has its sha256",
        ),
        (
            manifest(source={"uri": SQUEEZENET, "sha256": "0" * 64}),
            "source: pkg://onnx/backend/test/data/light/light_squeezenet.onnx: sha256 mismatch",
        ),
        (
            manifest(source={"uri": "/no/such/model.onnx", "sha256": SQUEEZENET_SHA}),
            "source: /no/such/model.onnx: the registry does not read files named by path",
        ),
    ],
)
async def test_a_bad_manifest_is_refused_naming_the_field_and_nothing_is_registered(
    stack: Stack, submitted: dict[str, Any], message: str
) -> None:
    response = await stack.http.post("/v1/models", json=submitted)
    assert response.status_code == 422
    assert message in response.json()["detail"]
    assert (await stack.http.get("/v1/models/my-net")).status_code == 404


async def test_a_body_that_is_neither_json_nor_yaml_is_refused(stack: Stack) -> None:
    response = await stack.http.post(
        "/v1/models", content=b"name=x", headers={"content-type": "text/plain"}
    )
    assert response.status_code == 415


async def test_a_version_registered_after_an_evaluation_is_the_next_ones_newest(
    stack: Stack,
) -> None:
    """The gateway keeps what "*" resolved to, for dispatch's sake; a registration, through
    this gateway or straight through the broker, is seen by the very next request."""
    assert (await stack.http.post("/v1/models", json=manifest())).status_code == 201
    assert (await stack.evaluate("my-net"))["model_version"] == "1.0.0"

    # Registered through the gateway: the next request resolves it
    assert (await stack.http.post("/v1/models", json=manifest(version="1.1.0"))).status_code == 201
    assert (await stack.evaluate("my-net"))["model_version"] == "1.1.0"

    # Registered by a client of the broker: the gateway hears of it, well before its bound
    bus = stack.runtime.bus("test")
    await bus.start()
    try:
        call = Envelope.wrap(
            RegisterArtifact(manifest=manifest(version="1.2.0")),
            stream_id="registry",
            correlation_id=uuid.uuid4(),
        )
        reply = await bus.request("rpc.registry.register", call, timeout=10)
    finally:
        await bus.stop()
    assert reply.open(RegistrationResult).created

    async def newest_chosen() -> bool:
        return (await stack.evaluate("my-net"))["model_version"] == "1.2.0"

    await eventually(newest_chosen, timeout=RESOLUTION_KEPT_S / 3)


async def test_a_deprecated_version_is_chosen_only_when_pinned(stack: Stack) -> None:
    for version in ("1.0.0", "1.1.0"):
        assert (
            await stack.http.post("/v1/models", json=manifest(version=version))
        ).status_code == 201
    response = await stack.http.post(
        "/v1/models/my-net/1.1.0/deprecate", json={"reason": "wrong preprocessing"}
    )
    assert response.status_code == 204

    assert (await stack.evaluate("my-net"))["model_version"] == "1.0.0"
    assert (await stack.evaluate("my-net", "==1.1.0"))["model_version"] == "1.1.0"

    async def shown_deprecated() -> bool:
        versions = (await stack.http.get("/v1/models/my-net")).json()
        return any(
            v["deprecated"] and v["deprecation_reason"] == "wrong preprocessing" for v in versions
        )

    await eventually(shown_deprecated)
    missing = await stack.http.post("/v1/models/my-net/9.9.9/deprecate", json={"reason": "x"})
    assert missing.status_code == 404


async def test_registrations_survive_a_registry_restart(stack: Stack) -> None:
    assert (await stack.http.post("/v1/models", json=manifest())).status_code == 201
    await eventually(lambda: stack.listed("my-net", "1.0.0"))
    old = next(s for s in stack.services if isinstance(s, RegistryService))
    await old.stop()

    restarted = RegistryService(stack.runtime)
    await restarted.start()
    try:
        # Its state came back from the log, not from the old instance.
        assert restarted.catalog.resolve("model", "my-net").version == "1.0.0"
        evaluation = await stack.evaluate("my-net")
        assert evaluation["status"] == "completed", evaluation["error"]
    finally:
        await restarted.stop()


@pytest.fixture(params=STACKS)
async def bare_runtime(
    request: pytest.FixtureRequest, tmp_path: Path, namespace: str
) -> AsyncIterator[Runtime]:
    """A runtime with no service started, on a migrated, empty event store."""
    settings = stack_settings(request, tmp_path, namespace)
    await upgrade(settings.resolved_database_url)
    runtime = Runtime(
        settings, Telemetry.create(settings, "test"), create_broker(settings.broker_url)
    )
    try:
        yield runtime
    finally:
        await runtime.close()
        if request.param != "embedded":
            await purge_namespace(settings.broker_url, namespace)


async def test_a_registry_started_before_any_recorder_has_its_built_ins_recorded(
    bare_runtime: Runtime,
) -> None:
    """Services start in any order: the registry publishes its built-ins at once, and the
    events must wait for the recorder rather than be dropped as unroutable."""
    registry = RegistryService(bare_runtime)
    recorder = RecorderService(bare_runtime)
    store = EventStore.from_url(bare_runtime.settings.resolved_database_url)
    manifests = load_manifests(bare_runtime.settings.manifests_dir)
    built_ins = {(m.kind, m.name, m.version) for m in manifests}
    assert ("dataset", "digits", "1.0.0") in built_ins  # what the launch page offers
    try:
        await registry.start()  # its built-ins are published: nobody consumes them yet
        await recorder.start()

        async def all_recorded() -> bool:
            views = await store.list_artifacts(include_deprecated=True)
            return {(v.kind, v.name, v.version) for v in views} >= built_ins

        await eventually(all_recorded, timeout=30)
    finally:
        await recorder.stop()
        await registry.stop()
        await store.close()
