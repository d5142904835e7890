"""Whether a worker's attempt still stands, as the scheduler answers it: from the jobs it
follows, else from the evaluation's row. A frozen worker that wakes after its evaluation's
failure, or after another worker took its job up, is told so; anything else stands."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime

from services.scheduler.attempts import described, standing_by_row, standing_here
from services.scheduler.running import RunningJobs
from shared.eventstore import EvaluationView
from shared.messages import (
    CheckAttempt,
    EvaluationFailed,
    EvaluationScheduled,
    EvaluationStarted,
)

EVALUATION = uuid.uuid4()


def check(attempt: int = 1, agent_id: str = "agent-a") -> CheckAttempt:
    return CheckAttempt(evaluation_id=EVALUATION, attempt=attempt, agent_id=agent_id)


def started(agent_id: str, attempt: int) -> EvaluationStarted:
    return EvaluationStarted(
        evaluation_id=EVALUATION, agent_id=agent_id, host="h", environment={}, attempt=attempt
    )


def following() -> RunningJobs:
    jobs = RunningJobs()
    jobs.scheduled(
        EvaluationScheduled(
            evaluation_id=EVALUATION,
            model="squeezenet",
            model_version="1.0.1",
            framework="onnxruntime",
            hardware="cpu",
            agent_id=None,
            candidates=["agent-a", "agent-b"],
        )
    )
    return jobs


def test_a_running_attempt_stands_even_before_its_start_is_heard() -> None:
    jobs = following()
    answer = standing_here(check(), jobs)
    assert answer is not None
    assert answer.stands
    jobs.started(started("agent-a", 1), uuid.uuid4())
    lost = jobs.lose("agent-a", "missed 3 heartbeats")  # slow, not failed for it (yet)
    assert lost
    answer = standing_here(check(), jobs)
    assert answer is not None
    assert answer.stands


def test_an_attempt_after_its_evaluations_failure_no_longer_stands() -> None:
    jobs = following()
    jobs.started(started("agent-a", 1), uuid.uuid4())
    failure = EvaluationFailed(evaluation_id=EVALUATION, stage="agent", reason="agent-a offline")
    jobs.settled(EVALUATION, described(failure))
    answer = standing_here(check(), jobs)
    assert answer is not None
    assert not answer.stands
    assert answer.reason == (
        f"attempt 1 of evaluation {EVALUATION} on agent agent-a no longer stands: the "
        "evaluation has already failed (agent: agent-a offline)"
    )
    # and a job delivered again for it is not run either
    again = standing_here(check(attempt=2, agent_id="agent-b"), jobs)
    assert again is not None
    assert not again.stands


def test_an_attempt_overtaken_by_a_later_one_no_longer_stands() -> None:
    jobs = following()
    jobs.started(started("agent-b", 2), uuid.uuid4())
    answer = standing_here(check(attempt=1), jobs)
    assert answer is not None
    assert not answer.stands
    assert answer.reason.endswith("attempt 2 on agent agent-b took the job up since")
    current = standing_here(check(attempt=2, agent_id="agent-b"), jobs)
    assert current is not None
    assert current.stands


def test_an_evaluation_the_scheduler_does_not_follow_is_judged_by_its_row() -> None:
    assert standing_here(check(), RunningJobs()) is None
    now = datetime.now(UTC)
    row = EvaluationView(
        evaluation_id=EVALUATION,
        status="running",
        model="squeezenet",
        model_version="1.0.1",
        framework="onnxruntime",
        hardware="cpu",
        agent_id="agent-a",
        host="h",
        environment={},
        attempts=1,
        trace_id="0" * 32,
        request=None,
        result=None,
        error=None,
        requested_at=now,
        updated_at=now,
        last_position=3,
    )
    assert standing_by_row(check(), row).stands
    assert standing_by_row(check(), None).stands  # not recorded yet: the worker goes on
    failed = standing_by_row(check(), replace(row, status="failed", error="timeout: 3600 s"))
    assert not failed.stands
    assert failed.reason.endswith("has already failed (timeout: 3600 s)")
    assert not standing_by_row(check(), replace(row, status="completed")).stands
    overtaken = standing_by_row(check(), replace(row, attempts=2, agent_id="agent-b"))
    assert not overtaken.stands
