"""Whether a worker's attempt at a job still stands, and what becomes of a measurement that
comes after its evaluation's outcome.

An evaluation has one outcome: the first ``evaluation.completed`` or ``evaluation.failed`` in
its stream. A worker frozen mid-job (SIGSTOP, a stalled host, a long network cut) may wake
after the scheduler declared it offline and failed the evaluation, or after another worker
took the job up as the next attempt. So before it publishes its measurement, and before it
runs a job delivered again, a worker asks the scheduler (request/reply, routing key
``rpc.scheduler.attempt`` on the jobs exchange):

    scheduler.attempt        evaluation + attempt + agent -> scheduler.attempt-reply:
                             it stands, or why it no longer does

A scheduler that does not answer in time is no answer: the worker goes on as if it stands
(the analyzer and the read model still keep the first outcome). A measurement whose attempt
no longer stands is published as an event of the evaluation's stream, for the record:

    evaluation.late_measurement   worker: what was measured, and why it came too late; never
                                  an outcome, never a change of the evaluation's status
"""

from __future__ import annotations

import uuid

from pydantic import Field

from shared.inputs import Count, Name, Reason
from shared.messages.envelope import Payload
from shared.messages.evaluation import EvaluationMeasured

__all__ = ["ATTEMPT_CALL", "AttemptStanding", "CheckAttempt", "EvaluationLateMeasurement"]

# The scheduler's call: ``rpc_key("scheduler", ATTEMPT_CALL)``.
ATTEMPT_CALL = "attempt"


class CheckAttempt(Payload):
    """Does this attempt at the evaluation's job still stand?"""

    TYPE = "scheduler.attempt"

    evaluation_id: uuid.UUID
    attempt: Count = Field(description="the delivery of the job the worker runs")
    agent_id: Name


class AttemptStanding(Payload):
    TYPE = "scheduler.attempt-reply"

    stands: bool = Field(description="false: the evaluation has its outcome, or a later attempt")
    reason: Reason = Field(
        default="", description="why it no longer stands; or, standing, what the scheduler knew"
    )


class EvaluationLateMeasurement(Payload):
    """A measurement that came after the evaluation's outcome (or after a later attempt took
    the job up): kept in the evaluation's stream, never its result."""

    TYPE = "evaluation.late_measurement"

    evaluation_id: uuid.UUID
    agent_id: Name
    attempt: Count = 1
    reason: Reason = Field(description="why it is late, as the scheduler told the worker")
    measurement: EvaluationMeasured
    experiment_id: uuid.UUID | None = None
