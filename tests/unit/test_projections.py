"""The read models' rules as pure folds: given an evaluation's (or an experiment's) events in
log order, then the row a user reads. An outcome is final; a row exists only once requested;
the same events give the same row whatever batches they were folded in."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from harness.payloads import latency, single_stream_run
from shared.eventstore.experiments import EXPERIMENT_ROOT, evolve_experiment, experiment_key
from shared.eventstore.projections import evaluation_key, evolve_evaluation, fold, fold_evaluation
from shared.eventstore.views import EvaluationView, ExperimentView, StoredEvent
from shared.messages import (
    EvaluationCompleted,
    EvaluationFailed,
    EvaluationLateMeasurement,
    EvaluationMeasured,
    EvaluationRequested,
    EvaluationStarted,
    ExperimentCompared,
    ExperimentComparison,
    ExperimentFailed,
    ExperimentRequested,
    LatencySummary,
    ModelRef,
    ParityTolerance,
    Payload,
)

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
EVALUATION = uuid.uuid4()
EXPERIMENT = uuid.uuid4()
_positions = itertools.count(1)


def stored(payload: Payload, *, at: float, stream_id: str | None = None) -> StoredEvent:
    """An event as the store gives it back, at the next log position."""
    position = next(_positions)
    return StoredEvent(
        position=position,
        stream_id=stream_id or f"evaluation-{EVALUATION}",
        version=position,
        event_id=uuid.uuid4(),
        type=payload.TYPE,
        schema_version=1,
        occurred_at=T0 + timedelta(seconds=at),
        recorded_at=T0 + timedelta(seconds=at),
        trace_id="0" * 32,
        correlation_id=EVALUATION,
        causation_id=None,
        traceparent=None,
        tracestate=None,
        producer="test",
        stored_payload=payload.model_dump(mode="json"),
    )


def requested(at: float = 0) -> StoredEvent:
    return stored(
        EvaluationRequested(evaluation_id=EVALUATION, model="squeezenet", framework="onnxruntime"),
        at=at,
    )


def started(at: float, attempt: int = 1, agent_id: str = "agent-a") -> StoredEvent:
    payload = EvaluationStarted(
        evaluation_id=EVALUATION, agent_id=agent_id, host="bench", environment={}, attempt=attempt
    )
    return stored(payload, at=at)


def measured(at: float, attempt: int = 1) -> StoredEvent:
    return stored(_measurement(attempt), at=at)


def _measurement(attempt: int = 1) -> EvaluationMeasured:
    return EvaluationMeasured(
        evaluation_id=EVALUATION,
        agent_id="agent-a",
        attempt=attempt,
        load_ns=1_000_000,
        run=single_stream_run(),
    )


def completed(at: float, p50_ms: float = 4.2) -> StoredEvent:
    return stored(EvaluationCompleted(evaluation_id=EVALUATION, result=latency(p50_ms)), at=at)


def result_of(p50_ms: float) -> LatencySummary:
    """A completion's result as the read model keeps it."""
    return latency(p50_ms)


def failed(at: float, reason: str = "agent a went offline") -> StoredEvent:
    return stored(EvaluationFailed(evaluation_id=EVALUATION, stage="agent", reason=reason), at=at)


def late_measurement(at: float) -> StoredEvent:
    payload = EvaluationLateMeasurement(
        evaluation_id=EVALUATION, agent_id="agent-a", reason="failed", measurement=_measurement()
    )
    return stored(payload, at=at)


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
    assert (row.status, row.error, row.result) == ("completed", None, result_of(4.2))


def test_the_first_of_two_completions_or_failures_stands() -> None:
    twice = settle([requested(), completed(6, p50_ms=1.0), completed(7, p50_ms=9.0)])
    assert twice.result == result_of(1.0)
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


def test_an_event_its_contract_refuses_today_changes_no_row() -> None:
    # Given a failure stored before its contract was tightened: it names no stage
    refused = replace(failed(9), stored_payload={"evaluation_id": str(EVALUATION), "reason": "old"})
    assert refused.read() is None
    # Then it is about no evaluation: the row stays as the admissible events left it
    assert evaluation_key(refused) is None
    before = [requested(), started(1)]
    assert fold_evaluation([*before, refused]) == fold_evaluation(before)


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


def experiment_event(payload: Payload, at: float) -> StoredEvent:
    return stored(payload, at=at, stream_id=f"experiment-{EXPERIMENT}")


COMPARISON = ExperimentComparison(
    complete=True,
    reference=EVALUATION,
    tolerance=ParityTolerance(),
    evaluations=[],
    parity=[],
    parity_ok=None,
    failures=[],
)


@pytest.mark.parametrize(
    ("outcomes", "status", "error", "comparison"),
    [
        (["experiment.failed", "experiment.compared"], "failed", "nothing to run", None),
        (
            ["experiment.compared", "experiment.failed"],
            "compared",
            None,
            COMPARISON,
        ),
    ],
)
def test_an_experiments_first_outcome_stands(
    outcomes: list[str], status: str, error: str | None, comparison: ExperimentComparison | None
) -> None:
    request = ExperimentRequested(experiment_id=EXPERIMENT, models=[ModelRef(model="digits-cnn")])
    events = [experiment_event(request, 0)]
    for n, type_ in enumerate(outcomes):
        outcome: Payload = (
            ExperimentFailed(experiment_id=EXPERIMENT, reason="nothing to run")
            if type_ == "experiment.failed"
            else ExperimentCompared(experiment_id=EXPERIMENT, comparison=COMPARISON)
        )
        events.append(experiment_event(outcome, 1 + n))
    row: ExperimentView | None = fold(events, evolve_experiment, EXPERIMENT_ROOT, experiment_key)
    assert row is not None
    assert (row.status, row.error, row.comparison) == (status, error, comparison)
    assert fold(events[1:], evolve_experiment, EXPERIMENT_ROOT, experiment_key) is None
