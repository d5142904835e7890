"""The jobs running on agents, as the scheduler follows them, and what losing an agent
means for its job.

Folded from ``evaluation.scheduled`` (the job's framework and hardware, the agent it is
pinned to, its experiment), ``evaluation.started`` (the agent, host and attempt now running
it) and the outcomes (forgotten). Pure: events in, state out, no clock, no I/O.

When the agent running a job goes offline, the broker gives the unacknowledged job to
another agent of its framework and hardware, which starts it again as the next attempt.
Unless the job was pinned to the lost agent (its own queue: no one else reads it) or no
other such agent is online: then nothing will run it again, and the evaluation fails at
once (``after_loss``). Otherwise the scheduler waits a grace period for the next attempt's
start.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from services.scheduler.agents import AgentEntry
from shared.messages import EvaluationScheduled, EvaluationStarted

__all__ = ["Job", "RunningJobs", "after_loss", "alternatives", "loss_reason"]

# Outcomes remembered, so a start that arrives after its evaluation ended (a job delivered
# again after its outcome) is not taken for a running job, and a worker that asks whether
# its attempt still stands is told at once. Older ones are read from the event store.
_SETTLED_KEPT = 10_000


@dataclass(frozen=True)
class Job:
    evaluation_id: uuid.UUID
    experiment_id: uuid.UUID | None = None
    framework: str | None = None
    hardware: str | None = None
    # The agent whose own queue the job went to, or None for the shared queue.
    pinned: str | None = None
    # The latest attempt: who runs it, where, and the id of its start (the failure that
    # names this attempt derives its id from it, so every scheduler emits the same one).
    agent_id: str | None = None
    host: str | None = None
    attempt: int = 0
    started_by: uuid.UUID | None = None
    # Why the latest attempt's agent went away, once it did.
    lost: str | None = None


class RunningJobs:
    def __init__(self) -> None:
        self._jobs: dict[uuid.UUID, Job] = {}
        # Evaluation -> its first outcome, in words ("completed", "failed (agent: …)").
        self._settled: OrderedDict[uuid.UUID, str] = OrderedDict()

    def scheduled(self, event: EvaluationScheduled) -> None:
        if event.evaluation_id in self._settled:
            return
        job = self._jobs.get(event.evaluation_id) or Job(event.evaluation_id)
        self._jobs[event.evaluation_id] = replace(
            job,
            experiment_id=event.experiment_id,
            framework=event.framework,
            hardware=event.hardware,
            pinned=event.agent_id,
        )

    def started(self, event: EvaluationStarted, event_id: uuid.UUID) -> Job | None:
        """The job, if ``event`` starts its newest attempt (None for an older attempt's
        start arriving late, or for an evaluation already over)."""
        if event.evaluation_id in self._settled:
            return None
        job = self._jobs.get(event.evaluation_id) or Job(event.evaluation_id)
        if event.attempt < job.attempt:
            return None
        job = self._jobs[event.evaluation_id] = replace(
            job,
            agent_id=event.agent_id,
            host=event.host,
            attempt=event.attempt,
            started_by=event_id,
            lost=None,
        )
        return job

    def settled(self, evaluation_id: uuid.UUID, outcome: str = "over") -> None:
        """``evaluation_id`` has an outcome (the first one told here is kept)."""
        self._jobs.pop(evaluation_id, None)
        self._settled.setdefault(evaluation_id, outcome)
        while len(self._settled) > _SETTLED_KEPT:
            self._settled.popitem(last=False)

    def is_over(self, evaluation_id: uuid.UUID) -> bool:
        """Whether an outcome of ``evaluation_id`` was seen here."""
        return evaluation_id in self._settled

    def outcome(self, evaluation_id: uuid.UUID) -> str | None:
        """The outcome of ``evaluation_id`` seen here, in words; None if none was."""
        return self._settled.get(evaluation_id)

    def get(self, evaluation_id: uuid.UUID) -> Job | None:
        return self._jobs.get(evaluation_id)

    def lose(self, agent_id: str, reason: str) -> list[Job]:
        """The jobs ``agent_id`` was running, marked lost with ``reason``; each once."""
        lost = [
            replace(job, lost=reason)
            for job in self._jobs.values()
            if job.agent_id == agent_id and job.lost is None and job.started_by is not None
        ]
        for job in lost:
            self._jobs[job.evaluation_id] = job
        return lost

    def found(self, agent_id: str) -> list[Job]:
        """The lost jobs of ``agent_id``, which is heard from again: no longer lost."""
        back = [
            replace(job, lost=None)
            for job in self._jobs.values()
            if job.agent_id == agent_id and job.lost is not None
        ]
        for job in back:
            self._jobs[job.evaluation_id] = job
        return back

    def __len__(self) -> int:
        return len(self._jobs)


def alternatives(job: Job, online: Sequence[AgentEntry]) -> list[AgentEntry]:
    """The online agents, other than the lost one, that read the job's shared queue."""
    return [
        agent
        for agent in online
        if agent.agent_id != job.agent_id
        and agent.framework == job.framework
        and agent.hardware == job.hardware
    ]


def loss_reason(job: Job, host: str | None) -> str:
    where = host or job.host or "an unknown host"
    attempt = f" (attempt {job.attempt})" if job.attempt > 1 else ""
    return (
        f"agent {job.agent_id} on host {where} went offline ({job.lost}) while running this "
        f"evaluation{attempt}"
    )


def after_loss(job: Job, online: Sequence[AgentEntry]) -> str | None:
    """Why no other agent can take up ``job`` now that its agent is lost, or None when the
    broker will hand it to another agent of its kind."""
    if job.pinned is not None:
        return f"the job was pinned to {job.pinned}, so no other agent can take it up"
    if not alternatives(job, online):
        return f"no other agent of {job.framework} on {job.hardware} is online to take it up"
    return None
