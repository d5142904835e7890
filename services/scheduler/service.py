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
no outcome within DLSCOPE_EVALUATION_TIMEOUT_S of the scheduling, or of the latest attempt's
          start -> evaluation failed ("timeout")
a worker asks whether its attempt still stands (rpc.scheduler.attempt) -> no once the
          evaluation has an outcome or a later attempt started (attempts.py), from what this
          instance follows, else from the evaluation's row in the event store
started again -> the evaluations in flight, read back from the event store (recovery.py)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from datetime import UTC, datetime

from services.scheduler.agents import AgentDirectory
from services.scheduler.attempts import described, standing_by_row, standing_here
from services.scheduler.deadlines import Deadlines
from services.scheduler.decisions import Refusal, checked_dataset, checked_model, dispatch
from services.scheduler.experiments import Resolved, plan_experiment
from services.scheduler.losses import Losses
from services.scheduler.recovery import in_flight
from services.scheduler.running import RunningJobs
from shared.artifacts.resolutions import Resolutions, exactly
from shared.errors import ConfigurationError, DlscopeError, InvalidMessage, StoreUnavailable
from shared.eventstore import EventStore
from shared.manifests import DatasetManifest, Manifest, ModelManifest
from shared.messages import (
    ATTEMPT_CALL,
    AgentHeartbeat,
    AgentOffline,
    AgentOnline,
    AgentsDiscover,
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
    ResolveArtifact,
    ResolvedArtifact,
    agent_stream,
    evaluation_stream,
    failure_caused_by,
    rpc_key,
)
from shared.messaging import Routes
from shared.messaging.pause import when_available
from shared.runtime import Runtime

__all__ = ["SchedulerService"]

log = logging.getLogger(__name__)


