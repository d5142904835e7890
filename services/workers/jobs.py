"""The job runner: one evaluation job, from its message to the worker's last event.

job -> started (attempt, environment) -> version check -> verified artifact
    -> the device's lease (services.workers.leases: "waiting for the device" while another
       measurement holds it; failed at stage "timeout" if it never comes in time)
    -> measured, by the framework process (services.workers.framework.session), the lease held
    -> or failed, with the stage and the reason (the framework process's death included);
       the worker stays up for the next job

A job with ``concurrent`` takes no lease: it runs beside whatever else uses the device, and
its conditions say so (the verdict labels it measured under contention). Either way the
measurement records the device and its window (``EvaluationMeasured.lease``).

Before it publishes what the job came to (measured or failed), and before it runs a job
delivered again, the worker asks the scheduler whether its attempt still stands
(``shared.messages.attempts``): a worker frozen past its evaluation's failure, or past another
worker taking the job up, records its measurement as ``evaluation.late_measurement`` (a late
failure is only logged) and skips a job delivered again for an evaluation that is over. A
scheduler that does not answer in time changes nothing: the worker goes on as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.trace import Tracer

from services.workers.devices import worker_device
from services.workers.environment import busy_before, environment, host_name
from services.workers.handover import MEASURE_JOB, JobInputs
from services.workers.isolation import FrameworkProcess
from services.workers.leases import DeviceBusy, DeviceLeases, Held, Holder
from services.workers.measured import measured_event, report
from services.workers.standing import no_longer_stands
from services.workers.tracing import record_trace
from shared.artifacts import ArtifactCache
from shared.errors import ArtifactError, BrokerUnavailable, DlscopeError
from shared.manifests import matches
from shared.measurement.progress import WAITING_FOR_DEVICE, Step
from shared.messages import (
    PROGRESS_KEY,
    CheckAttempt,
    Envelope,
    EvaluationProgress,
    EvaluationStarted,
    FailureStage,
    Payload,
    RunEvaluation,
    attempt_key,
    failure_caused_by,
)
from shared.messaging import Bus, current_delivery
from shared.messaging.pause import when_available
from shared.telemetry import inject

__all__ = ["JobRunner"]

log = logging.getLogger(__name__)

# A wait for the device ends this much before the scheduler's own deadline for the job
# (DLSCOPE_EVALUATION_TIMEOUT_S from its start), so the failure says what it waited for.
WAIT_MARGIN_S = 10.0
WAIT_MARGIN_SHARE = 0.1

Publish = Callable[[Payload], Awaitable[None]]

# A measurement is minutes of work: a broker blip at its end is waited out this long before
# the job is handed back (then another attempt runs it again).
PUBLISH_PATIENCE_S = 20 * 60.0
# The jobs whose every event is published, remembered so a copy of one redelivered after a
# broker blip (RabbitMQ requeues what a lost channel left unacknowledged) is not run again.
REMEMBERED_JOBS = 1024


@dataclass(eq=False)
class JobRunner:
    bus: Bus
    framework: FrameworkProcess
    artifacts: ArtifactCache
    _: KW_ONLY
    agent_id: str
    results_dir: Path
    tracer: Tracer
    # The device each job measures is held alone (services.workers.leases), for at most the
    # evaluation's timeout less a margin; CUDA_VISIBLE_DEVICES names a GPU worker's.
    leases: DeviceLeases
    # How long the scheduler has to say whether an attempt still stands before the worker
    # goes on without its answer (DLSCOPE_RPC_TIMEOUT_S): a round trip takes milliseconds on
    # a healthy broker; a scheduler that is down costs a job this much.
    rpc_timeout_s: float = 10.0
    evaluation_timeout_s: float | None = None
    visible_gpus: str | None = None
    _one_at_a_time: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    _finished: OrderedDict[uuid.UUID, None] = field(default_factory=OrderedDict, init=False)

    @property
    def name(self) -> str:
        """This worker, as the producer of its events."""
        return f"worker {self.agent_id}"

    @property
    def busy(self) -> bool:
        return self._one_at_a_time.locked()

    async def run(self, job: RunEvaluation, envelope: Envelope) -> None:
        attempt = current_delivery().attempt
        async with self._one_at_a_time:
            taken_at = time.monotonic()
            if envelope.event_id in self._finished:
                # A copy of a job this worker already finished and reported: the broker
                # requeued it when the channel it was taken on broke before the ack.
                log.info("job %s was already run and reported here: not again", envelope.event_id)
                return
            gone = None if attempt == 1 else await self._no_longer_stands(envelope, job, attempt)
            if gone is not None:
                # Delivered again (its worker went away), but the evaluation is over, or a later
                # attempt runs it: running it again would only make a second outcome.
                log.warning("job %s not run: %s", envelope.event_id, gone)
                self._remember(envelope)
                return
            # Each attempt's events are its own (a second attempt's start is not a duplicate
            # of the first's): their ids are derived from the job and the attempt.
            key = attempt_key(attempt)

            async def publish(payload: Payload) -> None:
                await self._publish(envelope.caused(payload, producer=self.name, key=key))

            described = self.framework.described
            captured = environment(
                {"framework": self.framework.framework, "framework_version": described.version},
                seed=job.scenario.seed,
                build=described.build,
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

            async def tell(step: Step) -> None:
                await self._tell(envelope, job, step, attempt)

            async def stands() -> str | None:
                return await self._no_longer_stands(envelope, job, attempt)

            failure = await self._measure(
                job, publish, tell, stands, captured, attempt, self._wait_until(taken_at)
            )
            if failure is not None:
                await self._fail(envelope, job.evaluation_id, failure, stands, key)
            self._remember(envelope)

    async def _fail(
        self,
        job: Envelope,
        evaluation_id: uuid.UUID,
        failure: tuple[FailureStage, str],
        stands: Callable[[], Awaitable[str | None]],
        key: str | None,
    ) -> None:
        stage, reason = failure
        log.warning("evaluation %s failed at %s: %s", evaluation_id, stage, reason)
        if (gone := await stands()) is not None:  # an echo of the outcome it already has
            log.warning("the failure of %s is not published: %s", evaluation_id, gone)
            return
        failed = failure_caused_by(
            job, RunEvaluation, stage=stage, reason=reason, producer=self.name, key=key
        )
        assert failed is not None, "an opened job is a valid one"
        await self._publish(failed)

    def _remember(self, job: Envelope) -> None:
        self._finished[job.event_id] = None
        while len(self._finished) > REMEMBERED_JOBS:
            self._finished.popitem(last=False)

    async def _no_longer_stands(
        self, cause: Envelope, job: RunEvaluation, attempt: int
    ) -> str | None:
        check = CheckAttempt(
            evaluation_id=job.evaluation_id, attempt=attempt, agent_id=self.agent_id
        )
        return await no_longer_stands(
            self.bus,
            cause,
            check,
            producer=self.name,
            timeout_s=self.rpc_timeout_s,
            patience_s=PUBLISH_PATIENCE_S,
        )

    async def _publish(self, envelope: Envelope) -> None:
        """Publish ``envelope``, waiting out a broker outage: what was measured is published
        when the broker is back, not lost and not measured again. The event's id is fixed
        before the first try, so a try that reached the broker unconfirmed stores once."""
        await when_available(
            lambda: self.bus.publish(envelope),
            unavailable=BrokerUnavailable,
            what=f"{self.name}: publishing {envelope.type}",
            patience_s=PUBLISH_PATIENCE_S,
            cap=10.0,
        )

    async def _tell(
        self, job_message: Envelope, job: RunEvaluation, step: Step, attempt: int
    ) -> None:
        """Tell whoever watches where the job is: a notification, not an event, so one the
        broker cannot take now is dropped rather than waited for (the measurement goes on)."""
        notice = job_message.caused(
            EvaluationProgress(
                evaluation_id=job.evaluation_id,
                agent_id=self.agent_id,
                phase=step.phase,
                part=step.part,
                expected_s=step.expected_s,
                limit_s=step.limit_s,
                experiment_id=job.experiment_id,
                attempt=attempt,
            ),
            producer=self.name,
            key=uuid.uuid4().hex,
        )
        try:
            await self.bus.publish(
                notice,
                exchange=self.bus.topology.jobs,
                routing_key=PROGRESS_KEY,
                persistent=False,
            )
        except DlscopeError as exc:
            log.debug("progress of %s not told: %s", job.evaluation_id, exc)

    def _wait_until(self, taken_at: float) -> float | None:
        """When a job taken at ``taken_at`` stops waiting for its device: a little before
        the scheduler would fail it for having no outcome (its timeout counts from the
        job's start), so the failure names the device and its holder instead."""
        timeout = self.evaluation_timeout_s
        if timeout is None:
            return None
        return taken_at + timeout - min(WAIT_MARGIN_S, WAIT_MARGIN_SHARE * timeout)

    @contextlib.asynccontextmanager
    async def _device(
        self, job: RunEvaluation, tell: Callable[[Step], Awaitable[None]], until: float | None
    ) -> AsyncIterator[Held]:
        """The job's device, held for the block (or, ``concurrent``, only its window)."""
        device = worker_device(
            self.framework.hardware,
            self.framework.described.device,
            visible_gpus=self.visible_gpus,
        )
        if job.concurrent:
            async with self.leases.beside(device) as window:
                yield window
            return

        async def waiting(holder: Holder | None, left_s: float | None) -> None:
            held_by = f"held by {holder.short}" if holder is not None else "held by another process"
            log.info("%s waits for device %s, %s", job.evaluation_id, device.name, holder or "?")
            part = f"{WAITING_FOR_DEVICE} {device.name}, {held_by}"
            await tell(Step(WAITING_FOR_DEVICE, part, limit_s=left_s))

        wait_s = None if until is None else max(0.0, until - time.monotonic())
        async with self.leases.hold(
            device,
            evaluation_id=job.evaluation_id,
            agent_id=self.agent_id,
            wait_s=wait_s,
            on_wait=waiting,
        ) as held:
            yield held

    async def _measure(
        self,
        job: RunEvaluation,
        publish: Publish,
        tell: Callable[[Step], Awaitable[None]],
        stands: Callable[[], Awaitable[str | None]],
        captured: dict[str, Any],
        attempt: int,
        until: float | None = None,
    ) -> tuple[FailureStage, str] | None:
        """Measure ``job``, holding its device (waiting for it until ``until`` at most), and
        publish what was measured (as late, when ``stands`` says the attempt no longer does);
        or the stage and reason it failed."""
        unsupported = self._unsupported(job)
        if unsupported is not None:
            return "validation", unsupported
        await tell(Step("fetching the model"))
        try:
            inputs = await self._inputs(job)
        except ArtifactError as exc:
            return "artifact", str(exc)
        try:
            async with self._device(job, tell, until) as window:
                # The look back at other busy processes, as the run starts: the device is
                # held, this worker's framework process idle until the call.
                looked = {**captured, **busy_before(FrameworkProcess.running)}
                run = await self.framework.call(MEASURE_JOB, job, inputs, on_step=tell)
        except DeviceBusy as exc:
            return "timeout", str(exc)
        except ArtifactError as exc:  # the dataset's files
            return "artifact", str(exc)
        except DlscopeError as exc:  # the framework's error, or its process's death
            return "predictor", str(exc)
        measured = measured_event(
            job,
            run,
            agent_id=self.agent_id,
            attempt=attempt,
            looked=looked,
            lease=window.record(),
            tracing=record_trace(self.tracer, run.tracing),
        )
        return await report(publish, job, run, measured, gone=await stands())

    async def _inputs(self, job: RunEvaluation) -> JobInputs:
        """What the job's measurement is given: the model's verified files (only its
        tokenizer where the model runs in its server), where results go, and this job's
        span, which a served model's requests carry to the server."""
        fetch = self.artifacts.fetch
        source, tokenizer = job.manifest.source, job.manifest.tokenizer
        needs_weights = self.framework.described.needs_weights
        return JobInputs(
            model=None
            if source is None or not needs_weights
            else await asyncio.to_thread(fetch, source),
            results_dir=self.results_dir / str(job.evaluation_id),
            tokenizer=None if tokenizer is None else await asyncio.to_thread(fetch, tokenizer),
            traceparent=inject().get("traceparent"),
        )

    def _unsupported(self, job: RunEvaluation) -> str | None:
        """Why this worker's framework version cannot take ``job``, or None if it can. The
        scheduler routes by version, but a job on the shared queue reaches any worker of the
        framework, whatever version it runs."""
        framework = self.framework.framework
        version = self.framework.described.version
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
