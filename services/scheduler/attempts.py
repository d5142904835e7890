"""Whether a worker's attempt at a job still stands (the ``rpc.scheduler.attempt`` call).

A worker asks before it publishes its measurement and before it runs a job delivered again:
a worker frozen past its evaluation's failure, or past another worker taking the job up,
learns so when it wakes and records its result as late instead of as the evaluation's.

Pure: what the scheduler follows (``RunningJobs``) or the evaluation's row in the event store
in, the answer out. An attempt stands unless its evaluation has an outcome or a later attempt
started; what neither the scheduler nor the store knows stands (the worker may be faster than
the events about its own job), as does what a slow agent resumes after its agent was declared
offline, so long as the evaluation was not failed for it.
"""

from __future__ import annotations

from services.scheduler.running import RunningJobs
from shared.eventstore import EvaluationView
from shared.messages import AttemptStanding, CheckAttempt, EvaluationCompleted, EvaluationFailed

__all__ = ["described", "standing_by_row", "standing_here"]


def described(outcome: EvaluationCompleted | EvaluationFailed) -> str:
    """An outcome in words, for the reason a late worker is told."""
    if isinstance(outcome, EvaluationCompleted):
        return "completed"
    return f"failed ({outcome.stage}: {outcome.reason})"


def standing_here(check: CheckAttempt, jobs: RunningJobs) -> AttemptStanding | None:
    """The answer from what the scheduler follows; None when it does not know the evaluation
    (a restart, or one settled long ago): the event store is asked then."""
    outcome = jobs.outcome(check.evaluation_id)
    if outcome is not None:
        return _late(check, f"the evaluation has already {outcome}")
    job = jobs.get(check.evaluation_id)
    if job is None:
        return None
    return _against(check, latest=job.attempt, agent_id=job.agent_id)


def standing_by_row(check: CheckAttempt, view: EvaluationView | None) -> AttemptStanding:
    """The answer from the evaluation's row in the event store (None: no row yet)."""
    if view is None:
        return AttemptStanding(
            stands=True, reason="neither the scheduler nor the event store knows the evaluation"
        )
    if view.status == "completed":
        return _late(check, "the evaluation has already completed")
    if view.status == "failed":
        return _late(check, f"the evaluation has already failed ({view.error})")
    return _against(check, latest=view.attempts, agent_id=view.agent_id)


def _against(check: CheckAttempt, *, latest: int, agent_id: str | None) -> AttemptStanding:
    if latest > check.attempt:
        by = f" on agent {agent_id}" if agent_id else ""
        return _late(check, f"attempt {latest}{by} took the job up since")
    return AttemptStanding(stands=True)


def _late(check: CheckAttempt, why: str) -> AttemptStanding:
    return AttemptStanding(
        stands=False,
        reason=f"attempt {check.attempt} of evaluation {check.evaluation_id} on agent "
        f"{check.agent_id} no longer stands: {why}",
    )
