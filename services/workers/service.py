"""A worker: one framework on one kind of hardware, taking evaluation jobs one at a time.

Three rooms, one concern each:
- ``agent.Agent``: announce, heartbeat, answer discovery;
- ``jobs.JobRunner``: a job's message -> started -> artifact -> the device's lease
  (``leases.DeviceLeases``: one measurement per device of a host at a time) -> measured or
  failed;
- ``isolation.FrameworkProcess``: the framework itself, in a child process the worker
  supervises, where the session ``framework.sessions.session_for`` chooses measures the
  job; its crash fails the job, never the worker.
"""

from __future__ import annotations

import logging

from services.workers.agent import Agent, default_agent_id
from services.workers.availability import not_installed
from services.workers.environment import host_name
from services.workers.handover import FrameworkOptions
from services.workers.isolation import FrameworkProcess
from services.workers.jobs import JobRunner
from services.workers.leases import DeviceLeases
from shared.artifacts import ArtifactCache
from shared.errors import ConfigurationError
from shared.messages import (
    UNAVAILABLE,
    Envelope,
    Framework,
    Hardware,
    RunEvaluation,
    failure_caused_by,
    job_key,
)
from shared.messaging import Routes
from shared.runtime import Runtime

__all__ = ["WorkerService", "default_agent_id"]

log = logging.getLogger(__name__)


class WorkerService:
    def __init__(
        self,
        runtime: Runtime,
        *,
        framework: Framework,
        hardware: Hardware,
        agent_id: str | None = None,
    ) -> None:
        settings = runtime.settings
        self.framework = framework
        self.hardware = hardware
        self.agent_id = agent_id or default_agent_id(framework, hardware)
        self.name = f"worker {self.agent_id}"
        # Why this worker can run no job (its framework is not installed), once it knows.
        self.unavailable: str | None = None
        self._bus = runtime.bus("worker", prefetch=1)
        self.process = FrameworkProcess(
            framework,
            hardware,
            options=FrameworkOptions.from_settings(settings),
            deadline_s=settings.framework_deadline_s,
        )
        self._jobs = JobRunner(
            self._bus,
            self.process,
            ArtifactCache(
                settings.home / "artifacts",
                settings.artifact_limits,
                # The deployment's own artifact server may be guarded by a token.
                tokens=(
                    {settings.artifact_url: settings.resolved_artifact_token}
                    if settings.artifact_url and settings.resolved_artifact_token
                    else None
                ),
            ),
            agent_id=self.agent_id,
            results_dir=settings.home / "results",
            tracer=runtime.telemetry.tracer,
            leases=DeviceLeases(settings.resolved_lease_dir, host=host_name()),
            rpc_timeout_s=settings.rpc_timeout_s,
            evaluation_timeout_s=settings.evaluation_timeout_s,
            visible_gpus=settings.cuda_visible_devices,
        )
        self._agent = Agent(
            self._bus,
            agent_id=self.agent_id,
            framework=framework,
            hardware=hardware,
            heartbeat_interval_s=settings.heartbeat_interval_s,
            busy=lambda: self._jobs.busy,
        )

    async def start(self) -> None:
        # Looked up before the framework process starts, which would die importing it.
        if (why := not_installed(self.framework)) is not None:
            await self._start_unavailable(why)
            return
        try:
            described = await self.process.start()
        except ConfigurationError as exc:
            # Installed, and still it can run nothing here (its process says why, e.g. an
            # OpenCL device that compiles no kernel): restarting would not change that.
            await self._start_unavailable(str(exc))
            return
        await self._bus.start()
        topology = self._bus.topology
        for queue, key, durable in (
            (
                topology.queue("worker", self.framework, self.hardware),
                job_key(self.framework, self.hardware),
                True,
            ),
            (
                topology.queue("worker", self.framework, self.hardware, self.agent_id),
                job_key(self.framework, self.hardware, self.agent_id),
                False,
            ),
        ):
            await self._bus.handle(
                queue,
                Routes(topology.jobs).on(RunEvaluation, self._jobs.run, key=key),
                durable=durable,
                on_dead_letter=self._gave_up,
                count_redeliveries=True,
            )
        await self._agent.start(version=described.version, device=described.device)

    async def _start_unavailable(self, why: str) -> None:
        """A worker whose framework cannot run here says so, with why (what to install): it
        is announced with the reason (the scheduler routes nothing to it and names it when
        it explains why no worker can run a request) and fails what is sent to it alone. It
        reads no shared queue, where it would take the jobs of workers that can run them."""
        log.error("%s: %s", self.name, why)
        self.unavailable = why
        await self._bus.start()
        topology = self._bus.topology
        await self._bus.handle(
            topology.queue("worker", self.framework, self.hardware, self.agent_id),
            Routes(topology.jobs).on(
                RunEvaluation,
                self._refuse_job,
                key=job_key(self.framework, self.hardware, self.agent_id),
            ),
            durable=False,
        )
        await self._agent.start(version="none", device={UNAVAILABLE: why})

    async def _refuse_job(self, job: RunEvaluation, envelope: Envelope) -> None:
        # (An invalid job never reaches here: it is dead-lettered, failing nothing.)
        failed = failure_caused_by(
            envelope,
            RunEvaluation,
            stage="validation",
            reason=f"agent {self.agent_id}: {self.unavailable}",
            producer=self.name,
        )
        if failed is not None:
            await self._bus.publish(failed)

    async def stop(self) -> None:
        await self._agent.stop()
        await self._bus.stop()
        await self.process.close()

    async def _gave_up(self, envelope: Envelope, reason: str) -> None:
        """A job that cannot run (failing every retry, or interrupted every time it was tried)
        fails its evaluation. An invalid one is only dead-lettered: nobody requested an
        evaluation by it (``failure_caused_by``)."""
        failed = failure_caused_by(
            envelope, RunEvaluation, stage="predictor", reason=reason, producer=self.name
        )
        if failed is not None:
            await self._bus.publish(failed)
