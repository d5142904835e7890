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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from services.workers.accuracy import batches, measure_accuracy
from services.workers.environment import capabilities, environment, host_name
from services.workers.fingerprint import input_identity, output_fingerprint
from services.workers.inputs import (
    FINGERPRINT_SEED,
    SYNTHETIC_SAMPLES,
    fingerprint_inputs,
    query_inputs,
    query_sizes,
)
from services.workers.predictors import predictor_factory
from shared.artifacts import ArtifactCache
from shared.datasets import Dataset, load_dataset
from shared.errors import ArtifactError, DlscopeError, PredictorError
from shared.manifests import matches
from shared.measurement import ScenarioResult, check_sample_count, run_scenario
from shared.measurement.loadgen import LoadgenResult, run_loadgen
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
    LayerTiming,
    OutputFingerprint,
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


Predict = Callable[[dict[str, np.ndarray]], list[np.ndarray]]
# What the validity verdict reads from the environment captured at an evaluation's start.
CONDITIONS = ("cpu_governor", "load_average", "cpu_threads", "heavy_processes")
# Accuracy runs the whole dataset through the model in batches of this size (a model with a
# fixed batch dimension gets its own), independent of the timed scenario's query sizes.
ACCURACY_BATCH = 32


@dataclass(frozen=True)
class _Run:
    """What the measurement thread hands back."""

    load_ns: int
    native: ScenarioResult | None
    loadgen: LoadgenResult | None
    accuracy: AccuracyMeasurement | None
    fingerprint: OutputFingerprint
    layers: list[LayerTiming] | None
    layers_wall_ns: int = 0  # the wall clock when the query whose layers were timed began


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
        self._tracer = runtime.telemetry.tracer
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
                capabilities={**capabilities(), **self._device()},
                heartbeat_interval_s=self._settings.heartbeat_interval_s,
            )
        )

    def _device(self) -> dict[str, Any]:
        # A device that is absent is announced as such: the worker stays up, and each job
        # then fails with the reason, as the issue of a missing device asks.
        try:
            return self._predictors.device(self.hardware)
        except DlscopeError as exc:
            return {"device_error": str(exc)}

    async def _announce_on_discovery(self, envelope: Envelope) -> None:
        await self._announce()

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self._settings.heartbeat_interval_s)
            try:
                await self._publish_agent_event(
                    AgentHeartbeat(
                        agent_id=self.agent_id,
                        busy=self._one_job_at_a_time.locked(),
                        host=host_name(),
                        framework=self.framework,
                        framework_version=self._predictors.version(),
                        hardware=self.hardware,
                    )
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
            captured = environment(predictor_description, seed=job.scenario.seed)
            await self._bus.publish(
                envelope.caused(
                    EvaluationStarted(
                        evaluation_id=job.evaluation_id,
                        agent_id=self.agent_id,
                        host=host_name(),
                        environment=captured,
                    ),
                    producer=self.name,
                )
            )
            unsupported = self._unsupported(job)
            if unsupported is not None:
                await self._fail(envelope, "validation", unsupported)
                return
            try:
                path = await asyncio.to_thread(self._artifacts.fetch, job.manifest.source)
            except ArtifactError as exc:
                await self._fail(envelope, "artifact", str(exc))
                return
            loop = asyncio.get_running_loop()
            try:
                run = await loop.run_in_executor(self._measurement_thread, self._measure, job, path)
            except ArtifactError as exc:  # the dataset's files
                await self._fail(envelope, "artifact", str(exc))
                return
            except DlscopeError as exc:
                await self._fail(envelope, "predictor", str(exc))
                return
            if run.layers:
                self._trace_layers(run.layers, run.layers_wall_ns)
            await self._bus.publish(
                envelope.caused(
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
                    ),
                    producer=self.name,
                )
            )

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

    async def _gave_up(self, envelope: Envelope, reason: str) -> None:
        """A job that cannot run (invalid, or failing every retry) fails its evaluation."""
        failed = failure_caused_by(envelope, stage="predictor", reason=reason, producer=self.name)
        if failed is not None:
            await self._bus.publish(failed)

    def _unsupported(self, job: RunEvaluation) -> str | None:
        """Why this worker's framework version cannot take ``job``, or None if it can. The
        scheduler routes by version, but a job on the shared queue reaches any worker of the
        framework, whatever version it runs."""
        version = self._predictors.version()
        for constraint, whose in (
            (job.framework_version, "the request asks for"),
            (job.manifest.version_needed_by(self.framework), f"model {job.manifest.ref} needs"),
        ):
            if not matches(version, constraint):
                return (
                    f"{self.framework} {version} on agent {self.agent_id} does not satisfy "
                    f"{constraint!r}, the version {whose}"
                )
        return None

    def _measure(self, job: RunEvaluation, path: Path) -> _Run:
        """On the measurement thread: load, run the scenario, then (with a dataset) measure
        accuracy, then record the output fingerprint (and, where the framework times its
        layers on the device, one query's per-layer timings).

        The queries run on inputs built before timing starts, one batch per query size the
        scenario uses: the dataset's first samples, or seeded synthetic inputs. So a latency
        is the framework call on ready inputs and nothing else."""
        scenario = job.scenario.measurement()
        dataset = None if job.dataset is None else load_dataset(job.dataset, job.split)
        sample_count = len(dataset) if dataset is not None else SYNTHETIC_SAMPLES
        check_sample_count(scenario, sample_count)  # before the model is loaded
        by_size = {
            size: query_inputs(job.manifest, dataset, size, seed=job.scenario.seed)
            for size in query_sizes(scenario)
        }
        # The fingerprint's fixed input set: the dataset's first batch, made once up front.
        first = None if dataset is None else next(batches(job.manifest, dataset, ACCURACY_BATCH))
        predictor = self._predictors.create()
        start = time.perf_counter_ns()
        predictor.open(job.manifest, path, hardware=job.hardware)
        load_ns = time.perf_counter_ns() - start
        try:
            predict = predictor.predict

            largest = by_size[max(by_size)]

            def run_query(samples: Sequence[int]) -> object:
                inputs = by_size.get(len(samples))
                if inputs is None:  # LoadGen's last, partial offline batch: a view, no copy
                    inputs = {name: array[: len(samples)] for name, array in largest.items()}
                return predict(inputs)

            native = loadgen = None
            if job.scenario.driver == "loadgen":
                loadgen = run_loadgen(
                    scenario,
                    run_query,
                    output_dir=self._settings.home / "results" / str(job.evaluation_id),
                    sample_count=sample_count,
                    load_ns=load_ns,
                )
            else:
                native = run_scenario(
                    scenario, run_query, sample_count=sample_count, load_ns=load_ns
                )
            accuracy = (
                None
                if dataset is None
                else measure_accuracy(
                    predictor.predict,
                    job.manifest,
                    dataset,
                    batches(job.manifest, dataset, ACCURACY_BATCH),
                )
            )
            fingerprint = _fingerprint(predictor.predict, job, dataset, first)
            layers_wall_ns = time.time_ns()
            layers = _layer_timings(predictor, by_size[min(by_size)])
            return _Run(load_ns, native, loadgen, accuracy, fingerprint, layers, layers_wall_ns)
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


