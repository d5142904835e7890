"""The job runner: one evaluation job, from its message to the worker's last event.

job -> started (attempt, environment) -> version check -> verified artifact
    -> measured, by the framework process (services.workers.session)
    -> or failed, with the stage and the reason (the framework process's death included);
       the worker stays up for the next job
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from opentelemetry.trace import Tracer

from services.workers.environment import environment, host_name
from services.workers.isolation import FrameworkProcess
from services.workers.measurement import Run
from shared.artifacts import ArtifactCache
from shared.errors import ArtifactError, DlscopeError
from shared.manifests import matches
from shared.messages import (
    Envelope,
    EvaluationMeasured,
    EvaluationStarted,
    FailureStage,
    LayerTiming,
    Payload,
    RunEvaluation,
    attempt_key,
    failure_caused_by,
)
from shared.messaging import Bus, current_delivery

__all__ = ["JobRunner"]

log = logging.getLogger(__name__)

# What the validity verdict reads from the environment captured at an evaluation's start.
CONDITIONS = ("cpu_governor", "load_average", "cpu_threads", "heavy_processes")

Publish = Callable[[Payload], Awaitable[None]]


class JobRunner:
    def __init__(
        self,
        bus: Bus,
        framework: FrameworkProcess,
        artifacts: ArtifactCache,
        *,
        agent_id: str,
        results_dir: Path,
        tracer: Tracer,
    ) -> None:
        self.agent_id = agent_id
        self.name = f"worker {agent_id}"
        self._bus = bus
        self._framework = framework
        self._artifacts = artifacts
        self._results_dir = results_dir
        self._tracer = tracer
        self._one_at_a_time = asyncio.Lock()

    @property
    def busy(self) -> bool:
        return self._one_at_a_time.locked()

    async def run(self, envelope: Envelope) -> None:
        job = envelope.open(RunEvaluation)
        attempt = current_delivery().attempt
        async with self._one_at_a_time:
            # Each attempt's events are its own (a second attempt's start is not a duplicate
            # of the first's): their ids are derived from the job and the attempt.
            key = attempt_key(attempt)

            async def publish(payload: Payload) -> None:
                await self._bus.publish(envelope.caused(payload, producer=self.name, key=key))

            described = self._framework.described
            captured = environment(
                {"framework": self._framework.framework, "framework_version": described.version},
                seed=job.scenario.seed,
                build=described.build,
                ours=FrameworkProcess.running,
            )
            await publish(
                EvaluationStarted(
                    evaluation_id=job.evaluation_id,
                    agent_id=self.agent_id,
                    host=host_name(),
                    environment=captured,
                    attempt=attempt,
                )
            )
            failure = await self._measure(job, publish, captured, attempt)
            if failure is not None:
                stage, reason = failure
                log.warning("evaluation %s failed at %s: %s", job.evaluation_id, stage, reason)
                failed = failure_caused_by(
                    envelope, stage=stage, reason=reason, producer=self.name, key=key
                )
                assert failed is not None, "a job always names its evaluation"
                await self._bus.publish(failed)

    async def _measure(
        self, job: RunEvaluation, publish: Publish, captured: dict[str, Any], attempt: int
    ) -> tuple[FailureStage, str] | None:
        """Measure ``job`` and publish what was measured; or the stage and reason it failed."""
        unsupported = self._unsupported(job)
        if unsupported is not None:
            return "validation", unsupported
        try:
            path = await asyncio.to_thread(self._artifacts.fetch, job.manifest.source)
        except ArtifactError as exc:
            return "artifact", str(exc)
        try:
            run: Run = await self._framework.call(
                "services.workers.session:measure_job",
                job,
                str(path),
                str(self._results_dir / str(job.evaluation_id)),
            )
        except ArtifactError as exc:  # the dataset's files
            return "artifact", str(exc)
        except DlscopeError as exc:  # the framework's error, or its process's death
            return "predictor", str(exc)
        if run.layers:
            self._trace_layers(run.layers, run.layers_wall_ns)
        await publish(
            EvaluationMeasured(
                evaluation_id=job.evaluation_id,
                agent_id=self.agent_id,
                scenario=job.scenario,
                load_ns=run.load_ns,
                run=run.native,
                loadgen=run.loadgen,
                conditions={k: captured[k] for k in CONDITIONS if k in captured},
                layers=run.layers,
                accuracy=run.accuracy,
                fingerprint=run.fingerprint,
                experiment_id=job.experiment_id,
                attempt=attempt,
            )
        )
        return None

    def _unsupported(self, job: RunEvaluation) -> str | None:
        """Why this worker's framework version cannot take ``job``, or None if it can. The
        scheduler routes by version, but a job on the shared queue reaches any worker of the
        framework, whatever version it runs."""
        framework = self._framework.framework
        version = self._framework.described.version
        for constraint, whose in (
            (job.framework_version, "the request asks for"),
            (job.manifest.version_needed_by(framework), f"model {job.manifest.ref} needs"),
        ):
            if not matches(version, constraint):
                return (
                    f"{framework} {version} on agent {self.agent_id} does not satisfy "
                    f"{constraint!r}, the version {whose}"
                )
        return None

    def _trace_layers(self, layers: list[LayerTiming], wall_ns: int) -> None:
        """One query's layers as HARDWARE-level spans under the job's span: their device
        timestamps moved onto the wall clock, the first kernel queued when the query began."""
        offset = wall_ns - layers[0].queued_ns
        with self._tracer.start_as_current_span(
            "hardware: one query, per layer",
            start_time=wall_ns,
            attributes={"dlscope.trace_level": "HARDWARE", "dlscope.layers": len(layers)},
            end_on_exit=False,  # it ends when the last layer did, on the device's clock
        ) as query:
            for layer in layers:
                span = self._tracer.start_span(
                    f"{layer.op_type} {layer.node}",
                    start_time=layer.start_ns + offset,
                    attributes={
                        "dlscope.trace_level": "HARDWARE",
                        "onnx.node": layer.node,
                        "onnx.op_type": layer.op_type,
                        "onnx.fused": layer.fused,
                        "onnx.input_shapes": [str(shape) for shape in layer.input_shapes],
                        "onnx.output_shapes": [str(shape) for shape in layer.output_shapes],
                        "opencl.kernels": layer.kernels,
                        "opencl.queued_ns": layer.queued_ns,
                        "opencl.submit_ns": layer.submit_ns,
                    },
                )
                span.end(end_time=layer.end_ns + offset)
            query.end(end_time=layers[-1].end_ns + offset)
