"""A restarted analyzer follows again every experiment in flight, from the event store: the
comparison comes out once, whether the members finished before or after the restart, or at
the deadline the experiment was given. Embedded and on RabbitMQ + PostgreSQL.

The scheduler and the workers are played by this test, which publishes their events."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.deployment import purge_namespace
from harness.waiting import eventually
from services.analyzer import AnalyzerService
from services.recorder import RecorderService
from shared.eventstore import EventStore, ExperimentView
from shared.messages import (
    Envelope,
    EvaluationCompleted,
    EvaluationFailed,
    EvaluationRequested,
    ExperimentMember,
    ExperimentRequested,
    ExperimentScheduled,
    LatencySummary,
    ModelRef,
    ParityTolerance,
    Payload,
    evaluation_stream,
    experiment_stream,
)
from shared.messaging import Bus, create_broker
from shared.runtime import Runtime, running
from shared.telemetry import Telemetry
from tests.integration.conftest import STACKS, stack_settings


@dataclass
class Stack:
    runtime: Runtime
    bus: Bus
    store: EventStore
    analyzer: AnalyzerService

    async def restart_analyzer(self) -> None:
        await self.analyzer.stop()
        self.analyzer = AnalyzerService(self.runtime)
        await self.analyzer.start()

    async def publish(self, payload: Payload, *, stream_id: str, correlation_id: uuid.UUID) -> None:
        await self.bus.publish(
            Envelope.wrap(payload, stream_id=stream_id, correlation_id=correlation_id)
        )


@pytest.fixture(params=STACKS)
async def stack(
    request: pytest.FixtureRequest, tmp_path: Path, namespace: str
) -> AsyncIterator[Stack]:
    """The recorder and the analyzer; the analyzer is restarted by the tests."""
    settings = stack_settings(request, tmp_path, namespace)
    runtime = Runtime(
        settings, Telemetry.create(settings, "test"), create_broker(settings.broker_url)
    )
    try:
        async with running([RecorderService(runtime)]):
            analyzer = AnalyzerService(runtime)
            await analyzer.start()
            bus = runtime.bus("test")
            await bus.start()
            async with EventStore.from_url(settings.resolved_database_url) as store:
                stack = Stack(runtime, bus, store, analyzer)
                try:
                    yield stack
                finally:
                    await bus.stop()
                    await stack.analyzer.stop()
    finally:
        await runtime.close()
        if request.param != "embedded":
            await purge_namespace(settings.broker_url, namespace)


@dataclass
class Experiment:
    """An experiment of two members, as the scheduler plans it and the workers end it."""

    stack: Stack
    deadline_s: float = 600.0
    experiment_id: uuid.UUID = field(default_factory=uuid.uuid4)

    def __post_init__(self) -> None:
        self.members = [
            ExperimentMember(
                evaluation_id=uuid.uuid4(),
                model=model,
                model_version="1.0.0",
                framework=framework,
                framework_version=version,
                agent_id=f"{framework}-1",
                host="bench-1",
            )
            for model, framework, version in (
                ("linear", "onnxruntime", "1.31.1"),
                ("linear-torch", "pytorch", "2.13.0"),
            )
        ]

    async def scheduled(self) -> None:
        """Requested (as the gateway does), then planned, and each member requested (as the
        scheduler does): only a request makes an experiment's or an evaluation's row."""
        request = ExperimentRequested(
            experiment_id=self.experiment_id,
            models=[ModelRef(model=m.model) for m in self.members],
        )
        await self.stack.publish(
            request,
            stream_id=experiment_stream(self.experiment_id),
            correlation_id=self.experiment_id,
        )
        plan = ExperimentScheduled(
            experiment_id=self.experiment_id,
            members=self.members,
            tolerance=ParityTolerance(),
            deadline_s=self.deadline_s,
        )
        await self.stack.publish(
            plan, stream_id=experiment_stream(self.experiment_id), correlation_id=self.experiment_id
        )
        for member in self.members:
            evaluation = EvaluationRequested(
                evaluation_id=member.evaluation_id,
                model=member.model,
                framework=member.framework,
                agent_id=member.agent_id,
                experiment_id=self.experiment_id,
            )
            await self.stack.publish(
                evaluation,
                stream_id=evaluation_stream(member.evaluation_id),
                correlation_id=member.evaluation_id,
            )

    async def completed(self, member: int) -> None:
        evaluation_id = self.members[member].evaluation_id
        completed = EvaluationCompleted(
            evaluation_id=evaluation_id, result=latency(), experiment_id=self.experiment_id
        )
        await self.stack.publish(
            completed, stream_id=evaluation_stream(evaluation_id), correlation_id=evaluation_id
        )

    async def failed(self, member: int, reason: str) -> None:
        evaluation_id = self.members[member].evaluation_id
        failed = EvaluationFailed(
            evaluation_id=evaluation_id,
            stage="agent",
            reason=reason,
            experiment_id=self.experiment_id,
        )
        await self.stack.publish(
            failed, stream_id=evaluation_stream(evaluation_id), correlation_id=evaluation_id
        )

    async def followed_with(self, outcomes: int) -> bool:
        """The analyzer has taken the plan and ``outcomes`` outcomes from its queue, and the
        recorder has stored them."""
        state = self.stack.analyzer.experiment(self.experiment_id)
        if state is None or state.plan is None or len(state.outcomes) < outcomes:
            return False
        view = await self.stack.store.get_experiment(self.experiment_id)
        stored = await self.stack.store.get_evaluations([m.evaluation_id for m in self.members])
        ended = [v for v in stored if v.status in ("completed", "failed")]
        return view is not None and view.status == "scheduled" and len(ended) >= outcomes

    async def compared(self) -> ExperimentView | None:
        view = await self.stack.store.get_experiment(self.experiment_id)
        return view if view is not None and view.status == "compared" else None

    async def comparisons(self) -> int:
        events = await self.stack.store.stream_events(experiment_stream(self.experiment_id))
        return sum(e.type == "experiment.compared" for e in events)


def latency() -> LatencySummary:
    return LatencySummary(
        count=200,
        batch_size=1,
        mean_ms=2.1,
        std_ms=0.2,
        min_ms=1.8,
        max_ms=3.0,
        p50_ms=2.0,
        p90_ms=2.4,
        p99_ms=2.9,
        throughput_per_s=480.0,
        first_inference_ms=9.0,
        load_ms=40.0,
        warmup_count=10,
    )


async def test_members_that_end_before_and_after_a_restart_are_compared_once(
    stack: Stack,
) -> None:
    # Given an experiment whose first member completed while the analyzer followed it
    experiment = Experiment(stack)
    await experiment.scheduled()
    await experiment.completed(0)
    await eventually(lambda: experiment.followed_with(outcomes=1))

    # When the analyzer restarts, and the second member fails after that
    await stack.restart_analyzer()
    assert experiment.experiment_id in stack.analyzer.following
    await experiment.failed(1, reason="agent pytorch-1 on host bench-1 went offline")

    # Then the experiment is compared, with both members as they ended, once
    view = await eventually(experiment.compared)
    comparison = view.comparison
    assert comparison is not None
    assert comparison.complete is True
    statuses = [(r.framework, r.status, r.error) for r in comparison.evaluations]
    assert statuses == [
        ("onnxruntime", "completed", None),
        ("pytorch", "failed", "agent: agent pytorch-1 on host bench-1 went offline"),
    ]
    assert await experiment.comparisons() == 1


async def test_members_that_all_ended_before_a_restart_are_compared_on_start(
    stack: Stack,
) -> None:
    # Given an experiment whose members ended, and whose comparison has not been recorded
    # (the analyzer stopped after taking the last outcome, before publishing its comparison)
    experiment = Experiment(stack)
    await experiment.scheduled()
    await experiment.completed(0)
    await eventually(lambda: experiment.followed_with(outcomes=1))
    await stack.analyzer.stop()
    await experiment.completed(1)

    async def recorded() -> bool:
        stored = await stack.store.get_evaluations([m.evaluation_id for m in experiment.members])
        return sum(v.status == "completed" for v in stored) == 2

    await eventually(recorded)

    # When the analyzer starts again
    stack.analyzer = AnalyzerService(stack.runtime)
    await stack.analyzer.start()

    # Then it compares the experiment, once, though the last outcome came both from the
    # store and from its queue
    view = await eventually(experiment.compared)
    comparison = view.comparison
    assert comparison is not None
    assert comparison.complete is True
    assert [r.status for r in comparison.evaluations] == ["completed", "completed"]
    assert await experiment.comparisons() == 1


async def test_a_restarted_analyzer_keeps_the_experiment_s_deadline(stack: Stack) -> None:
    # Given an experiment due in 2 s, one member completed, the other never ending
    experiment = Experiment(stack, deadline_s=2.0)
    await experiment.scheduled()
    await experiment.completed(0)
    await eventually(lambda: experiment.followed_with(outcomes=1))

    # When the analyzer restarts before the deadline
    await stack.restart_analyzer()

    # Then at the deadline it compares what finished; the other member is missing
    view = await eventually(experiment.compared)
    comparison = view.comparison
    assert comparison is not None
    assert comparison.complete is False
    assert [r.status for r in comparison.evaluations] == ["completed", "missing"]
    assert await experiment.comparisons() == 1
