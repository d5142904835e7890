"""The scheduler: turns an evaluation request into a job for a matching worker, an experiment
request into member evaluations, and silence into an agent's offline declaration.

requested -> resolve the model with the registry -> pick candidates -> scheduled + job
          -> or failed, with the reason, when the model or a matching agent is missing
experiment requested -> resolve its models -> plan: one member per matching online agent
          -> experiment scheduled + one evaluation requested per member, pinned to its agent
          -> or experiment failed, when no member can run
agent silent for DLSCOPE_AGENT_MISSED_HEARTBEATS heartbeats -> agent offline, once
agent offline while running a job -> evaluation failed ("agent") at once when the job was
          pinned to it or no other agent of its kind is online; else the broker gives the
          job to another agent: failed only if no next attempt starts within the grace period
          (the missed-heartbeats window, longer while every such agent is busy)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid

from services.scheduler.agents import AgentDirectory
from services.scheduler.experiments import Resolved, plan_experiment
from services.scheduler.losses import Losses
from services.scheduler.running import RunningJobs
from shared.errors import ConfigurationError
from shared.manifests import DatasetManifest, Manifest, ModelManifest
from shared.measurement import check_sample_count
from shared.messages import (
    AgentHeartbeat,
    AgentOffline,
    AgentOnline,
    AgentsDiscover,
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
    ResolveArtifact,
    ResolvedArtifact,
    RunEvaluation,
    agent_stream,
    evaluation_stream,
    failure_caused_by,
    job_key,
    rpc_key,
)
from shared.messaging import Binding
from shared.runtime import Runtime

__all__ = ["SchedulerService"]

log = logging.getLogger(__name__)


class SchedulerService:
    name = "scheduler"

    def __init__(self, runtime: Runtime) -> None:
        self._settings = runtime.settings
        self._bus = runtime.bus(self.name)
        self.agents = AgentDirectory(missed_heartbeats=runtime.settings.agent_missed_heartbeats)
        self._deadlines: dict[uuid.UUID, asyncio.Task[None]] = {}
        self.jobs = RunningJobs()
        self._losses = Losses(
            self.jobs, self.agents, self._bus, runtime.settings, producer=self.name
        )
        # Offline declarations sent by this instance: their echo must not undo a heartbeat
        # that arrived in between.
        self._declared: set[uuid.UUID] = set()
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._bus.start()
        events = self._bus.topology.events
        # This instance's own view (agents, deadlines): private queues, gone when it stops.
        instance = f"{socket.gethostname()}-{os.getpid()}"
        await self._bus.subscribe(
            self._bus.topology.queue(self.name, "requests"),
            [Binding(events, EvaluationRequested.TYPE)],
            self._schedule,
            on_dead_letter=self._gave_up,
        )
        await self._bus.subscribe(
            self._bus.topology.queue(self.name, "experiments"),
            [Binding(events, ExperimentRequested.TYPE)],
            self._schedule_experiment,
            on_dead_letter=self._experiment_gave_up,
        )
        await self._bus.subscribe(
            self._bus.topology.queue(self.name, "agents", instance),
            [Binding(events, "agent.*")],
            self._track_agent,
            durable=False,
        )
        await self._bus.subscribe(
            self._bus.topology.queue(self.name, "outcomes", instance),
            [
                Binding(events, EvaluationScheduled.TYPE),
                Binding(events, EvaluationStarted.TYPE),
                Binding(events, EvaluationCompleted.TYPE),
                Binding(events, EvaluationFailed.TYPE),
            ],
            self._follow_job,
            durable=False,
        )
        await self._bus.publish(
            Envelope.wrap(
                AgentsDiscover(requested_by=self.name),
                stream_id="scheduler",
                correlation_id=uuid.uuid4(),
                producer=self.name,
            )
        )
        self._sweeper = asyncio.create_task(self._sweep(), name="scheduler: missed heartbeats")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for deadline in self._deadlines.values():
            deadline.cancel()
        self._losses.close()
        await self._bus.stop()

    @property
    def watched(self) -> set[uuid.UUID]:
        """The evaluations scheduled here and still waiting for their outcome."""
        return set(self._deadlines)

    @property
    def waiting(self) -> set[uuid.UUID]:
        """The evaluations whose agent was lost, waiting for another to take the job up."""
        return self._losses.waiting

    async def _follow_job(self, envelope: Envelope) -> None:
        event = envelope.typed()
        if isinstance(event, EvaluationScheduled):
            self.jobs.scheduled(event)
        elif isinstance(event, EvaluationStarted):
            if self.jobs.started(event, envelope.event_id) is not None:
                self._losses.taken_up(event.evaluation_id)
        elif isinstance(event, EvaluationCompleted | EvaluationFailed):
            self.jobs.settled(event.evaluation_id)
            self._losses.taken_up(event.evaluation_id)
            deadline = self._deadlines.pop(envelope.correlation_id, None)
            if deadline is not None:
                deadline.cancel()

    def _watch(self, scheduled: Envelope) -> None:
        """Fail the evaluation if it has no outcome in time (its worker may have died)."""
        timeout = self._settings.evaluation_timeout_s

        async def expire() -> None:
            await asyncio.sleep(timeout)
            self._deadlines.pop(scheduled.correlation_id, None)
            failed = failure_caused_by(
                scheduled,
                stage="timeout",
                reason=f"no outcome within {timeout:g} s of being scheduled; the worker may "
                "have stopped (DLSCOPE_EVALUATION_TIMEOUT_S)",
                producer=self.name,
            )
            if failed is not None:
                await self._bus.publish(failed)

        # A redelivered request is scheduled again: its earlier deadline must not outlive it.
        earlier = self._deadlines.pop(scheduled.correlation_id, None)
        if earlier is not None:
            earlier.cancel()
        self._deadlines[scheduled.correlation_id] = asyncio.create_task(expire())

    async def _gave_up(self, envelope: Envelope, reason: str) -> None:
        """A request that cannot be scheduled (invalid, or failing every retry) fails its
        evaluation, so no evaluation waits forever in 'requested'."""
        failed = failure_caused_by(envelope, stage="scheduling", reason=reason, producer=self.name)
        if failed is not None:
            await self._bus.publish(failed)

    async def _track_agent(self, envelope: Envelope) -> None:
        if envelope.event_id in self._declared:
            self._declared.discard(envelope.event_id)
            return
        event = envelope.typed()
        if isinstance(event, AgentOnline | AgentHeartbeat | AgentOffline):
            self.agents.observe(event, time.monotonic(), event_id=envelope.event_id)
        if isinstance(event, AgentOffline):
            await self._losses.agent_lost(event.agent_id, event.reason)
        elif isinstance(event, AgentOnline | AgentHeartbeat):
            self._losses.agent_found(event.agent_id)

    async def _sweep(self) -> None:
        """Declare offline, once, every agent that missed its heartbeats."""
        # Twice per heartbeat: an agent is declared at most half an interval late.
        period = self._settings.heartbeat_interval_s / 2
        while True:
            await asyncio.sleep(period)
            try:
                await self._declare_lapsed()
            except Exception as exc:  # a broker outage must not end the sweeping
                log.warning("offline declarations not sent: %s", exc)

    async def _declare_lapsed(self) -> None:
        missed = self.agents.missed_heartbeats
        # One at a time, looked up again after each await: a heartbeat may have come meanwhile.
        while lapsed := self.agents.lapsed(time.monotonic()):
            agent = lapsed[0]
            offline = AgentOffline(
                agent_id=agent.agent_id,
                reason=f"missed {missed} heartbeats (one every {agent.heartbeat_interval_s:g} s)",
            )
            envelope = Envelope.wrap(
                offline,
                stream_id=agent_stream(agent.agent_id),
                correlation_id=uuid.uuid4(),
                producer=self.name,
                event_id=None
                if agent.last_event_id is None
                else uuid.uuid5(agent.last_event_id, AgentOffline.TYPE),
            )
            # Recorded here before the await: a heartbeat handled meanwhile must win.
            self.agents.observe(offline, time.monotonic())
            self._declared.add(envelope.event_id)
            await self._bus.publish(envelope)
            log.warning("agent %s is offline: %s", agent.agent_id, offline.reason)
            await self._losses.agent_lost(agent.agent_id, offline.reason)

    async def _schedule(self, envelope: Envelope) -> None:
        request = envelope.open(EvaluationRequested)
        manifest, error = await self._resolve(
            envelope, "model", request.model, request.model_version
        )
        if not isinstance(manifest, ModelManifest):
            await self._fail(envelope, "validation", error)
            return
        if not manifest.runs_on(request.framework):
            await self._fail(
                envelope,
                "validation",
                f"model {manifest.ref} is for {manifest.framework.name}; "
                f"it cannot run on {request.framework}",
            )
            return
        dataset = None
        if request.dataset is not None:
            found, error = await self._resolve(
                envelope, "dataset", request.dataset, request.dataset_version
            )
            if not isinstance(found, DatasetManifest):
                await self._fail(envelope, "validation", error)
                return
            dataset = found
            if request.split is not None and request.split not in dataset.splits:
                splits = ", ".join(dataset.splits) or "none"
                await self._fail(
                    envelope,
                    "validation",
                    f"dataset {dataset.ref} has no split {request.split!r}; splits: {splits}",
                )
                return
            try:  # a multi-stream query cannot draw more distinct samples than there are
                check_sample_count(
                    request.scenario.measurement(), dataset.sample_count(request.split)
                )
            except ConfigurationError as exc:
                await self._fail(envelope, "validation", f"dataset {dataset.ref}: {exc}")
                return
        now = time.monotonic()
        needs = manifest.version_needed_by(request.framework)
        candidates = self.agents.candidates(request, now, model_needs=needs)
        if not candidates:
            await self._fail(
                envelope,
                "scheduling",
                self.agents.explain_no_match(request, now, model_needs=needs),
            )
            return
        agent_id = self.agents.route(request, candidates, now)
        await self._bus.publish(
            envelope.caused(
                EvaluationScheduled(
                    evaluation_id=request.evaluation_id,
                    model=manifest.name,
                    model_version=manifest.version,
                    framework=request.framework,
                    hardware=request.hardware,
                    agent_id=agent_id,
                    candidates=[a.agent_id for a in candidates],
                    experiment_id=request.experiment_id,
                ),
                producer=self.name,
            )
        )
        # Unpinned jobs go to the shared queue of the framework and hardware, where the first
        # free worker takes them; pinned ones (by the request, or because not every worker on
        # the shared queue can run the job) to that agent's own queue.
        await self._bus.publish(
            envelope.caused(
                RunEvaluation(
                    evaluation_id=request.evaluation_id,
                    manifest=manifest,
                    framework=request.framework,
                    framework_version=request.framework_version,
                    hardware=request.hardware,
                    scenario=request.scenario,
                    dataset=dataset,
                    split=request.split,
                    experiment_id=request.experiment_id,
                ),
                producer=self.name,
            ),
            exchange=self._bus.topology.jobs,
            routing_key=job_key(request.framework, request.hardware, agent_id),
        )
        self._watch(envelope)

    async def _schedule_experiment(self, envelope: Envelope) -> None:
        request = envelope.open(ExperimentRequested)
        models: list[Resolved] = []
        for ref in request.models:
            manifest, error = await self._resolve(envelope, "model", ref.model, ref.version)
            models.append((ref, manifest if isinstance(manifest, ModelManifest) else error))
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
        for member in decision.members:
            evaluation = EvaluationRequested(
                evaluation_id=member.evaluation_id,
                model=member.model,
                model_version=f"=={member.model_version}",  # the version planned with
                framework=member.framework,
                framework_version=request.framework_version,
                hardware=request.hardware,
                agent_id=member.agent_id,
                scenario=request.scenario,
                dataset=request.dataset,
                dataset_version=request.dataset_version,
                split=request.split,
                requested_by=f"experiment {request.experiment_id}",
                experiment_id=request.experiment_id,
            )
            await self._bus.publish(
                Envelope.wrap(
                    evaluation,
                    stream_id=evaluation_stream(member.evaluation_id),
                    correlation_id=member.evaluation_id,
                    causation_id=envelope.event_id,
                    producer=self.name,
                    event_id=uuid.uuid5(member.evaluation_id, EvaluationRequested.TYPE),
                )
            )

    async def _experiment_gave_up(self, envelope: Envelope, reason: str) -> None:
        """An experiment request that cannot be planned fails, rather than wait forever."""
        try:
            experiment_id = uuid.UUID(str(envelope.payload.get("experiment_id")))
        except ValueError:
            return
        failed = ExperimentFailed(experiment_id=experiment_id, reason=reason)
        await self._bus.publish(envelope.caused(failed, producer=self.name))

    async def _resolve(
        self, cause: Envelope, kind: str, name: str, version: str
    ) -> tuple[Manifest | None, str]:
        """The registry's manifest for ``kind`` ``name`` ``version``, or why there is none."""
        reply = await self._bus.request(
            rpc_key("registry", "resolve"),
            # A fresh id per call (not one derived from the cause: two calls of one type would
            # share it); the causation still names the request.
            Envelope.wrap(
                ResolveArtifact(kind=kind, name=name, version=version),
                stream_id="registry",
                correlation_id=cause.correlation_id,
                causation_id=cause.event_id,
                producer=self.name,
            ),
            timeout=self._settings.rpc_timeout_s,
        )
        found = reply.open(ResolvedArtifact)
        return found.manifest, found.error or f"no {kind} {name!r} in the registry"

    async def _fail(self, cause: Envelope, stage: FailureStage, reason: str) -> None:
        failed = failure_caused_by(cause, stage=stage, reason=reason, producer=self.name)
        assert failed is not None, "a request always names its evaluation"
        await self._bus.publish(failed)
