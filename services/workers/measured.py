"""What a job measured, as the events the worker publishes: the measurement, its layers'
profile before it, or, when the attempt no longer stands, the measurement recorded as late.

``measured_event`` builds ``EvaluationMeasured`` from the framework process's ``Run`` and
the worker's own view of the run (the conditions it started in, the device's window);
``report`` publishes it, or says why it could not be.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from services.workers.handover import Run
from shared.errors import MessageTooLarge, MessageUnreadable
from shared.messages import (
    DeviceLease,
    EvaluationLateMeasurement,
    EvaluationMeasured,
    EvaluationProfiled,
    FailureStage,
    LevelOutcome,
    Payload,
    RunEvaluation,
)

__all__ = ["CONDITIONS", "measured_event", "report"]

log = logging.getLogger(__name__)

# What the validity verdict reads from the environment captured at an evaluation's start and
# the look back at busy processes as its run starts.
CONDITIONS = ("cpu_governor", "load_average", "cpu_threads", "heavy_processes")

Publish = Callable[[Payload], Awaitable[None]]


def measured_event(
    job: RunEvaluation,
    run: Run,
    *,
    agent_id: str,
    attempt: int,
    looked: dict[str, Any],
    lease: DeviceLease,
    tracing: list[LevelOutcome],
) -> EvaluationMeasured:
    """The measurement of ``job``'s attempt: what the framework process measured, in the
    conditions the worker ``looked`` at as the run started, on the device ``lease``."""
    return EvaluationMeasured(
        **_attempt(job, agent_id, attempt),
        scenario=job.scenario,
        load_ns=run.load_ns,
        run=run.native,
        loadgen=run.loadgen,
        conditions={
            **{k: looked[k] for k in CONDITIONS if k in looked},
            "concurrent": job.concurrent,
        },
        layers=run.layers,
        trace_level=job.trace_level,
        tracing=tracing,
        accuracy=run.accuracy,
        fingerprint=run.fingerprint,
        generation=run.generation,
        perplexity=run.perplexity,
        lease=lease,
        machine=run.machine,
    )


async def report(
    publish: Publish,
    job: RunEvaluation,
    run: Run,
    measured: EvaluationMeasured,
    *,
    gone: str | None,
) -> tuple[FailureStage, str] | None:
    """Publish ``measured`` (its layers' profile first), or, when the attempt no longer
    stands (``gone`` says why), the measurement as late; the stage and reason it failed when
    no consumer could read it."""
    about = _attempt(job, measured.agent_id, measured.attempt)
    if gone is not None:
        log.warning("the measurement of %s is late: %s", job.evaluation_id, gone)
        await publish(EvaluationLateMeasurement(**about, reason=gone, measurement=measured))
        return None
    try:
        if run.tracing.profiled:  # before the measurement: layers are there once it completes
            await publish(
                EvaluationProfiled(
                    **about,
                    framework=job.framework,
                    trace_level=job.trace_level,
                    levels=measured.tracing,
                    passes=list(run.tracing.profiled),
                )
            )
        await publish(measured)
    except MessageTooLarge as exc:  # no consumer would read it: say so, once
        return "analysis", (
            f"the measurement is too large to record ({exc}): shorten the run "
            "(max_duration_s, iterations) or raise DLSCOPE_MAX_MESSAGE_BYTES"
        )
    except MessageUnreadable as exc:  # the same: failed with the reason, not left running
        return "analysis", f"the measurement cannot be recorded: {exc}"
    return None


def _attempt(job: RunEvaluation, agent_id: str, attempt: int) -> dict[str, Any]:
    """What names the attempt in each of its events."""
    return {
        "evaluation_id": job.evaluation_id,
        "agent_id": agent_id,
        "attempt": attempt,
        "experiment_id": job.experiment_id,
    }