class SchedulerService:
    name = "scheduler"

    def __init__(self, runtime: Runtime) -> None:
        self._settings = runtime.settings
        self._bus = runtime.bus(self.name)
        self.agents = AgentDirectory(missed_heartbeats=runtime.settings.agent_missed_heartbeats)
        self._deadlines = Deadlines()
        self.jobs = RunningJobs()
        self._losses = Losses(
            self.jobs, self.agents, self._bus, runtime.settings, producer=self.name
        )
        # Offline declarations sent by this instance: their echo must not undo a heartbeat
        # that arrived in between.
        self._declared: set[uuid.UUID] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._recovery: asyncio.Task[None] | None = None
        # Read when a worker asks about an evaluation this instance does not follow.
        self._store: EventStore | None = None
        self.recovered = asyncio.Event()
        # Since when this instance has been hearing the agents (its start, or its link to the
        # broker coming back): until they have had time to answer the discovery call, an
        # empty directory means "not heard yet", not "no such agent".
        self._listening_since = time.monotonic()
        # This instance's own link to the broker went down and it has not yet made up for
        # what it could not hear meanwhile (``_hearing_again``).
        self._deaf = False
        # Exact versions only (a constraint's answer changes with registrations, which the
        # scheduler does not follow): what the gateway pinned, asked once.
        self._resolutions = Resolutions(ttl_s=0)

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
        await self._bus.handle(
            queue(self.name, "agents", instance),
            Routes(events)
            .on(AgentOnline, self._agent_heard)
            .on(AgentHeartbeat, self._agent_heard)
            .on(AgentOffline, self._agent_heard),
            durable=False,
        )
        await self._bus.handle(
            queue(self.name, "outcomes", instance),
            Routes(events)
            .on(EvaluationScheduled, self._job_scheduled)
            .on(EvaluationStarted, self._job_started)
            .on(EvaluationCompleted, self._job_settled)
            .on(EvaluationFailed, self._job_settled),
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
        await self._discover()
        self._sweeper = asyncio.create_task(self._sweep(), name="scheduler: missed heartbeats")
        # After the subscriptions: an outcome that arrives while the store is read settles
        # its job, and the recovery then leaves it alone.
        self._recovery = asyncio.create_task(self._recover(), name="scheduler: recovery")

    async def _discover(self) -> None:
        """Ask every agent to announce itself (the scheduler's directory starts empty)."""
        self._listening_since = time.monotonic()
        await self._bus.publish(
            Envelope.wrap(
                AgentsDiscover(requested_by=self.name),
                stream_id="scheduler",
                correlation_id=uuid.uuid4(),
                producer=self.name,
            )
        )

    async def stop(self) -> None:
        for task in (self._sweeper, self._recovery):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._deadlines.close()
        self._losses.close()
        await self._bus.stop()
        if self._store is not None:
            await self._store.close()

    @property
    def _discovery_window(self) -> float:
        """How long agents have to answer a discovery call: one heartbeat interval (an
        answer is one round trip; a request for an agent that truly is not there should not
        wait much longer than that to be told so)."""
        return self._settings.heartbeat_interval_s

    @property
    def watched(self) -> set[uuid.UUID]:
        """The evaluations scheduled here and still waiting for their outcome."""
        return self._deadlines.watched

    @property
    def waiting(self) -> set[uuid.UUID]:
        """The evaluations whose agent was lost, waiting for another to take the job up."""
        return self._losses.waiting

    async def _job_scheduled(self, event: EvaluationScheduled, envelope: Envelope) -> None:
        self.jobs.scheduled(event)

    async def _job_started(self, event: EvaluationStarted, envelope: Envelope) -> None:
        if self.jobs.started(event, envelope.event_id) is not None:
            self._losses.taken_up(event.evaluation_id)
            watched = self._deadlines.request(envelope.correlation_id)
            if watched is not None:  # each attempt has the whole timeout
                self._watch(watched, attempt=event.attempt)

    async def _job_settled(
        self, event: EvaluationCompleted | EvaluationFailed, envelope: Envelope
    ) -> None:
        self.jobs.settled(event.evaluation_id, described(event))
        self._losses.taken_up(event.evaluation_id)
        self._deadlines.disarm(envelope.correlation_id)

    def _watch(self, request: Envelope, *, attempt: int = 0, since: datetime | None = None) -> None:
        """Fail the evaluation if it has no outcome in time (its worker may have died): within
        the timeout of its scheduling, or of its latest attempt's start (``since``, when
        that was before now)."""
        timeout = self._settings.evaluation_timeout_s
        elapsed = 0.0 if since is None else (datetime.now(UTC) - since).total_seconds()
        what = "being scheduled" if attempt == 0 else f"attempt {attempt} starting"

        async def expire() -> None:
            failed = failure_caused_by(
                request,
                EvaluationRequested,
                stage="timeout",
                reason=f"no outcome within {timeout:g} s of {what}; the worker may have "
                "stopped (DLSCOPE_EVALUATION_TIMEOUT_S)",
                producer=self.name,
            )
            if failed is not None:
                await self._bus.publish(failed)
                # Known as over at once: a worker that wakes now is told so.
                outcome = failed.open(EvaluationFailed)
                self.jobs.settled(outcome.evaluation_id, described(outcome))

        self._deadlines.arm(request, timeout - elapsed, expire)

    async def _recover(self) -> None:
        """Follow again every evaluation in flight, as the event store has it; a store that
        is unavailable is waited out (the live events are followed meanwhile)."""
        count = await when_available(
            self._recover_once,
            unavailable=(StoreUnavailable, ConfigurationError),  # down, or not migrated yet
            what=f"{self.name}: reading back the evaluations in flight",
        )
        if count:
            log.info("following again %d evaluations in flight after a restart", count)
        self.recovered.set()

    async def _recover_once(self) -> int:
        store = EventStore.from_url(self._settings.resolved_database_url)
        try:
            return await self._recover_from(store)
        finally:
            await store.close()

    async def _recover_from(self, store: EventStore) -> int:
        ids: list[uuid.UUID] = []
        page = 500
        for status in ("scheduled", "running"):
            offset = 0
            while views := await store.list_evaluations(status=status, limit=page, offset=offset):
                ids.extend(view.evaluation_id for view in views)
                offset += page
        count = 0
        for evaluation_id in dict.fromkeys(ids):
            found = in_flight(await store.stream_events(evaluation_stream(evaluation_id)))
            if found is None or self.jobs.is_over(found.evaluation_id):
                continue
            self.jobs.scheduled(found.scheduled)
            if found.started is not None and found.started_by is not None:
                self.jobs.started(found.started, found.started_by)
            if found.request.correlation_id not in self._deadlines:
                attempt = 0 if found.started is None else found.started.attempt
                self._watch(found.request, attempt=attempt, since=found.since)
                count += 1
        return count

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

    async def _agent_heard(
        self, event: AgentOnline | AgentHeartbeat | AgentOffline, envelope: Envelope
    ) -> None:
        if envelope.event_id in self._declared:
            self._declared.discard(envelope.event_id)
            return
        self.agents.observe(event, time.monotonic(), event_id=envelope.event_id)
        if isinstance(event, AgentOffline):
            await self._losses.agent_lost(event.agent_id, event.reason)
        else:
            self._losses.agent_found(event.agent_id)

    async def _sweep(self) -> None:
        """Declare offline, once, every agent that missed its heartbeats."""
        # Twice per heartbeat: an agent is declared at most half an interval late.
        period = self._settings.heartbeat_interval_s / 2
        while True:
            await asyncio.sleep(period)
            if not self._bus.is_connected:
                self._deaf = True
                continue
            await self._hearing_again()
            try:
                await self._declare_lapsed()
            except Exception as exc:  # a broker outage must not end the sweeping
                log.warning("offline declarations not sent: %s", exc)

    async def _hearing_again(self) -> None:
        """This scheduler's own link was down and is back: the heartbeats sent meanwhile never
        reached it, so that silence is not the agents' (a broker outage otherwise failed every
        running evaluation, its agent "offline"), and an agent that started meanwhile is not
        known here yet. Done once, by whichever notices first: the sweep, or a request that
        arrives before the sweep's next turn (it was failed for "no agents are online")."""
        if not self._deaf:
            return
        self._deaf = False
        self.agents.excuse(time.monotonic())
        try:
            await self._discover()
        except Exception as exc:
            log.warning("discovery after a reconnect not sent: %s", exc)

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

    async def _schedule(self, request: EvaluationRequested, envelope: Envelope) -> None:
        """Resolve the request's model and dataset, then publish what ``decisions`` decides."""
        resolved = await self._resolve(
            envelope,
            "model",
            request.model,
            _asked(request.model_version, request.resolved_model_version),
        )
        model = checked_model(request, resolved)
        if isinstance(model, Refusal):
            await self._fail(envelope, model.stage, model.reason)
            return
        dataset: DatasetManifest | None = None
        if request.dataset is not None:
            found = await self._resolve(
                envelope,
                "dataset",
                request.dataset,
                _asked(request.dataset_version, request.resolved_dataset_version),
            )
            checked = checked_dataset(request, found)
            if isinstance(checked, Refusal):
                await self._fail(envelope, checked.stage, checked.reason)
                return
            dataset = checked
        await self._until_agents_answered(request, model)
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
        self._watch(envelope)

    async def _until_agents_answered(
        self, request: EvaluationRequested, model: ModelManifest
    ) -> None:
        """Just started, or back from a broker outage, with no agent for ``request`` yet: wait
        until the agents have had time to answer the discovery call, so that "no such agent"
        is said only of agents that are truly absent."""
        await self._hearing_again()
        now = time.monotonic()
        answering = self._listening_since + self._discovery_window - now
        needs = model.version_needed_by(request.framework)
        if answering > 0 and not self.agents.candidates(request, now, model_needs=needs):
            await asyncio.sleep(answering)

    async def _schedule_experiment(self, request: ExperimentRequested, envelope: Envelope) -> None:
        await self._hearing_again()  # its plan reads who is online
        models: list[Resolved] = []
        for ref in request.models:
            found = await self._resolve(envelope, "model", ref.model, ref.version)
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
        requests: list[Envelope] = []
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
                concurrent=request.concurrent,
            )
            requests.append(
                Envelope.wrap(
                    evaluation,
                    stream_id=evaluation_stream(member.evaluation_id),
                    correlation_id=member.evaluation_id,
                    causation_id=envelope.event_id,
                    producer=self.name,
                    event_id=uuid.uuid5(member.evaluation_id, EvaluationRequested.TYPE),
                )
            )
        await self._bus.publish_batch(requests)

    async def _experiment_gave_up(self, envelope: Envelope, reason: str) -> None:
        """An experiment request that cannot be planned fails, rather than wait forever. An
        invalid one is only dead-lettered: nobody requested an experiment by it."""
        try:
            request = envelope.open(ExperimentRequested)
        except InvalidMessage:
            return
        failed = ExperimentFailed(experiment_id=request.experiment_id, reason=reason)
        await self._bus.publish(envelope.caused(failed, producer=self.name))

    async def _resolve(self, cause: Envelope, kind: str, name: str, version: str) -> Manifest | str:
        """The registry's manifest for ``kind`` ``name`` ``version``, or why there is none; an
        exact version's from what this scheduler keeps, once asked."""
        kept = self._resolutions.get(kind, name, version)
        if kept is not None and kept.manifest is not None:
            return kept.manifest
        found = await self._bus.ask(
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
            ResolvedArtifact,
            timeout=self._settings.rpc_timeout_s,
        )
        self._resolutions.put(kind, name, version, found)
        if found.manifest is not None:
            return found.manifest
        return found.error or f"no {kind} {name!r} in the registry"

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
