"""The scheduler: turns an evaluation request into a job for a matching worker, an experiment
request into member evaluations, and silence into an agent's offline declaration.

requested -> resolve the model with the registry -> pick candidates -> scheduled + job
          -> or failed, with the reason, when the model or a matching agent is missing
experiment requested -> resolve its models -> plan: one member per matching online agent
          -> experiment scheduled + one evaluation requested per member, pinned to its agent
          -> or experiment failed, when no member can run
agent silent for DLSCOPE_AGENT_MISSED_HEARTBEATS heartbeats -> agent offline, once (presence.py)
agent offline while running a job -> evaluation failed ("agent") at once when the job was
          pinned to it or no other agent of its kind is online; else the broker gives the
          job to another agent: failed only if no next attempt starts within the grace period
          (the missed-heartbeats window, longer while every such agent is busy)
no outcome within DLSCOPE_EVALUATION_TIMEOUT_S of the scheduling, or of the latest attempt's
          start -> evaluation failed ("timeout") (following.py)
a worker asks whether its attempt still stands (rpc.scheduler.attempt) -> no once the
          evaluation has an outcome or a later attempt started (attempts.py), from what this
          instance follows, else from the evaluation's row in the event store
started again -> the evaluations in flight, read back from the event store (following.py,
          recovery.py)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

from services.scheduler.agents import AgentDirectory
from services.scheduler.attempts import standing_by_row, standing_here
from services.scheduler.decisions import Refusal, checked_dataset, checked_model, dispatch
from services.scheduler.experiments import Resolved, member_evaluations, plan_experiment
from services.scheduler.following import Following
from services.scheduler.losses import Losses
from services.scheduler.presence import Presence
from services.scheduler.resolving import Resolver
from services.scheduler.running import RunningJobs
from shared.artifacts.resolutions import exactly
from shared.errors import DlscopeError, InvalidMessage
from shared.eventstore import EventStore
from shared.manifests import DatasetManifest, Manifest, ModelManifest
from shared.messages import (
    ATTEMPT_CALL,
    AgentHeartbeat,
    AgentOffline,
    AgentOnline,
    AttemptStanding,
    CheckAttempt,
    Envelope,
    EvaluationCompleted,
    EvaluationFailed,
    EvaluationRequested,
    EvaluationScheduled,
    EvaluationStarted,
    ExperimentFailed,
    ExperimentRequested,
    ExperimentScheduled,
    FailureStage,
    evaluation_stream,
    failure_caused_by,
    rpc_key,
)
from shared.messaging import Routes
from shared.runtime import Runtime

__all__ = ["SchedulerService"]

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Manifest)


class SchedulerService:
    """The scheduler's composition: what it hears of the agents (``presence``), the
    evaluations it follows to their outcome (``following``), the jobs whose agent was lost
    (``losses``), the registry it asks (``resolving``), and here the use cases: schedule a
    request, plan an experiment, answer whether an attempt stands. What to decide is
    ``decisions``' and ``experiments``'."""

    name = "scheduler"

    def __init__(self, runtime: Runtime) -> None:
        self._settings = runtime.settings
        self._bus = runtime.bus(self.name)
        self.agents = AgentDirectory(missed_heartbeats=runtime.settings.agent_missed_heartbeats)
        self.jobs = RunningJobs()
        self._losses = Losses(
            self.jobs, self.agents, self._bus, runtime.settings, producer=self.name
        )
        self._presence = Presence(
            self.agents, self._losses, self._bus, runtime.settings, producer=self.name
        )
        self._following = Following(
            self.jobs, self._losses, self._bus, runtime.settings, producer=self.name
        )
        self.recovered = self._following.recovered
        self._sweeper: asyncio.Task[None] | None = None
        self._recovery: asyncio.Task[None] | None = None
        # Read when a worker asks about an evaluation this instance does not follow.
        self._store: EventStore | None = None
        self._resolver = Resolver(self._bus, runtime.settings, producer=self.name)

    async def start(self) -> None:
        await self._bus.start()
        events = self._bus.topology.events
        # This instance's own view (agents, deadlines): private queues, gone when it stops.
        instance = f"{socket.gethostname()}-{os.getpid()}"
        queue = self._bus.topology.queue
        await self._bus.handle(
            queue(self.name, "requests"),
            Routes(events).on(EvaluationRequested, self._schedule),
            on_dead_letter=self._gave_up,
        )
        await self._bus.handle(
            queue(self.name, "experiments"),
            Routes(events).on(ExperimentRequested, self._schedule_experiment),
            on_dead_letter=self._experiment_gave_up,
        )
        heard = self._presence.heard
        await self._bus.handle(
            queue(self.name, "agents", instance),
            Routes(events).on(AgentOnline, heard).on(AgentHeartbeat, heard).on(AgentOffline, heard),
            durable=False,
        )
        following = self._following
        await self._bus.handle(
            queue(self.name, "outcomes", instance),
            Routes(events)
            .on(EvaluationScheduled, following.scheduled)
            .on(EvaluationStarted, following.started)
            .on(EvaluationCompleted, following.settled)
            .on(EvaluationFailed, following.settled),
            durable=False,
        )
        # Each instance answers from what it follows (the first answer wins), on a queue of
        # its own: a call made while no scheduler runs is not kept for a later one.
        self._store = EventStore.from_url(self._settings.resolved_database_url)
        await self._bus.handle(
            queue(self.name, "calls", instance),
            Routes(self._bus.topology.jobs).on(
                CheckAttempt, self._answer, key=rpc_key(self.name, ATTEMPT_CALL)
            ),
            durable=False,
        )
        await self._presence.discover()
        self._sweeper = asyncio.create_task(
            self._presence.sweep(), name="scheduler: missed heartbeats"
        )
        # After the subscriptions: an outcome that arrives while the store is read settles
        # its job, and the recovery then leaves it alone.
        self._recovery = asyncio.create_task(following.recover(), name="scheduler: recovery")

    async def stop(self) -> None:
        for task in (self._sweeper, self._recovery):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._following.close()
        self._losses.close()
        await self._bus.stop()
        if self._store is not None:
            await self._store.close()

    @property
    def watched(self) -> set[uuid.UUID]:
        """The evaluations scheduled here and still waiting for their outcome."""
        return self._following.watched

    @property
    def waiting(self) -> set[uuid.UUID]:
        """The evaluations whose agent was lost, waiting for another to take the job up."""
        return self._losses.waiting

    async def _gave_up(self, envelope: Envelope, reason: str) -> None:
        """A request that cannot be scheduled (failing every retry) fails its evaluation, so
        no evaluation waits forever in 'requested'. An invalid one is only dead-lettered:
        nobody requested an evaluation by it (``failure_caused_by``)."""
        failed = failure_caused_by(
            envelope, EvaluationRequested, stage="scheduling", reason=reason, producer=self.name
        )
        if failed is not None:
            await self._bus.publish(failed)

    async def _answer(self, check: CheckAttempt, call: Envelope) -> Envelope:
        """Whether a worker's attempt still stands (``attempts``): from what this instance
        follows, else from the evaluation's row; a store it cannot read leaves the worker
        to go on, as a scheduler that does not answer would."""
        answer = standing_here(check, self.jobs)
        if answer is None and self._store is not None:
            try:
                answer = standing_by_row(
                    check, await self._store.get_evaluation(check.evaluation_id)
                )
            except DlscopeError as exc:  # unavailable, or not migrated yet
                answer = AttemptStanding(stands=True, reason=f"the scheduler cannot tell: {exc}")
        if answer is None:
            answer = AttemptStanding(stands=True, reason="the scheduler does not know it")
        if not answer.stands:
            log.warning("%s", answer.reason)
        return call.caused(answer, producer=self.name)

    async def _schedule(self, request: EvaluationRequested, envelope: Envelope) -> None:
        """Resolve the request's model and dataset, then publish what ``decisions`` decides."""
        model_version = _asked(request.model_version, request.resolved_model_version)
        model = await self._checked(
            envelope,
            "model",
            request.model,
            model_version,
            functools.partial(checked_model, request),
        )
        if model is None:
            return
        dataset: DatasetManifest | None = None
        if request.dataset is not None:
            version = _asked(request.dataset_version, request.resolved_dataset_version)
            check = functools.partial(checked_dataset, request)
            dataset = await self._checked(envelope, "dataset", request.dataset, version, check)
            if dataset is None:
                return
        await self._presence.until_answered(request, model)
        decided = dispatch(
            request,
            model,
            dataset,
            self.agents,
            time.monotonic(),
            artifact_url=self._settings.artifact_url,
            here=socket.gethostname(),
        )
        if isinstance(decided, Refusal):
            await self._fail(envelope, decided.stage, decided.reason)
            return
        # Together: each waits for the broker's confirm, and the worker need not wait for the
        # event's before it gets its job. The event is sent first: on the one publishing
        # channel (its lock taken in call order, the events exchange known since the
        # discovery call) its frames go out before the job's, so the broker queues it for
        # the recorder before the worker can have the job, and the stream stores scheduled
        # before started (the recorder's linger puts the two in one transaction).
        await asyncio.gather(
            self._bus.publish(envelope.caused(decided.scheduled, producer=self.name)),
            self._bus.publish(
                envelope.caused(decided.job, producer=self.name),
                exchange=self._bus.topology.jobs,
                routing_key=decided.routing_key,
            ),
        )
        self._following.watch(envelope)

    async def _checked(
        self,
        cause: Envelope,
        kind: str,
        name: str,
        version: str,
        check: Callable[[Manifest | str], M | Refusal],
    ) -> M | None:
        """The registry's ``kind`` ``name`` ``version``, if ``check`` takes it for the
        request; else None, the request failed with ``check``'s refusal."""
        checked = check(await self._resolver.resolve(cause, kind, name, version))
        if isinstance(checked, Refusal):
            await self._fail(cause, checked.stage, checked.reason)
            return None
        return checked

    async def _schedule_experiment(self, request: ExperimentRequested, envelope: Envelope) -> None:
        await self._presence.hearing_again()  # its plan reads who is online
        models: list[Resolved] = []
        for ref in request.models:
            found = await self._resolver.resolve(envelope, "model", ref.model, ref.version)
            if not isinstance(found, ModelManifest | str):
                found = f"{found.ref} is a {found.kind}, not a model"
            models.append((ref, found))
        decision = plan_experiment(
            request,
            models,
            self.agents.online(time.monotonic()),
            seed=envelope.event_id,
            deadline_s=request.timeout_s or self._settings.evaluation_timeout_s,
        )
        # The plan first: the analyzer knows the members before their outcomes can exist.
        await self._bus.publish(envelope.caused(decision, producer=self.name))
        if not isinstance(decision, ExperimentScheduled):
            return
        # The members' requests together: one message, one transaction at the recorder.
        await self._bus.publish_batch(
            [
                Envelope.wrap(
                    evaluation,
                    stream_id=evaluation_stream(evaluation.evaluation_id),
                    correlation_id=evaluation.evaluation_id,
                    causation_id=envelope.event_id,
                    producer=self.name,
                    event_id=uuid.uuid5(evaluation.evaluation_id, EvaluationRequested.TYPE),
                )
                for evaluation in member_evaluations(request, decision)
            ]
        )

    async def _experiment_gave_up(self, envelope: Envelope, reason: str) -> None:
        """An experiment request that cannot be planned fails, rather than wait forever. An
        invalid one is only dead-lettered: nobody requested an experiment by it."""
        try:
            request = envelope.open(ExperimentRequested)
        except InvalidMessage:
            return
        failed = ExperimentFailed(experiment_id=request.experiment_id, reason=reason)
        await self._bus.publish(envelope.caused(failed, producer=self.name))

    async def _fail(self, cause: Envelope, stage: FailureStage, reason: str) -> None:
        failed = failure_caused_by(
            cause, EvaluationRequested, stage=stage, reason=reason, producer=self.name
        )
        assert failed is not None, "a request always names its evaluation"
        await self._bus.publish(failed)


def _asked(constraint: str, resolved: str | None) -> str:
    """What to resolve: the version the request was accepted with, exactly, where the gateway
    pinned one (an immutable answer, kept); else the request's own constraint."""
    return constraint if resolved is None else exactly(resolved)
