"""The read models' rules as pure folds: given an evaluation's (or an experiment's) events in
log order, then the row a user reads. An outcome is final; a row exists only once requested;
the same events give the same row whatever batches they were folded in."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.eventstore.experiments import EXPERIMENT_ROOT, evolve_experiment, experiment_key
from shared.eventstore.projections import evaluation_key, evolve_evaluation, fold, fold_evaluation
from shared.eventstore.views import EvaluationView, ExperimentView, StoredEvent

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
EVALUATION = uuid.uuid4()
EXPERIMENT = uuid.uuid4()
_positions = itertools.count(1)


def stored(type_: str, payload: dict[str, Any], *, at: float) -> StoredEvent:
    """An event as the store gives it back, at the next log position."""
    position = next(_positions)
    return StoredEvent(
        position=position,
        stream_id=f"evaluation-{EVALUATION}",
        version=position,
        event_id=uuid.uuid4(),
        type=type_,
        schema_version=1,
        occurred_at=T0 + timedelta(seconds=at),
        recorded_at=T0 + timedelta(seconds=at),
        trace_id="0" * 32,
        correlation_id=EVALUATION,
        causation_id=None,
        traceparent=None,
        tracestate=None,
        producer="test",
        payload=payload,
    )


def requested(at: float = 0) -> StoredEvent:
    return stored(
        "evaluation.requested",
        {"evaluation_id": str(EVALUATION), "model": "squeezenet", "framework": "onnxruntime"},
        at=at,
    )


def started(at: float, attempt: int = 1, agent_id: str = "agent-a") -> StoredEvent:
    return stored(
        "evaluation.started",
        {
            "evaluation_id": str(EVALUATION),
            "agent_id": agent_id,
            "host": "bench",
            "environment": {},
            "attempt": attempt,
        },
        at=at,
    )


def measured(at: float, attempt: int = 1) -> StoredEvent:
    payload = {"evaluation_id": str(EVALUATION), "agent_id": "agent-a", "attempt": attempt}
    return stored("evaluation.measured", payload, at=at)


def completed(at: float, p50_ms: float = 4.2) -> StoredEvent:
    payload = {"evaluation_id": str(EVALUATION), "result": {"p50_ms": p50_ms}}
    return stored("evaluation.completed", payload, at=at)


def failed(at: float, reason: str = "agent a went offline") -> StoredEvent:
    payload = {"evaluation_id": str(EVALUATION), "stage": "agent", "reason": reason}
    return stored("evaluation.failed", payload, at=at)


def late_measurement(at: float) -> StoredEvent:
    payload = {"evaluation_id": str(EVALUATION), "agent_id": "agent-a", "reason": "failed"}
    return stored("evaluation.late_measurement", payload, at=at)


def one_by_one(events: list[StoredEvent]) -> EvaluationView | None:
    """As the recorder folds them, one append at a time (no late request here)."""
    row: EvaluationView | None = None
    for event in events:
        if evaluation_key(event) is not None:  # else about no row: the log keeps it
            row = evolve_evaluation(row, event)
    return row


def settle(events: list[StoredEvent]) -> EvaluationView:
    row = fold_evaluation(events)
    assert row is not None
    # The same fold however it is replayed (a rebuild, or one event at a time)
    assert one_by_one(events) == row
    assert fold_evaluation(list(reversed(events))) == row  # positions decide, not list order
    return row


def test_a_completion_after_the_failure_changes_nothing() -> None:
    # Given a worker frozen past its failure, whose measurement was completed when it woke
    row = settle([requested(), started(1), failed(18), measured(62), completed(63)])
    # Then the failure stands: no result beside its error
    assert (row.status, row.error, row.result) == ("failed", "agent: agent a went offline", None)


def test_a_failure_after_the_completion_changes_nothing() -> None:
    row = settle([requested(), started(1), measured(5), completed(6), failed(9, "timeout echo")])
    assert (row.status, row.error, row.result) == ("completed", None, {"p50_ms": 4.2})


def test_the_first_of_two_completions_or_failures_stands() -> None:
    twice = settle([requested(), completed(6, p50_ms=1.0), completed(7, p50_ms=9.0)])
    assert twice.result == {"p50_ms": 1.0}
    echoes = settle([requested(), failed(6, "crash"), failed(7, "timeout")])
    assert echoes.error == "agent: crash"


def test_a_late_measurement_changes_nothing() -> None:
    events = [requested(), started(1), failed(18)]
    before = settle(events)
    # The late-measurement event is about no row: it stays in the log only
    assert settle([*events, late_measurement(62)]) == before


def test_an_event_nobody_requested_makes_no_row() -> None:
    assert fold_evaluation([failed(5)]) is None
    assert fold_evaluation([started(1), measured(2), completed(3)]) is None
    assert evolve_evaluation(None, failed(5)) is None


def test_a_request_that_comes_late_folds_in_what_came_before_it() -> None:
    # Given a failure stored before its request (the request retried at the recorder)
    early, request = failed(7, "no such model"), requested(at=6)
    row = fold_evaluation([early, request])
    assert row is not None
    # Then the request made the row, and the failure is its outcome
    assert (row.status, row.error, row.model) == ("failed", "agent: no such model", "squeezenet")
    assert (row.requested_at, row.updated_at) == (
        T0 + timedelta(seconds=6),
        T0 + timedelta(seconds=7),
    )
    assert row.last_position == request.position


def test_a_late_attempt_leaves_an_outcome_alone() -> None:
    row = settle([requested(), started(1), failed(18), started(30, attempt=2, agent_id="b")])
    assert (row.status, row.error, row.result) == ("failed", "agent: agent a went offline", None)


# --- experiments ----------------------------------------------------------------------------


def experiment_event(type_: str, at: float, **payload: Any) -> StoredEvent:
    event = stored(type_, {"experiment_id": str(EXPERIMENT), **payload}, at=at)
    return StoredEvent(**{**_fields(event), "stream_id": f"experiment-{EXPERIMENT}"})


def _fields(event: StoredEvent) -> dict[str, Any]:
    return {name: getattr(event, name) for name in StoredEvent.__slots__}


@pytest.mark.parametrize(
    ("outcomes", "status", "error", "comparison"),
    [
        (["experiment.failed", "experiment.compared"], "failed", "nothing to run", None),
        (["experiment.compared", "experiment.failed"], "compared", None, {"complete": True}),
    ],
)
def test_an_experiments_first_outcome_stands(
    outcomes: list[str], status: str, error: str | None, comparison: dict[str, Any] | None
) -> None:
    events = [experiment_event("experiment.requested", 0, models=[{"model": "digits-cnn"}])]
    for n, type_ in enumerate(outcomes):
        extra = (
            {"reason": "nothing to run"}
            if type_ == "experiment.failed"
            else {"comparison": {"complete": True}}
        )
        events.append(experiment_event(type_, 1 + n, **extra))
    row: ExperimentView | None = fold(events, evolve_experiment, EXPERIMENT_ROOT, experiment_key)
    assert row is not None
    assert (row.status, row.error, row.comparison) == (status, error, comparison)
    assert fold(events[1:], evolve_experiment, EXPERIMENT_ROOT, experiment_key) is None
