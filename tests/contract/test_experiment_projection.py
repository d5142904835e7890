"""Contract of the ``experiments`` read model, the same on SQLite and PostgreSQL: given an
experiment's events, in order or not, the row says what a user of dlscope expects to read."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shared.eventstore import EventStore, ExperimentView, upgrade
from shared.messages import (
    Envelope,
    ExperimentCompared,
    ExperimentComparison,
    ExperimentFailed,
    ExperimentGap,
    ExperimentMember,
    ExperimentRequested,
    ExperimentScheduled,
    ModelRef,
    ParityTolerance,
    Payload,
    experiment_stream,
)

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
    else:
        url = f"sqlite+aiosqlite:///{tmp_path / 'dlscope.db'}"
    await upgrade(url)
    async with EventStore.from_url(url) as event_store:
        yield event_store


class Experiment:
    """The events of one experiment, as the services publish them."""

    def __init__(self) -> None:
        self.experiment_id = uuid.uuid4()
        self.member = ExperimentMember(
            evaluation_id=uuid.uuid4(),
            model="digits-cnn",
            model_version="1.0.0",
            framework="onnxruntime",
            framework_version="1.31.1",
            agent_id="ort",
            host="bench",
        )

    def _event(self, payload: Payload, seconds: float) -> Envelope:
        envelope = Envelope.wrap(
            payload,
            stream_id=experiment_stream(self.experiment_id),
            correlation_id=self.experiment_id,
        )
        return envelope.model_copy(update={"occurred_at": T0 + timedelta(seconds=seconds)})

    def requested(self, at: float) -> Envelope:
        return self._event(
            ExperimentRequested(
                experiment_id=self.experiment_id,
                models=[ModelRef(model="digits-cnn"), ModelRef(model="digits-cnn-torch")],
            ),
            at,
        )

    def scheduled(self, at: float) -> Envelope:
        return self._event(
            ExperimentScheduled(
                experiment_id=self.experiment_id,
                members=[self.member],
                skipped=[ExperimentGap(framework="pytorch", reason="no online worker")],
                tolerance=ParityTolerance(),
                deadline_s=60,
            ),
            at,
        )

    def compared(self, at: float) -> Envelope:
        comparison = ExperimentComparison(
            complete=True,
            reference=self.member.evaluation_id,
            tolerance=ParityTolerance(),
            evaluations=[],
            parity=[],
            parity_ok=None,
            failures=[],
        )
        return self._event(
            ExperimentCompared(experiment_id=self.experiment_id, comparison=comparison), at
        )

    def failed(self, at: float) -> Envelope:
        return self._event(
            ExperimentFailed(experiment_id=self.experiment_id, reason="nothing to run"), at
        )


async def view(store: EventStore, experiment: Experiment) -> ExperimentView:
    row = await store.get_experiment(experiment.experiment_id)
    assert row is not None, f"no row for experiment {experiment.experiment_id}"
    return row


async def test_an_experiment_is_followed_from_request_to_comparison(store: EventStore) -> None:
    experiment = Experiment()
    await store.append([experiment.requested(0)])
    assert (await view(store, experiment)).status == "requested"
    assert (await view(store, experiment)).model == "digits-cnn"  # the reference

    await store.append([experiment.scheduled(1)])
    scheduled = await view(store, experiment)
    assert scheduled.status == "scheduled"
    assert scheduled.members is not None
    assert [m.agent_id for m in scheduled.members] == ["ort"]
    assert scheduled.skipped == (
        ExperimentGap(
            reason="no online worker",
            framework="pytorch",
            model=None,
            agent_id=None,
            evaluation_id=None,
        ),
    )

    await store.append([experiment.compared(9)])
    done = await view(store, experiment)
    assert done.status == "compared"
    comparison = done.comparison
    assert comparison is not None
    assert comparison.reference == experiment.member.evaluation_id
    assert (done.requested_at, done.updated_at) == (T0, T0 + timedelta(seconds=9))


async def test_a_late_request_fills_the_row_but_does_not_move_the_status_back(
    store: EventStore,
) -> None:
    experiment = Experiment()
    await store.append([experiment.scheduled(1), experiment.compared(2)])
    await store.append([experiment.requested(0)])
    row = await view(store, experiment)
    assert row.status == "compared"
    assert row.request is not None
    assert row.requested_at == T0


async def test_a_failed_experiment_says_why(store: EventStore) -> None:
    experiment = Experiment()
    await store.append([experiment.requested(0), experiment.failed(1)])
    row = await view(store, experiment)
    assert (row.status, row.error) == ("failed", "nothing to run")


async def test_an_experiments_first_outcome_stands(store: EventStore) -> None:
    failed_first, compared_first = Experiment(), Experiment()
    await store.append([failed_first.requested(0), failed_first.failed(1)])
    await store.append([failed_first.compared(2)])
    await store.append([compared_first.requested(0), compared_first.compared(1)])
    await store.append([compared_first.failed(2)])
    failed = await view(store, failed_first)
    assert (failed.status, failed.error, failed.comparison) == ("failed", "nothing to run", None)
    compared = await view(store, compared_first)
    assert (compared.status, compared.error) == ("compared", None)
    assert compared.comparison is not None


async def test_an_event_about_an_experiment_nobody_requested_makes_no_row(
    store: EventStore,
) -> None:
    experiment = Experiment()
    await store.append([experiment.failed(1)])
    assert await store.get_experiment(experiment.experiment_id) is None


async def test_experiments_are_listed_newest_first_and_rebuilt_identically(
    store: EventStore,
) -> None:
    older, newer = Experiment(), Experiment()
    await store.append([older.requested(0), older.scheduled(1), newer.requested(5)])
    listed = await store.list_experiments()
    assert [e.experiment_id for e in listed] == [newer.experiment_id, older.experiment_id]
    assert [e.experiment_id for e in await store.list_experiments(status="scheduled")] == [
        older.experiment_id
    ]
    with pytest.raises(ValueError, match="unknown status 'done'"):
        await store.list_experiments(status="done")

    await store.rebuild_projections()
    assert await store.list_experiments() == listed