def _layer_timings(predictor: object, inputs: dict[str, np.ndarray]) -> list[LayerTiming] | None:
    """One query's per-layer device timings, from a predictor that records them (OpenCL's
    profiling events); None for frameworks that do not."""
    timings = getattr(predictor, "layer_timings", None)
    if timings is None:
        return None
    predictor.predict(inputs)  # type: ignore[attr-defined]
    return [
        LayerTiming.model_validate({k: v for k, v in layer.as_dict().items() if k != "duration_ns"})
        for layer in timings()
    ]


def _fingerprint(
    predict: Predict, job: RunEvaluation, dataset: Dataset | None, first: np.ndarray | None
) -> OutputFingerprint:
    """The outputs on the fixed input set: the dataset's first batch, or seeded inputs."""
    manifest = job.manifest
    if dataset is None or first is None:
        inputs = fingerprint_inputs(manifest)
        identity = input_identity(
            manifest, inputs, kind="synthetic", description=f"synthetic, seed {FINGERPRINT_SEED}"
        )
    else:
        inputs = {manifest.inputs[0].name: first}
        split = f" {dataset.split}" if dataset.split else ""
        identity = input_identity(
            manifest, inputs, kind="dataset", description=f"{dataset.ref}{split}, first batch"
        )
    return output_fingerprint(manifest, identity, predict(inputs))
