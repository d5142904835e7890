"""What the scheduler does when the agent running a job goes offline (see ``running``).

The evaluation fails (stage ``agent``, the reason naming the agent, its host and why it was
declared offline) at once when no other agent can take the job up; otherwise after a grace
period, unless another agent starts the job again first (a higher attempt). The grace period
is the missed-heartbeats window (DLSCOPE_HEARTBEAT_INTERVAL_S x
DLSCOPE_AGENT_MISSED_HEARTBEATS): a job given back by the broker goes at once to an idle
agent of its kind, so a start that has not come in the time it takes to declare an agent
dead is not coming. While every such agent is busy the job may be waiting its turn behind
their jobs: the wait goes on, up to the evaluation timeout. An agent heard from again was
slow, not gone: its job runs on.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import KW_ONLY, dataclass, field, replace

from services.scheduler.agents import AgentDirectory
from services.scheduler.attempts import described
from services.scheduler.running import Job, RunningJobs, after_loss, alternatives, loss_reason
from shared.config import Settings
from shared.messages import Envelope, EvaluationFailed, evaluation_stream
from shared.messaging import Bus

__all__ = ["Losses"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Losses:
    jobs: RunningJobs
    agents: AgentDirectory
    bus: Bus
    settings: Settings
    _: KW_ONLY
    producer: str
    # Jobs whose agent went offline, waiting for another agent to start them again.
    _graces: dict[uuid.UUID, asyncio.Task[None]] = field(default_factory=dict, init=False)

    @property
    def waiting(self) -> set[uuid.UUID]:
        return set(self._graces)

    def close(self) -> None:
        for grace in self._graces.values():
            grace.cancel()

    def taken_up(self, evaluation_id: uuid.UUID) -> None:
        """A new attempt started, or the evaluation ended: nothing to wait for."""
        grace = self._graces.pop(evaluation_id, None)
        if grace is not None:
            grace.cancel()

    def agent_found(self, agent_id: str) -> None:
        for job in self.jobs.found(agent_id):
            self.taken_up(job.evaluation_id)

    async def agent_lost(self, agent_id: str, reason: str) -> None:
        """Fail, now or after the grace period, the evaluation ``agent_id`` was running."""
        known = {agent.agent_id: agent for agent in self.agents.known()}.get(agent_id)
        for job in self.jobs.lose(agent_id, reason):
            if job.framework is None and known is not None:  # its scheduling was not seen
                job = replace(job, framework=known.framework, hardware=known.hardware)
            lost = loss_reason(job, known.host if known else None)
            nobody = after_loss(job, self.agents.online(time.monotonic()))
            if nobody is not None:
                await self._fail(job, f"{lost}; {nobody}")
            elif job.evaluation_id not in self._graces:
                self._graces[job.evaluation_id] = asyncio.create_task(
                    self._await_next_attempt(job, lost)
                )

    async def _await_next_attempt(self, job: Job, lost: str) -> None:
        settings = self.settings
        grace_s = settings.heartbeat_interval_s * settings.agent_missed_heartbeats
        waited = 0.0
        while True:
            await asyncio.sleep(grace_s)
            waited += grace_s
            others = alternatives(job, self.agents.online(time.monotonic()))
            busy = bool(others) and all(agent.busy for agent in others)
            if not busy or waited >= settings.evaluation_timeout_s:
                break
        self._graces.pop(job.evaluation_id, None)
        kind = f"{job.framework} on {job.hardware}"
        why = (
            f"no other agent of {kind} took the job up within {waited:g} s"
            if others
            else f"no other agent of {kind} is online to take it up"
        )
        try:
            await self._fail(job, f"{lost}; {why}")
        except Exception:  # no message to retry: the broker may be down
            log.exception("evaluation %s: failure on losing its agent not sent", job.evaluation_id)

    async def _fail(self, job: Job, reason: str) -> None:
        assert job.started_by is not None, "only a started job has an agent to lose"
        failed = EvaluationFailed(
            evaluation_id=job.evaluation_id,
            stage="agent",
            reason=reason,
            experiment_id=job.experiment_id,
        )
        # Derived from the lost attempt's start: every scheduler that notices the loss
        # sends the same event, and the store keeps one.
        await self.bus.publish(
            Envelope.wrap(
                failed,
                stream_id=evaluation_stream(job.evaluation_id),
                correlation_id=job.evaluation_id,
                causation_id=job.started_by,
                producer=self.producer,
                event_id=uuid.uuid5(job.started_by, EvaluationFailed.TYPE),
            )
        )
        # Known as over at once, not only when the event comes back: the lost agent may wake
        # and ask whether its attempt still stands before then.
        self.jobs.settled(job.evaluation_id, described(failed))
        log.warning("evaluation %s failed: %s", job.evaluation_id, reason)
