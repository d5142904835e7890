"""The scheduler: turns an evaluation request into a job for a matching worker.

requested -> resolve the model with the registry -> pick candidates -> scheduled + job
          -> or failed, with the reason, when the model or a matching agent is missing
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid

from services.scheduler.agents import AgentDirectory
from shared.manifests import DatasetManifest, Manifest, ModelManifest
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
    FailureStage,
    ResolveArtifact,
    ResolvedArtifact,
    RunEvaluation,
    failure_caused_by,
    job_key,
    rpc_key,
)
from shared.messaging import Binding
from shared.runtime import Runtime

__all__ = ["SchedulerService"]


class SchedulerService:
    name = "scheduler"

    def __init__(self, runtime: Runtime) -> None:
        self._settings = runtime.settings
        self._bus = runtime.bus(self.name)
        self.agents = AgentDirectory(missed_heartbeats=runtime.settings.agent_missed_heartbeats)
        self._deadlines: dict[uuid.UUID, asyncio.Task[None]] = {}

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
            self._bus.topology.queue(self.name, "agents", instance),
            [Binding(events, "agent.*")],
            self._track_agent,
            durable=False,
        )
        await self._bus.subscribe(
            self._bus.topology.queue(self.name, "outcomes", instance),
            [Binding(events, EvaluationCompleted.TYPE), Binding(events, EvaluationFailed.TYPE)],
            self._settled,
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

    async def stop(self) -> None:
        for deadline in self._deadlines.values():
            deadline.cancel()
        await self._bus.stop()

    @property
    def watched(self) -> set[uuid.UUID]:
        """The evaluations scheduled here and still waiting for their outcome."""
        return set(self._deadlines)

    async def _settled(self, envelope: Envelope) -> None:
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
        event = envelope.typed()
        if isinstance(event, AgentOnline | AgentHeartbeat | AgentOffline):
            self.agents.observe(event, time.monotonic())

    async def _schedule(self, envelope: Envelope) -> None:
        request = envelope.open(EvaluationRequested)
        manifest, error = await self._resolve(
            envelope, "model", request.model, request.model_version
        )
        if not isinstance(manifest, ModelManifest):
            await self._fail(envelope, "validation", error)
            return
        if manifest.framework.name != request.framework:
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
        now = time.monotonic()
        candidates = self.agents.candidates(request, now)
        if not candidates:
            await self._fail(envelope, "scheduling", self.agents.explain_no_match(request, now))
            return
        await self._bus.publish(
            envelope.caused(
                EvaluationScheduled(
                    evaluation_id=request.evaluation_id,
                    model=manifest.name,
                    model_version=manifest.version,
                    framework=request.framework,
                    hardware=request.hardware,
                    agent_id=request.agent_id,
                    candidates=[a.agent_id for a in candidates],
                ),
                producer=self.name,
            )
        )
        # Unpinned jobs go to the shared queue of the framework and hardware, where the first
        # free matching worker takes them; pinned ones to that agent's own queue.
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
                ),
                producer=self.name,
            ),
            exchange=self._bus.topology.jobs,
            routing_key=job_key(request.framework, request.hardware, request.agent_id),
        )
        self._watch(envelope)

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
