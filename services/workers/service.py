"""A worker: one framework on one kind of hardware, taking evaluation jobs one at a time.

Three rooms, one concern each:
- ``agent.Agent``: announce, heartbeat, answer discovery;
- ``jobs.JobRunner``: a job's message -> started -> artifact -> measured or failed;
- ``isolation.FrameworkProcess``: the framework itself, in a child process the worker
  supervises, where ``measurement.measure`` runs the session; its crash fails the job,
  never the worker.
"""

from __future__ import annotations

import logging

from services.workers.agent import Agent, default_agent_id
from services.workers.isolation import FrameworkProcess
from services.workers.jobs import JobRunner
from shared.artifacts import ArtifactCache
from shared.messages import Envelope, Framework, Hardware, failure_caused_by, job_key
from shared.messaging import Binding
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
        self._bus = runtime.bus("worker", prefetch=1)
        self.process = FrameworkProcess(
            framework, hardware, home=settings.home, deadline_s=settings.framework_deadline_s
        )
        self._jobs = JobRunner(
            self._bus,
            self.process,
            ArtifactCache(settings.home / "artifacts", settings.artifact_limits),
            agent_id=self.agent_id,
            results_dir=settings.home / "results",
            tracer=runtime.telemetry.tracer,
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
        # The framework first: a framework that cannot be imported here stops the worker
        # before it takes a job (ConfigurationError, naming what is missing).
        described = await self.process.start()
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
            await self._bus.subscribe(
                queue,
                [Binding(topology.jobs, key)],
                self._run_job,
                durable=durable,
                on_dead_letter=self._gave_up,
                count_redeliveries=True,
            )
        await self._agent.start(version=described.version, device=described.device)

    async def stop(self) -> None:
        await self._agent.stop()
        await self._bus.stop()
        await self.process.close()

    async def _run_job(self, envelope: Envelope) -> None:
        await self._jobs.run(envelope)

    async def _gave_up(self, envelope: Envelope, reason: str) -> None:
        """A job that cannot run (invalid, failing every retry, or interrupted every time it
        was tried) fails its evaluation."""
        failed = failure_caused_by(envelope, stage="predictor", reason=reason, producer=self.name)
        if failed is not None:
            await self._bus.publish(failed)
