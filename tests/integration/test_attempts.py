"""A job delivered again for an evaluation that already has its outcome is not run: the
worker asks the scheduler whether its attempt still stands, is told no, and acks the job
without a start, a measurement or a second outcome. Embedded and on RabbitMQ + PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from services.workers.handover import MEASURE_JOB, FrameworkCall
from services.workers.isolation import FrameworkProcess
from shared.eventstore import EventStore
from shared.messages import Envelope, RunEvaluation, Scenario, encode, evaluation_stream, job_key
from shared.messaging import OutgoingMessage
from shared.messaging.broker import ATTEMPT_HEADER
from tests.integration.conftest import Stack


async def test_a_job_delivered_again_after_its_evaluations_failure_is_not_run(
    any_stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured: list[str] = []
    call = FrameworkProcess.call

    async def counted(
        self: FrameworkProcess, function: FrameworkCall[Any], *arguments: Any, **options: Any
    ) -> Any:
        if function == MEASURE_JOB:
            measured.append(function.target)
        return await call(self, function, *arguments, **options)

    monkeypatch.setattr(FrameworkProcess, "call", counted)

    # Given an evaluation that failed (no worker runs the framework version it asks for)
    failed = await any_stack.evaluate("squeezenet", framework_version=">=99")
    assert failed["status"] == "failed"
    evaluation_id = failed["id"]

    # When its job reaches a worker again, as attempt 2 (as after its first worker died)
    settings = any_stack.runtime.settings
    async with EventStore.from_url(settings.resolved_database_url) as store:
        (artifact,) = await store.list_artifacts(kind="model", name="squeezenet")
    manifest = artifact.model_manifest()
    assert manifest is not None
    job = Envelope.wrap(
        RunEvaluation(
            evaluation_id=evaluation_id,
            manifest=manifest,
            framework="onnxruntime",
            framework_version="*",
            hardware="cpu",
            scenario=Scenario(iterations=3, min_duration_s=0, warmup=0),
        ),
        stream_id=evaluation_stream(evaluation_id),
        correlation_id=evaluation_id,
    )
    await any_stack.runtime.broker.publish(
        any_stack.runtime.topology.jobs,
        job_key("onnxruntime", "cpu"),
        OutgoingMessage(
            body=encode(job), message_id=str(job.event_id), headers={ATTEMPT_HEADER: "2"}
        ),
    )
    # and a real evaluation after it, on the same queue
    done = await any_stack.evaluate("squeezenet")
    assert done["status"] == "completed", done["error"]

    # Then the job delivered again was not run: one measurement, the real one's, and the
    # failed evaluation has its one outcome and no attempt after it
    assert len(measured) == 1
    events = (await any_stack.http.get(f"/v1/evaluations/{evaluation_id}/events")).json()
    assert [e["type"] for e in events] == ["evaluation.requested", "evaluation.failed"]
    again = (await any_stack.http.get(f"/v1/evaluations/{evaluation_id}")).json()
    assert (again["status"], again["error"], again["result"]) == ("failed", failed["error"], None)
