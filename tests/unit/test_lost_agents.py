"""The scheduler's view of running jobs: which attempt runs where, and what losing an agent
means for its job."""

from __future__ import annotations

import uuid

from services.scheduler.agents import AgentEntry
from services.scheduler.running import RunningJobs, after_loss, loss_reason
from shared.messages import EvaluationScheduled, EvaluationStarted

EVALUATION = uuid.uuid4()


def scheduled(pinned: str | None = None) -> EvaluationScheduled:
    return EvaluationScheduled(
        evaluation_id=EVALUATION,
        model="m",
        model_version="1.0.0",
        framework="onnxruntime",
        hardware="cpu",
        agent_id=pinned,
        candidates=["a", "b"],
    )


def started(agent_id: str, attempt: int = 1) -> EvaluationStarted:
    return EvaluationStarted(
        evaluation_id=EVALUATION,
        agent_id=agent_id,
        host=f"host-{agent_id}",
        environment={},
        attempt=attempt,
    )


def agent(agent_id: str, framework: str = "onnxruntime") -> AgentEntry:
    return AgentEntry(agent_id, "h", framework, "1.31.1", "cpu", 5.0, last_seen=0.0)


def test_the_newest_attempt_is_the_job_s_whatever_order_starts_arrive_in() -> None:
    jobs = RunningJobs()
    jobs.scheduled(scheduled())
    assert jobs.started(started("b", attempt=2), uuid.uuid4()) is not None
    # the first attempt's start, late: not the job's any more
    assert jobs.started(started("a", attempt=1), uuid.uuid4()) is None
    job = jobs.get(EVALUATION)
    assert job is not None
    assert (job.agent_id, job.host, job.attempt, job.framework) == ("b", "host-b", 2, "onnxruntime")
    # losing the first agent loses nothing; losing the second loses the job, once
    assert jobs.lose("a", "gone") == []
    assert [j.lost for j in jobs.lose("b", "missed 3 heartbeats")] == ["missed 3 heartbeats"]
    assert jobs.lose("b", "again") == []


def test_an_ended_evaluation_is_forgotten_and_a_late_start_does_not_revive_it() -> None:
    jobs = RunningJobs()
    jobs.started(started("a"), uuid.uuid4())
    jobs.settled(EVALUATION)
    assert jobs.started(started("b", attempt=2), uuid.uuid4()) is None
    assert jobs.get(EVALUATION) is None
    assert len(jobs) == 0


def test_a_lost_agent_heard_from_again_has_its_job_back() -> None:
    jobs = RunningJobs()
    jobs.started(started("a"), uuid.uuid4())
    jobs.lose("a", "missed 3 heartbeats")
    assert [j.evaluation_id for j in jobs.found("a")] == [EVALUATION]
    job = jobs.get(EVALUATION)
    assert job is not None
    assert job.lost is None


def test_a_job_fails_at_once_when_pinned_or_when_no_other_agent_of_its_kind_is_online() -> None:
    jobs = RunningJobs()
    jobs.scheduled(scheduled(pinned="a"))
    jobs.started(started("a"), uuid.uuid4())
    (pinned,) = jobs.lose("a", "missed 3 heartbeats (one every 5 s)")
    assert after_loss(pinned, [agent("b")]) == (
        "the job was pinned to a, so no other agent can take it up"
    )
    assert loss_reason(pinned, "bench-1") == (
        "agent a on host bench-1 went offline (missed 3 heartbeats (one every 5 s)) while "
        "running this evaluation"
    )

    jobs = RunningJobs()
    jobs.scheduled(scheduled())
    jobs.started(started("a", attempt=2), uuid.uuid4())
    (shared,) = jobs.lose("a", "shutdown")
    # only agents of another framework, or the lost one itself, are online
    assert after_loss(shared, [agent("a"), agent("t", framework="pytorch")]) == (
        "no other agent of onnxruntime on cpu is online to take it up"
    )
    # another of its kind will be given the job by the broker: wait for it
    assert after_loss(shared, [agent("b")]) is None
    assert loss_reason(shared, None).endswith("while running this evaluation (attempt 2)")
