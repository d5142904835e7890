"""A worker started where its framework is not installed says so and stays up: announced
with the reason (what to install), it fails the jobs sent to it with that reason, and reads
no shared queue, where it would take the jobs of the workers that can run them."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.workers import WorkerService
from shared.config import REPOSITORY_ROOT, Settings
from shared.manifests import ModelManifest, load_manifest
from shared.messages import (
    UNAVAILABLE,
    AgentOnline,
    Envelope,
    EvaluationFailed,
    RunEvaluation,
    Scenario,
    evaluation_stream,
    job_key,
)
from shared.messaging import Binding, MemoryBroker
from shared.runtime import Runtime
from shared.telemetry import Telemetry

SQUEEZENET = load_manifest(REPOSITORY_ROOT / "manifests" / "models" / "squeezenet.yaml")
assert isinstance(SQUEEZENET, ModelManifest)
WHY = (
    "framework 'tensorflow' is not installed here (no module 'tensorflow'): "
    "pip install 'dlscope[tensorflow]'"
)


@pytest.fixture
async def runtime(tmp_path: Path, namespace: str) -> AsyncIterator[Runtime]:
    settings = Settings(home=tmp_path, namespace=namespace)
    runtime = Runtime(settings, Telemetry.create(settings, "test"), MemoryBroker())
    try:
        yield runtime
    finally:
        await runtime.close()


async def test_a_worker_without_its_framework_announces_why_and_fails_its_jobs(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("services.workers.service.not_installed", lambda framework: WHY)
    heard: asyncio.Queue[Envelope] = asyncio.Queue()
    listener = runtime.bus("test")
    await listener.start()
    events = listener.topology.events

    async def hear(envelope: Envelope) -> None:
        heard.put_nowait(envelope)

    await listener.subscribe(
        listener.topology.queue("test", "heard"),
        [Binding(events, AgentOnline.TYPE), Binding(events, EvaluationFailed.TYPE)],
        hear,
    )
    worker = WorkerService(runtime, framework="tensorflow", hardware="cpu", agent_id="tf-broken")
    await worker.start()  # no ConfigurationError: it stays up to say why
    try:
        announced = (await asyncio.wait_for(heard.get(), 10)).open(AgentOnline)
        assert announced.capabilities[UNAVAILABLE] == WHY

        evaluation_id = uuid.uuid4()
        job = RunEvaluation(
            evaluation_id=evaluation_id,
            manifest=SQUEEZENET,
            framework="tensorflow",
            framework_version="*",
            hardware="cpu",
            scenario=Scenario(),
        )
        await listener.publish(
            Envelope.wrap(
                job, stream_id=evaluation_stream(evaluation_id), correlation_id=evaluation_id
            ),
            exchange=listener.topology.jobs,
            routing_key=job_key("tensorflow", "cpu", "tf-broken"),
        )
        failed = (await asyncio.wait_for(heard.get(), 10)).open(EvaluationFailed)
        assert failed.evaluation_id == evaluation_id
        assert failed.stage == "validation"
        assert failed.reason == f"agent tf-broken: {WHY}"
        # The shared queue of its kind is not its to read: a job there waits for a worker
        # that can run it, and is not failed by this one.
        other = uuid.uuid4()
        await listener.publish(
            Envelope.wrap(
                job.model_copy(update={"evaluation_id": other}),
                stream_id=evaluation_stream(other),
                correlation_id=other,
            ),
            exchange=listener.topology.jobs,
            routing_key=job_key("tensorflow", "cpu"),
        )
        assert isinstance(runtime.broker, MemoryBroker)
        await runtime.broker.drained()
        assert heard.empty()
    finally:
        await worker.stop()
        await listener.stop()


async def test_a_worker_whose_opencl_device_compiles_nothing_announces_why(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    cl = pytest.importorskip("pyopencl")
    try:
        devices = [d for platform in cl.get_platforms() for d in platform.get_devices()]
    except cl.Error:
        devices = []
    if not devices:
        pytest.skip("pyopencl finds no OpenCL device here")
    # A compiler that refuses every build, as PoCL's does on a CPU its LLVM does not know:
    # an option no OpenCL C compiler takes, for every program (no cached build either).
    monkeypatch.setenv("POCL_EXTRA_BUILD_FLAGS", "-dlscope-no-such-option")
    monkeypatch.setenv("POCL_KERNEL_CACHE", "0")
    heard: asyncio.Queue[Envelope] = asyncio.Queue()
    listener = runtime.bus("test")
    await listener.start()

    async def hear(envelope: Envelope) -> None:
        heard.put_nowait(envelope)

    await listener.subscribe(
        listener.topology.queue("test", "heard"),
        [Binding(listener.topology.events, AgentOnline.TYPE)],
        hear,
    )
    worker = WorkerService(runtime, framework="opencl", hardware="cpu", agent_id="cl-broken")
    await worker.start()  # no ConfigurationError: it stays up to say why
    try:
        announced = (await asyncio.wait_for(heard.get(), 60)).open(AgentOnline)
        why = announced.capabilities[UNAVAILABLE]
        assert why.startswith("framework 'opencl' cannot run here: its compiler builds no kernel")
        assert "build log:" in why  # what the compiler said, for whoever fixes it
        assert worker.process.pid is None  # its framework process is gone, not left idle
    finally:
        await worker.stop()
        await listener.stop()
