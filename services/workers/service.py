"""A worker: one framework on one kind of hardware, taking evaluation jobs one at a time.

job -> started (with the environment) -> verified artifact -> load, cold query, warm-up,
    timed queries on the measurement thread -> measured
    -> or failed, with the stage and the reason; the worker stays up for the next job
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from services.workers.accuracy import batches, measure_accuracy
from services.workers.environment import capabilities, environment, host_name
from services.workers.inputs import synthetic_inputs
from services.workers.predictors import predictor_factory
from shared.artifacts import ArtifactCache
from shared.datasets import load_dataset
from shared.errors import ArtifactError, DlscopeError, PredictorError
from shared.measurement import Measurement, measure
from shared.messages import (
    AccuracyMeasurement,
    AgentHeartbeat,
    AgentOffline,
    AgentOnline,
    AgentsDiscover,
    Envelope,
    EvaluationMeasured,
    EvaluationStarted,
    FailureStage,
    Framework,
    Hardware,
    RunEvaluation,
    agent_stream,
    failure_caused_by,
    job_key,
)
from shared.messaging import Binding
from shared.runtime import Runtime

__all__ = ["WorkerService", "default_agent_id"]

log = logging.getLogger(__name__)


def default_agent_id(framework: str, hardware: str) -> str:
    # Agent ids are one routing-key word: no dots.
    host = re.sub(r"[^A-Za-z0-9_-]", "-", host_name())
    return f"{host}-{framework}-{hardware}-{uuid.uuid4().hex[:6]}"


class WorkerService:
    def __init__(
        self,
        runtime: Runtime,
        *,
        framework: Framework,
        hardware: Hardware,
        agent_id: str | None = None,
    ) -> None:
        self.framework = framework
        self.hardware = hardware
        self.agent_id = agent_id or default_agent_id(framework, hardware)
        self.name = f"worker {self.agent_id}"
        self._settings = runtime.settings
        self._bus = runtime.bus("worker", prefetch=1)
        self._predictors = predictor_factory(framework)
        self._artifacts = ArtifactCache(
            runtime.settings.home / "artifacts", runtime.settings.artifact_limits
        )
        # The measurement loop runs alone on this thread, never beside the event loop's work.
        self._measurement_thread = ThreadPoolExecutor(1, thread_name_prefix="measurement")
        self._one_job_at_a_time = asyncio.Lock()
        self._heartbeat: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._bus.start()
        topology = self._bus.topology
        await self._bus.subscribe(
            topology.queue("worker", self.framework, self.hardware),
            [Binding(topology.jobs, job_key(self.framework, self.hardware))],
            self._run_job,
            on_dead_letter=self._gave_up,
        )
        await self._bus.subscribe(
            topology.queue("worker", self.framework, self.hardware, self.agent_id),
            [Binding(topology.jobs, job_key(self.framework, self.hardware, self.agent_id))],
            self._run_job,
            durable=False,
            on_dead_letter=self._gave_up,
        )
        await self._bus.subscribe(
            topology.queue("worker", "discovery", self.agent_id),
            [Binding(topology.events, AgentsDiscover.TYPE)],
            self._announce_on_discovery,
            durable=False,
        )
        await self._announce()
        self._heartbeat = asyncio.create_task(self._beat(), name=f"heartbeat {self.agent_id}")

    async def stop(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
        with contextlib.suppress(Exception):  # the broker may already be gone
            await self._publish_agent_event(AgentOffline(agent_id=self.agent_id, reason="stopped"))
        await self._bus.stop()
        self._measurement_thread.shutdown(wait=True)

    async def _announce(self) -> None:
        await self._publish_agent_event(
            AgentOnline(
                agent_id=self.agent_id,
                host=host_name(),
                framework=self.framework,
                framework_version=self._predictors.version(),
                hardware=self.hardware,
                capabilities=capabilities(),
                heartbeat_interval_s=self._settings.heartbeat_interval_s,
            )
        )

    async def _announce_on_discovery(self, envelope: Envelope) -> None:
        await self._announce()

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self._settings.heartbeat_interval_s)
            try:
                await self._publish_agent_event(
                    AgentHeartbeat(agent_id=self.agent_id, busy=self._one_job_at_a_time.locked())
                )
            except Exception as exc:  # a broker outage must not kill the heartbeat
                log.warning("heartbeat not sent: %s", exc)

    async def _publish_agent_event(
        self, payload: AgentOnline | AgentHeartbeat | AgentOffline
    ) -> None:
        await self._bus.publish(
            Envelope.wrap(
                payload,
                stream_id=agent_stream(self.agent_id),
                correlation_id=uuid.uuid4(),
                producer=self.name,
            )
        )

    async def _run_job(self, envelope: Envelope) -> None:
        job = envelope.open(RunEvaluation)
        async with self._one_job_at_a_time:
            predictor_description = {
                "framework": self.framework,
                "framework_version": self._predictors.version(),
            }
            await self._bus.publish(
                envelope.caused(
                    EvaluationStarted(
                        evaluation_id=job.evaluation_id,
                        agent_id=self.agent_id,
                        host=host_name(),
                        environment=environment(predictor_description, seed=job.scenario.seed),
                    ),
                    producer=self.name,
                )
            )
            try:
                path = await asyncio.to_thread(self._artifacts.fetch, job.manifest.source)
            except ArtifactError as exc:
                await self._fail(envelope, "artifact", str(exc))
                return
            loop = asyncio.get_running_loop()
            try:
                load_ns, measurement, accuracy = await loop.run_in_executor(
                    self._measurement_thread, self._measure, job, path
                )
            except ArtifactError as exc:  # the dataset's files
                await self._fail(envelope, "artifact", str(exc))
                return
            except DlscopeError as exc:
                await self._fail(envelope, "predictor", str(exc))
                return
            await self._bus.publish(
                envelope.caused(
                    EvaluationMeasured(
                        evaluation_id=job.evaluation_id,
                        agent_id=self.agent_id,
                        batch_size=job.scenario.batch_size,
                        load_ns=load_ns,
                        first_inference_ns=measurement.first_inference_ns,
                        warmup_latencies_ns=measurement.warmup_latencies_ns,
                        latencies_ns=measurement.latencies_ns,
                        duration_ns=measurement.duration_ns,
                        accuracy=accuracy,
                    ),
                    producer=self.name,
                )
            )

    async def _gave_up(self, envelope: Envelope, reason: str) -> None:
        """A job that cannot run (invalid, or failing every retry) fails its evaluation."""
        failed = failure_caused_by(envelope, stage="predictor", reason=reason, producer=self.name)
        if failed is not None:
            await self._bus.publish(failed)

    def _measure(
        self, job: RunEvaluation, path: Path
    ) -> tuple[int, Measurement, AccuracyMeasurement | None]:
        """On the measurement thread: load, time the scenario, then (with a dataset) measure
        accuracy. With a dataset the timed queries use its first pre-processed batch."""
        dataset = None if job.dataset is None else load_dataset(job.dataset, job.split)
        if dataset is None:
            real: list[np.ndarray] = []
            inputs = synthetic_inputs(
                job.manifest, batch_size=job.scenario.batch_size, seed=job.scenario.seed
            )
        else:
            real = batches(job.manifest, dataset, job.scenario.batch_size)
            inputs = {job.manifest.inputs[0].name: real[0]}
        predictor = self._predictors.create()
        start = time.perf_counter_ns()
        predictor.open(job.manifest, path, hardware=job.hardware)
        load_ns = time.perf_counter_ns() - start
        try:
            run = predictor.predict
            measurement = measure(
                lambda: run(inputs), warmup=job.scenario.warmup, iterations=job.scenario.iterations
            )
            accuracy = (
                None
                if dataset is None
                else measure_accuracy(predictor.predict, job.manifest, dataset, real)
            )
            return load_ns, measurement, accuracy
        except DlscopeError:
            raise
        except Exception as exc:  # the framework's own error types
            raise PredictorError(
                f"{self.framework} failed running {job.manifest.ref}: {exc}"
            ) from exc
        finally:
            predictor.close()

    async def _fail(self, cause: Envelope, stage: FailureStage, reason: str) -> None:
        log.warning("evaluation %s failed at %s: %s", cause.correlation_id, stage, reason)
        failed = failure_caused_by(cause, stage=stage, reason=reason, producer=self.name)
        assert failed is not None, "a job always names its evaluation"
        await self._bus.publish(failed)
